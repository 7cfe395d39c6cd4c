"""The ``sibyl-pg`` command line (rule: command-line). Every subcommand reads ``DATABASE_URL``;
without it the embedded PostgreSQL in the project's data folder is started and used."""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130
"""The exit code of a command interrupted by Ctrl-C (128 + SIGINT, as the shell reports it)."""

# Ctrl-C while these modules load (half a second, before main() and its handler run): one line
# and exit 130, as in main(), not a KeyboardInterrupt traceback
try:
    import asyncio
    import contextlib
    import enum
    import importlib
    import logging
    import os
    import shutil
    import signal
    import tempfile
    import time
    from collections.abc import Iterable, Iterator
    from pathlib import Path
    from types import ModuleType
    from typing import IO, Annotated, Any, Literal

    import pydantic
    import typer

    from app.cli.admin import register as register_admin_commands
    from app.cli.progress import port_in_use, progress, step
    from app.core.db import DATABASE_HINT, database_refusal, database_url, make_engine
    from app.core.errors import DomainError, Unavailable, causes
    from app.core.settings import get_settings
    from app.repo import housekeeping
except KeyboardInterrupt:
    sys.stderr.write("sibyl-pg: interrupted\n")
    raise SystemExit(INTERRUPTED_EXIT) from None

cli = typer.Typer(
    help="sibyl-pg: relational-graph memory for AI agents, on PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_cli = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)
cli.add_typer(keys_cli, name="keys")
register_admin_commands(cli, keys_cli)  # `keys list`, `admin ...` (app/cli/admin.py)
communities_cli = typer.Typer(help="Detect memory communities.", no_args_is_help=True)
cli.add_typer(communities_cli, name="communities")
stats_cli = typer.Typer(help="Search word statistics (documents per word).", no_args_is_help=True)
cli.add_typer(stats_cli, name="stats")


def _dev_tool(package: str) -> ModuleType:
    """Import ``package`` (``bench`` or ``evaluation``: dev tools outside the service's package,
    never imported by ``serve``), or stop with a line saying how to install it."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as error:
        if error.name != package:
            raise
        raise _err(
            f"`{package}` is not installed here: run from a checkout with `make install`"
            " (or `pip install -e '.[dev,bench]'`)"
        ) from None


@cli.command(
    "bench",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """The benchmark (docs/benchmark.md); `sibyl-pg bench --help` lists its commands."""
    _dev_tool("bench")
    from bench.cli import bench_cli

    typer.main.get_command(bench_cli).main(
        args=list(ctx.args), prog_name="sibyl-pg bench", standalone_mode=True
    )


DEMO_READERS = ("user_typing_reader", "user_packaging_reader", "user_org_admin", "user_outsider")


def _err(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@cli.command()
def migrate() -> None:
    """Bring the database to the newest migration."""
    from app.core.migrations import upgrade

    upgrade(database_url())
    typer.echo("database is at the newest migration", err=True)


class OnError(enum.StrEnum):
    """What ``sibyl-pg import`` does with a line the rules refuse."""

    stop = "stop"
    skip = "skip"


USAGE_EXIT = 2
"""The exit code of a command given options it cannot run with (as the option parser's)."""

REJECTED_EXIT = 3
"""The exit code of an import with ``--on-error skip`` that left lines out (0: every line
imported; 1: the import stopped, nothing more written)."""


@cli.command("import")
def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    batch_size: Annotated[
        int,
        typer.Option(
            min=1, max=100_000, help="Lines per batch (committed alone with --commit-batches)"
        ),
    ] = 500,
    commit_batches: Annotated[
        bool,
        typer.Option(
            "--commit-batches",
            help="Commit each batch on its own (default: the whole file or nothing)",
        ),
    ] = False,
    on_error: Annotated[
        OnError,
        typer.Option(
            "--on-error",
            help="stop: a refused line stops the import, nothing written (default); skip: "
            "refused lines go to the reject file, the rest is imported (exit code 3)",
        ),
    ] = OnError.stop,
    rejects: Annotated[
        Path | None,
        typer.Option(
            "--rejects",
            help="Where --on-error skip writes the refused lines, one JSON object each (line, "
            "rule, reason, record); default: FILE.rejects.ndjson",
        ),
    ] = None,
) -> None:
    """Bulk-import an NDJSON file: idempotent (a record stated twice: the last line wins), all
    or nothing by default; a refused line is reported with its number and the offending id, or
    with --on-error skip left out and listed in a reject file."""
    from app.importers import ndjson

    skip = on_error is OnError.skip
    if rejects is not None and not skip:
        raise _err(
            "--rejects names where --on-error skip writes the refused lines: add it", USAGE_EXIT
        )
    # /dev/stdin, <(...), a named pipe: it can be read only once, and it has no folder of its
    # own for the default reject file (stdin redirected from a file is a file under /dev too)
    piped = not file.is_file() or file.absolute().parts[1:2] in (("dev",), ("proc",))
    if skip and piped and rejects is None:
        raise _err("reading from a pipe, --on-error skip needs --rejects FILE", USAGE_EXIT)
    target = rejects or file.with_name(file.name + ".rejects.ndjson")
    if skip and _same_file(target, file):
        raise _err(f"--rejects {target} is the file being imported: name another file")
    with contextlib.ExitStack() as stack:
        if piped:  # spooled to a temporary file: counted for the progress bar, then imported
            spool = stack.enter_context(tempfile.TemporaryDirectory(prefix="sibyl-import-"))
            copy = Path(spool) / "input.ndjson"
            with (
                _nothing_written_if_interrupted(),
                file.open("rb") as source,
                copy.open("wb") as sink,
            ):
                shutil.copyfileobj(source, sink)
            file = copy
        out = None
        if skip:  # opened now: a path it cannot write stops the import before any work
            try:  # line-buffered: a refused line is in the file once its batch is committed
                out = _RejectFile(target.open("w", encoding="utf-8", buffering=1), target)
                stack.callback(out.close)
            except OSError as exc:
                raise _err(f"cannot write the reject file {target}: {exc.strerror}") from None
        with _nothing_written_if_interrupted(), file.open("rb") as fh:
            total = sum(1 for line in fh if line.strip())  # bytes: not UTF-8 is a refused line
        summary = _run_import(
            ndjson.read_file(file, lenient=skip),
            total=total,
            batch_size=batch_size,
            atomic=not commit_batches,
            on_error="skip" if skip else "stop",
            rejects=out,
        )
    if out is not None and out.error is not None:
        raise _err(
            f"every accepted line was written, but the reject file {target} could not be"
            f" written ({out.error.strerror}): import the file again with another --rejects"
            " (what is written stays as it is; the same lines are refused)"
        )
    if summary.rejected:
        typer.echo(f"  rejected lines written to {target}", err=True)
        raise typer.Exit(REJECTED_EXIT)


def _quiet_when_interrupted(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler of an import: a task that ends with the interrupt
    itself (Ctrl-C while the loop shuts down) is no error to print; anything else is."""
    from app.importers.ndjson import ImportInterrupted

    if isinstance(context.get("exception"), (KeyboardInterrupt, ImportInterrupted)):
        return
    loop.default_exception_handler(context)


@contextlib.contextmanager
def _nothing_written_if_interrupted() -> Iterator[None]:
    """Ctrl-C inside the block (an import's steps before it writes): says so, exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        raise _err(
            "import interrupted: nothing of the file was written", INTERRUPTED_EXIT
        ) from None


class _RejectFile:
    """The reject file ``path`` of an ``--on-error skip`` import: one JSON object a refused line
    (``lines`` of them written). A write that fails (a full disk) is kept in ``error``, not
    raised: the import goes on and the command says what was written and that the list was
    not."""

    def __init__(self, out: IO[str], path: Path) -> None:
        self.out = out
        self.path = path
        self.lines = 0
        self.error: OSError | None = None

    def write(self, refusal: Any) -> None:
        if self.error is None:
            try:
                print(refusal.to_json(), file=self.out)
                self.lines += 1
            except OSError as exc:
                self.error = exc

    def listed(self) -> str:
        """What the file lists, in words (an interrupted import's message)."""
        if self.error is not None:
            return f"the reject file {self.path} could not be written ({self.error.strerror})"
        said = "1 line" if self.lines == 1 else f"{self.lines} lines"
        return f"{said} refused so far, listed in {self.path}"

    def close(self) -> None:
        try:
            self.out.close()
        except OSError as exc:  # what a failed write left in the buffer, written again
            self.error = self.error or exc


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` names the file ``b`` names (a link, another spelling of the path)."""
    try:
        return a.exists() and a.samefile(b)
    except OSError:
        return False


@cli.command("import-peps")
def import_peps(
    directory: Annotated[
        Path | None, typer.Argument(help="The PEP corpus (default: SIBYL_PEPS_DIR)")
    ] = None,
) -> None:
    """Import the Python PEP corpus (../shared/data/peps) as the org ``org_python``."""
    from app.importers import ndjson, peps

    folder = directory or get_settings().peps_dir  # a bad setting stops it here, not after parsing
    if not folder.is_dir():
        raise _err(f"no PEP corpus at {folder} (set SIBYL_PEPS_DIR or pass DIR)")
    started = time.monotonic()
    # bodies are parsed by one process per core while the database writes the ones parsed
    # before them (a streamed import: one transaction, written as the records come)
    try:  # every file is read and its headers checked here, before anything is written
        with _nothing_written_if_interrupted():
            total, records = peps.pep_records(folder, workers=os.cpu_count() or 1)
    except (OSError, ValueError) as exc:  # a file the corpus cannot hold, named in the message
        raise _err(f"the PEP corpus at {folder} cannot be imported: {exc}") from None
    _run_import(ndjson.from_dicts(records), total=total, batch_size=64, streamed=True)
    typer.echo(f"done in {time.monotonic() - started:.1f}s", err=True)


def _run_import(
    records: Iterable[Any],
    *,
    total: int,
    batch_size: int,
    atomic: bool = True,
    on_error: Literal["stop", "skip"] = "stop",
    rejects: _RejectFile | None = None,
    streamed: bool = False,
) -> Any:
    """Import ``records`` (numbered, as :func:`app.importers.ndjson.read_file` yields them) with
    a progress display of its phases (:class:`app.cli.progress.PhaseProgress`); ``atomic``: all
    or nothing for the whole input (else each batch commits on its own); refused lines of a
    ``skip`` import written to ``rejects``; ``streamed``: written as they come (records whose keys
    are unique, :func:`app.importers.ndjson.import_records`). Prints the summary and returns it."""
    from app.cli.progress import PhaseProgress
    from app.importers import ndjson

    began = False  # the import itself started: before it, an interrupt wrote nothing

    async def go(display: PhaseProgress, out: _RejectFile | None) -> ndjson.ImportSummary:
        nonlocal began
        engine = make_engine()
        try:
            began = True
            return await ndjson.import_records(
                engine,
                records,
                total=total,
                batch_size=batch_size,
                evidence_lines=get_settings().evidence_lines,
                atomic=atomic,
                on_error=on_error,
                on_refused=out.write if out else None,
                progress=display,
                streamed=streamed,
            )
        finally:
            with contextlib.suppress(asyncio.CancelledError):  # done: Ctrl-C now loses nothing
                await engine.dispose()

    try:
        with PhaseProgress() as display, asyncio.Runner() as runner:
            runner.get_loop().set_exception_handler(_quiet_when_interrupted)
            summary = runner.run(go(display, rejects))
    except KeyboardInterrupt:  # the task was cancelled outside the import's own steps
        said = (
            "nothing of the file was written"
            if not began
            else "twice, so what was written is not known: run it again (an import changes"
            " nothing that is already written)"
        )
        raise _err(f"import interrupted: {said}", INTERRUPTED_EXIT) from None
    except ndjson.ImportError_ as exc:
        more = f"; {exc.more} more lines of that step were refused" if exc.more else ""
        raise _err(f"import stopped at {exc} ({exc.outcome()}{more})") from None
    except ndjson.ImportInterrupted as exc:
        listed = f"; {rejects.listed()}" if rejects is not None else ""
        raise _err(f"import interrupted: {exc}{listed}", INTERRUPTED_EXIT) from None
    # the import is done: a Ctrl-C from here on would only turn its exit status into 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    typer.echo(summary.render())
    return summary


@keys_cli.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="The user the key acts as")],
    scopes: Annotated[str, typer.Option(help="Comma-separated: read,write,admin")] = "read",
    projects: Annotated[
        str | None, typer.Option(help="Comma-separated project ids the key is restricted to")
    ] = None,
    label: Annotated[str | None, typer.Option(help="A note to recognise the key by")] = None,
) -> None:
    """Mint an API key and print it, alone, on standard output (it is shown only once).

    A project of ``--projects`` that the user cannot read (a private project they are not a
    member of) is accepted (membership may come later) with a warning on standard error: the
    key reads nothing there until then."""
    from app.domain.keys import create_key
    from app.repo.readers import reader_by_key

    async def go() -> tuple[str, list[str]]:
        engine = make_engine()
        restricted = [p.strip() for p in projects.split(",")] if projects else None
        try:
            async with engine.begin() as conn:
                _, key = await create_key(
                    conn,
                    user_id=user,
                    scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                    projects=restricted,
                    label=label,
                )
                reader = await reader_by_key(conn, key=key)
                readable = reader.can_read_project if reader is not None else (lambda _: True)
                return key, [p for p in restricted or [] if not readable(p)]
        finally:
            await engine.dispose()

    try:
        key, unread = asyncio.run(go())
    except DomainError as exc:
        raise _err(exc.detail) from None
    for project in unread:
        typer.echo(
            f"warning: {user} cannot read project {project} (private, not a member):"
            " this key reads nothing there until they become one",
            err=True,
        )
    typer.echo(key)


@keys_cli.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key id (key_...)")]) -> None:
    """Revoke a key; it is refused from the next request on."""
    from app.domain.keys import revoke_key

    async def go() -> None:
        engine = make_engine()
        try:
            async with engine.begin() as conn:
                await revoke_key(conn, key_id=key_id)
        finally:
            await engine.dispose()

    try:
        asyncio.run(go())
    except DomainError as exc:
        raise _err(exc.detail) from None
    typer.echo(f"revoked {key_id}", err=True)


@communities_cli.command("rebuild")
def communities_rebuild(
    org: Annotated[
        str | None, typer.Option("--org", help="Only this org (default: every org)")
    ] = None,
) -> None:
    """Re-detect and replace communities, per org in one transaction, and recount the search
    word statistics of an org whose statistics a write left out of date (``stats refresh``
    recounts them whatever their state); print a summary each."""
    _rebuild_communities([org] if org else None)


@stats_cli.command("refresh")
def stats_refresh(
    org: Annotated[
        str | None, typer.Option("--org", help="Only this org (default: every org)")
    ] = None,
) -> None:
    """Recount the search word statistics (documents per lexeme and audience; docs/search.md),
    per org, without holding writes back; print each org's audiences and documents."""
    from app.repo import term_stats
    from app.repo.communities import org_ids

    async def go() -> dict[str, tuple[int, int, int]]:
        engine = make_engine()
        try:
            async with engine.connect() as conn:
                known = await org_ids(conn)
            if org is not None and org not in known:
                raise _err(f"no such org: {org}")
            done = await term_stats.refresh_orgs(engine, [org] if org else known)
            async with engine.connect() as conn:
                return {
                    o: (*n, await term_stats.stale_audiences(conn, org_id=o))
                    for o, n in done.items()
                }
        finally:
            await engine.dispose()

    for org_id, (audiences, documents, stale) in asyncio.run(go()).items():
        line = f"{org_id}: {documents} documents in {audiences} audiences"
        if stale:  # writes (or a refresh that overlapped) took them over during the count
            line += (
                f"; {stale} audiences left stale by writes during the count"
                " (run it again, or let the server's refresher count them)"
            )
        typer.echo(line)


@cli.command()
def embed(
    model: Annotated[
        str | None,
        typer.Option("--model", help="minilm or hashing (default: SIBYL_EMBEDDER)"),
    ] = None,
    org: Annotated[
        list[str] | None,
        typer.Option("--org", help="Only this org's memories (repeatable; default: every org)"),
    ] = None,
) -> None:
    """Write the vectors of every memory whose vectors are missing, stale or by another model
    (the re-ranking's and the semantic lane's: docs/search.md), with a progress bar; a serving
    process does the same in the background (but leaves another model's vectors alone).
    ``--org``: only those orgs' memories (a small org beside the PEPs). Needs the ``semantic``
    extra and pgvector on the server."""
    from app.core.embedder import EmbedderUnavailable
    from app.repo import embeddings as embeddings_repo
    from app.repo.search.semantic import NO_PGVECTOR, tables_present
    from app.service.workers.embeddings import TICK_LOCK, embed_due
    from app.service.workers.tick import session_lock

    name = model or get_settings().embedder
    orgs = sorted(set(org)) if org else None  # None: every org

    async def go() -> int | None:
        engine = make_engine()
        try:
            async with engine.connect() as lock_conn, session_lock(lock_conn, TICK_LOCK) as held:
                if not held:  # one embedder at a time: two would store the same rows
                    return None
                async with engine.connect() as conn:
                    if not await tables_present(conn):
                        raise EmbedderUnavailable(NO_PGVECTOR)
                    known = await embeddings_repo.known_orgs(conn, orgs) if orgs else set()
                    unknown = [o for o in orgs or () if o not in known]
                    if unknown:
                        raise _err(f"no such org: {', '.join(unknown)}", 2)
                    due, _ = await embeddings_repo.due_count(conn, model=name, orgs=orgs)
                with progress("embedding memories", due) as advance:
                    seen = 0

                    def step_done(done: int, _total: int) -> None:
                        nonlocal seen
                        advance(done - seen)
                        seen = done

                    return await embed_due(engine, model_name=name, progress=step_done, orgs=orgs)
        finally:
            await engine.dispose()

    try:
        done = asyncio.run(go())
    except EmbedderUnavailable as exc:
        raise _err(f"the semantic lane cannot run here: {exc}", 2) from None
    if done is None:
        raise _err(
            "another embedder is writing vectors now (a serving process's worker or another "
            "`sibyl-pg embed`): it writes every due memory; `sibyl-pg doctor` shows how many "
            "are left",
            1,
        )
    typer.echo(f"{done} memories embedded with {name}", err=True)


semantic_cli = typer.Typer(help="The semantic lane's storage (pgvector).", no_args_is_help=True)
cli.add_typer(semantic_cli, name="semantic")


@semantic_cli.command("setup")
def semantic_setup() -> None:
    """Create the semantic lane's tables where the server now has pgvector (the migration
    creates them when it had it already); exit 2 when it still has none."""
    from app.repo.semantic_schema import create_semantic_tables

    async def go() -> bool:
        engine = make_engine()
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(create_semantic_tables)
        finally:
            await engine.dispose()

    if not asyncio.run(go()):
        raise _err("the database server has no pgvector (the vector extension)", 2)
    typer.echo("the semantic lane's tables are in place", err=True)


REBUILD_ATTEMPTS = 3
"""A community rebuild that collides with a concurrent delete is run again, up to this often."""


def _rebuild_communities(orgs: list[str] | None, *, skip_missing: bool = False) -> None:
    """Rebuild the communities of ``orgs`` (None: every org) and print each summary; an
    unknown org is an error, or silently skipped with ``skip_missing``."""
    from sqlalchemy import exc as sa_exc

    from app.core.db import write_tx
    from app.domain.communities import CommunitiesChanged, RebuildSummary, rebuild
    from app.repo import term_stats
    from app.repo.communities import org_ids, vacuum

    async def go() -> list[RebuildSummary]:
        engine = make_engine()
        try:
            async with engine.connect() as conn:
                known = await org_ids(conn)
            missing = [o for o in orgs or () if o not in known]
            if missing and not skip_missing:
                raise _err(f"no such org: {', '.join(missing)}")
            out = []
            chosen = known if orgs is None else [o for o in orgs if o in known]
            for org_id in chosen:
                for attempt in range(1, REBUILD_ATTEMPTS + 1):
                    try:
                        async with write_tx(engine) as conn:
                            # the last try holds retiring writes back: it cannot be overtaken
                            last = attempt == REBUILD_ATTEMPTS
                            out.append(await rebuild(conn, org_id=org_id, hold_writes=last))
                        break
                    except (sa_exc.IntegrityError, CommunitiesChanged):
                        # a write changed the org while the rebuild read it (it replaced
                        # nothing), or a memory was deleted meanwhile: run it again
                        if attempt == REBUILD_ATTEMPTS:
                            raise _err(
                                f"{org_id}: writes kept changing the org during"
                                f" {REBUILD_ATTEMPTS} rebuilds; its communities stay retired"
                                " (run it again when writes are fewer)"
                            ) from None
            # search statistics a write left out of date (a rebuild changes no search
            # document: after an import, which recounts them, there is nothing to do here)
            async with engine.connect() as conn:
                due = await term_stats.due_orgs(conn, chosen)
            if due:
                await term_stats.refresh_orgs(engine, due)
            # a bulk rewrite: fresh statistics and visibility map (autovacuum may be off)
            async with engine.connect() as conn:
                await vacuum(await conn.execution_options(isolation_level="AUTOCOMMIT"))
            return out
        finally:
            await engine.dispose()

    for summary in asyncio.run(go()):
        typer.echo(summary.render())


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    quiet: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Serve REST, MCP over streamable HTTP and the memory explorer (/ui) until interrupted."""
    import uvicorn

    from app.api.app import create_app

    _check_port(host, port)  # quickstart checked it before its set-up: again, in case
    url = database_url() if quiet else _database()
    os.environ["DATABASE_URL"] = url  # the embedded server is started once, here
    get_settings.cache_clear()
    _warn_unless_ready(url)
    # No access log: a line per request cost more than a short walk (docs/benchmark.md); errors
    # still log.
    _service_log()
    uvicorn.run(create_app(), host=host, port=port, log_level="info", access_log=False)


def _warn_unless_ready(url: str) -> None:
    """One line on stderr when the service cannot serve from ``url`` yet (unreachable, or not
    migrated): it serves anyway, since a database may come up or be migrated later, and
    ``/readyz`` answers 503 until then (a breaker's server sat silent on a URL that never
    worked)."""
    from app.service.session import NOT_READY_SCHEMA, readiness

    async def ask() -> str | None:
        engine = make_engine(url)
        try:
            return await readiness(engine)
        finally:
            await engine.dispose()

    why = asyncio.run(ask())
    if why is not None:
        fix = "run `sibyl-pg migrate`" if why == NOT_READY_SCHEMA else DATABASE_HINT.strip()
        typer.echo(
            f"sibyl-pg: warning: {why}: serving anyway, /readyz answers 503 until it is"
            f" fixed ({fix})",
            err=True,
        )


class _UvicornStyle(logging.Formatter):
    """``INFO:     message``, as uvicorn prints its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{(record.levelname + ':').ljust(9)} {record.getMessage()}"
        if record.exc_info:  # a 500's traceback (app/api/app.py) stays in the log
            line += "\n" + self.formatException(record.exc_info)
        return line


def _service_log() -> None:
    """The service's own log lines (``sibyl_pg.*``: the statistics refresher's recounts, errors)
    on standard error at INFO, in uvicorn's format, as the server's own lines are."""
    logger = logging.getLogger("sibyl_pg")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(_UvicornStyle())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


@cli.command("mcp")
def mcp_stdio() -> None:
    """Serve MCP over stdio as the reader of the API key in SIBYL_PG_API_KEY."""
    from app.mcp.stdio import KEY_VARIABLE, serve_stdio

    key = os.environ.get(KEY_VARIABLE, "").strip()
    if not key:
        raise _err(f"{KEY_VARIABLE} is not set (mint one: sibyl-pg keys create --user USER)", 2)
    try:
        asyncio.run(serve_stdio(key))
    except Unavailable as exc:  # the database, not the key: said as every other command says it
        raise _err(database_refusal(_database_fault(exc) or exc.detail), 2) from None
    except DomainError as exc:
        raise _err(f"{KEY_VARIABLE}: {exc.detail}", 2 if exc.status in (401, 403) else 1) from None


@cli.command()
def explain(
    verb: Annotated[str, typer.Argument(help="expand | slice | search")],
    body: Annotated[str, typer.Argument(help="The verb's request body, as JSON")],
    user: Annotated[str, typer.Option("--user", help="Read as this user (a full-scope key)")],
    fmt: Annotated[str, typer.Option("--format", help="text, or json (the whole report)")] = "text",
    projects: Annotated[
        str | None, typer.Option(help="Read as a key restricted to these projects (P1,P2)")
    ] = None,
    generic: Annotated[
        bool, typer.Option("--generic", help="Show the generic plan a pooled connection may use")
    ] = False,
    psql: Annotated[
        bool, typer.Option("--psql", help="Print psql scripts that replay each statement")
    ] = False,
) -> None:
    """Print the exact SQL a request of VERB sends, its bound values and its EXPLAIN (ANALYZE,
    BUFFERS) plan, statement by statement (docs/walk-plans.md). Nothing is written."""
    from app.cli.explain import run_explain

    run_explain(verb, body, user=user, fmt=fmt, projects=projects, generic=generic, psql=psql)


def _check_port(host: str, port: int) -> None:
    """Exit with a clear message, before any set-up, when ``host:port`` is taken."""
    if port_in_use(host, port):
        raise _err(
            f"port {port} on {host} is already in use (another `make run` or `sibyl-pg serve`?). "
            f"Stop it, or pick another port: `make run PORT={port + 1}` "
            f"(`sibyl-pg quickstart --port {port + 1}`)."
        )


def _database() -> str:
    """The database URL, announcing the embedded server's start when there is no
    ``DATABASE_URL`` (its first start runs ``initdb``)."""
    settings = get_settings()
    if settings.database_url:
        step("using the database in DATABASE_URL")
    else:
        pgdata = settings.data_dir / "pg"
        first = not (pgdata / "PG_VERSION").exists()
        if (pgdata / "postmaster.pid").exists():
            step(f"using the embedded PostgreSQL 16 in {pgdata} (already running)")
        else:
            step(
                f"starting the embedded PostgreSQL 16 in {pgdata}"
                + (" (first start: initdb, a few seconds)" if first else "")
            )
            from app.cli.progress import PhaseProgress

            with PhaseProgress() as display:  # initdb on busy cores: lines, not silence
                display.phase("PostgreSQL starting", None)
                return database_url(settings)
    return database_url(settings)


@cli.command("eval")
def eval_(
    directory: Annotated[
        Path | None, typer.Option("--peps", help="The PEP corpus (default: SIBYL_PEPS_DIR)")
    ] = None,
    questions: Annotated[
        list[Path] | None,
        typer.Option(
            "--questions",
            help="A question set (JSON Lines; repeatable; default: eval/questions.jsonl, "
            "eval/heldout.jsonl and the clean held-out sets eval/heldout2.jsonl and on)",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the whole report (JSON) here")
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the sibyl_eval database afterwards")
    ] = False,
    reuse: Annotated[
        bool, typer.Option("--reuse", help="Reuse sibyl_eval when it holds the corpus")
    ] = False,
    no_context: Annotated[
        bool, typer.Option("--no-context", help="Skip the context packs")
    ] = False,
    database: Annotated[
        str,
        typer.Option(
            "--database",
            help="The evaluation's own database on the server (created and dropped; default "
            "sibyl_eval)",
        ),
    ] = "sibyl_eval",
    locomo_dir: Annotated[
        Path | None,
        typer.Option(
            "--locomo",
            help="A folder of LoCoMo conv-*.json files (default: SIBYL_LOCOMO_DIR, else "
            "../shared/data/locomo)",
        ),
    ] = None,
    no_locomo: Annotated[
        bool, typer.Option("--no-locomo", help="Skip the LoCoMo conversations")
    ] = False,
    no_ablations: Annotated[
        bool, typer.Option("--no-ablations", help="Skip the ablation table")
    ] = False,
) -> None:
    """Run the evaluation (docs/eval.md): the PEP question sets and the LoCoMo conversations
    (beside the grep baseline), each imported fresh into its own database, then the ablation
    table; print recall, loop exposure, cost and what each stage or lane adds."""
    from rich.console import Console

    _dev_tool("evaluation")
    from evaluation import runner

    folder = directory or get_settings().peps_dir  # a bad setting stops it here, not after parsing
    if not folder.is_dir():
        raise _err(f"no PEP corpus at {folder} (set SIBYL_PEPS_DIR or pass --peps)")
    paths = [(p.stem, p) for p in questions] if questions else None
    chats = None if no_locomo else (locomo_dir or get_settings().locomo_dir)
    if chats is not None and not chats.is_dir():
        raise _err(f"no LoCoMo conversations at {chats} (set SIBYL_LOCOMO_DIR or pass --locomo)")
    console = Console(stderr=True)
    try:
        sets = runner.default_sets(paths)
        report = asyncio.run(
            runner.run_eval(
                peps_dir=folder,
                sets=sets,
                locomo_dir=chats,
                keep=keep,
                reuse=reuse,
                database=database,
                with_context=not no_context,
                ablations=not no_ablations,
                progress=console,
            )
        )
    except (ValueError, FileNotFoundError) as exc:
        raise _err(str(exc)) from None
    out = Console(width=max(Console().width, 100))
    runner.render(report, out)
    runner.render_locomo(report, out)
    runner.render_ablations(report, out)
    if json_out is not None:
        runner.write_json(report, json_out)
        typer.echo(f"report written to {json_out}", err=True)


@cli.command()
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON")] = False,
) -> None:
    """Check the PostgreSQL server the service uses (settings, extensions, indexes, visibility
    map, statistics, migrations) and print what to change and why (docs/doctor.md). Exit status:
    0 ok or warnings only, 1 a check failed, 2 the server could not be asked."""
    from app.cli.doctor import run_doctor

    run_doctor(as_json=as_json)


@cli.command()
def quickstart(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Set up, then exit")] = False,
) -> None:
    """What ``make run`` does: check the port, migrate, import the PEP corpus into an empty
    database, mint the demo keys (saved in ``.data/demo-keys.env``), then serve."""
    from app.core.migrations import upgrade

    if not no_serve:
        _check_port(host, port)  # before the set-up, not after it
    url = _database()
    os.environ["DATABASE_URL"] = url
    get_settings.cache_clear()
    step("migrating the database to the newest migration")
    upgrade(url)

    async def count() -> int:
        engine = make_engine()
        try:
            async with engine.connect() as conn:
                return await housekeeping.count_entities(conn)
        finally:
            await engine.dispose()

    if asyncio.run(count()) == 0:
        step(
            f"importing the PEP corpus from {get_settings().peps_dir} "
            "(the first time only; about 20 s, up to a minute on busy cores)"
        )
        import_peps(None)
    else:
        step("the database already holds memories: import skipped")
    step(
        "detecting communities of org_python (and recounting its search statistics if a write"
        " left them out of date)"
    )
    from app.cli.progress import PhaseProgress

    with PhaseProgress() as display:  # a line every few seconds while it works, not silence
        display.phase("communities and search statistics", None)
        _rebuild_communities(["org_python"], skip_missing=True)  # SHARES_COMMUNITY hops
    step("the demo keys: the saved ones that still work are kept, the others minted")
    keys_file = demo_keys()
    typer.echo(f"\ndemo keys (also in {keys_file}; `source` it for the README's curl calls):")
    typer.echo(keys_file.read_text())
    if not no_serve:
        _measured_plans()
        typer.echo(
            f"memory explorer: http://{host}:{port}/ui (sign in with a key above: "
            "TYPING_READER_KEY reads, TYPING_WRITER_KEY edits, DBA_KEY sees plans)\n"
        )
        # names the readiness line without its text: a script waiting for that text must not
        # take this line for it (the server answers only seconds later)
        step(
            f"starting the server on http://{host}:{port}: the explorer at /ui, REST under /api,"
            " MCP at /mcp, OpenAPI at /docs (it answers once uvicorn's own line says it is"
            " running; Ctrl-C stops)"
        )
        serve(host=host, port=port, quiet=True)


def _measured_plans() -> None:
    """Serve measured plans on the admin explain route while the database holds one org
    (``SIBYL_REST_EXPLAIN=single-org``, counted on every request) when the operator left the
    setting unset and it holds one now: a plan's figures count every org's rows, so they are
    shown only where no other org's rows are there to count."""
    if os.environ.get("SIBYL_REST_EXPLAIN"):
        return

    async def orgs() -> int:
        engine = make_engine()
        try:
            async with engine.connect() as conn:
                return await housekeeping.count_orgs(conn)
        finally:
            await engine.dispose()

    if asyncio.run(orgs()) == 1:
        # counted again on every request: an org imported later turns the figures off
        os.environ["SIBYL_REST_EXPLAIN"] = "single-org"
        get_settings.cache_clear()
        step(
            "one org in the database: admin keys see measured plans while it holds one"
            " (SIBYL_REST_EXPLAIN=single-org)"
        )


DEMO_WRITER = ("user_jelle_zijlstra", "TYPING_WRITER_KEY", "proj_typing")
"""The demo write key: a real PEP author (typing PEPs), contributor in ``proj_typing``."""

DEMO_DBA = ("user_org_admin", "DBA_KEY")
"""The demo ``read,admin`` key: the org admin's, for ``/api/admin`` and the explorer's plans."""


def _var(user: str) -> str:
    return user.removeprefix("user_").upper() + "_KEY"


def demo_keys(path: Path | None = None) -> Path:
    """Mint the demo keys unless the saved ones still work; write them to ``path`` (default
    ``<data_dir>/demo-keys.env``, mode 600) as ``NAME=key`` lines; return the path.

    A ``read`` key per demo reader (``TYPING_READER_KEY``, ``PACKAGING_READER_KEY``,
    ``ORG_ADMIN_KEY``, ``OUTSIDER_KEY``), ``TYPING_WRITER_KEY``, a ``read,write`` key of
    :data:`DEMO_WRITER`'s user, and ``DBA_KEY``, a ``read,admin`` key of :data:`DEMO_DBA`'s user.
    Uses ``DATABASE_URL`` (else the embedded server).

    A demo user that no longer exists (an admin deleted it) gets no key: its line in the file
    becomes a comment saying so, a warning says how to bring it back, and the rest goes on
    (``make run`` still serves)."""
    from app.core.errors import BadRequest, NotFound
    from app.domain.keys import create_key
    from app.repo.readers import reader_by_key

    path = path or get_settings().data_dir / "demo-keys.env"
    writer, writer_var, writer_project = DEMO_WRITER
    wanted = [(user, _var(user), ["read"]) for user in DEMO_READERS]
    wanted.append((writer, writer_var, ["read", "write"]))
    wanted.append((DEMO_DBA[0], DEMO_DBA[1], ["read", "admin"]))

    saved: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            if not name.startswith("#"):
                saved[name.strip()] = value.strip()

    refused: set[str] = set()

    async def go() -> dict[str, str]:
        engine = make_engine()
        out: dict[str, str] = {}
        try:
            async with engine.begin() as conn:
                for user, var, scopes in wanted:
                    key = saved.get(var)
                    if key and await reader_by_key(conn, key=key) is not None:
                        out[var] = key
                        continue
                    try:
                        _, out[var] = await create_key(
                            conn, user_id=user, scopes=scopes, label="demo"
                        )
                    except NotFound:  # the user was deleted: no key, said below
                        continue
                    except BadRequest:  # the admin scope, for a user no longer an org admin
                        refused.add(var)
                        continue
        finally:
            await engine.dispose()
        return out

    keys = asyncio.run(go())

    def key_line(user: str, var: str) -> str:
        if var in keys:
            return f"{var}={keys[var]}"
        if var in refused:
            typer.echo(
                f"sibyl-pg: warning: the demo user {user} is no longer an org admin, so {var}"
                " is not set (`sibyl-pg admin user-role` gives the role back)",
                err=True,
            )
            return f"# {var}: the demo user {user} is no longer an org admin"
        typer.echo(
            f"sibyl-pg: warning: the demo user {user} no longer exists, so {var} is not set"
            " (create it again with `sibyl-pg admin user-create`, or start from a fresh"
            " database)",
            err=True,
        )
        return f"# {var}: the demo user {user} no longer exists"

    lines = [key_line(user, var) for user, var, _ in wanted[:-2]]
    lines.append(
        f"# read,write key of {writer}, a contributor in {writer_project} (docs/api.md's writes)"
    )
    lines.append(key_line(writer, writer_var))
    lines.append(f"# read,admin key of {DEMO_DBA[0]}: /api/admin and the explorer's plans")
    lines.append(key_line(*DEMO_DBA))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    path.chmod(0o600)
    return path


def _database_fault(error: BaseException) -> str | None:
    """One line saying why the database could not be used (it refused or dropped the
    connection, its host is unknown, the database does not exist, the credentials are refused),
    or None when ``error`` is no such fault (a bug: its traceback is shown)."""
    import asyncpg

    reachable = (
        OSError,
        TimeoutError,
        asyncpg.InvalidCatalogNameError,
        asyncpg.InvalidAuthorizationSpecificationError,
        asyncpg.InvalidPasswordError,
        asyncpg.PostgresConnectionError,
        asyncpg.CannotConnectNowError,
    )
    for seen in causes(error):  # SQLAlchemy wraps the driver's error, which may wrap the socket's
        if isinstance(seen, reachable):
            return (str(seen).splitlines() or [type(seen).__name__])[0]
    return None


def _lock_timeout(error: BaseException) -> bool:
    """Whether ``error`` is (or wraps) PostgreSQL's lock timeout (SQLSTATE 55P03)."""
    return any(getattr(seen, "sqlstate", None) == "55P03" for seen in causes(error))


def main() -> None:
    """Console-script entry point. A database that cannot be reached (refused, unknown host,
    missing database, bad credentials) ends the command with one line on stderr and exit
    status 2, not a traceback."""
    try:
        cli()
    except pydantic.ValidationError as error:
        if error.title != "Settings":
            raise
        for fault in error.errors():  # a bad SIBYL_* variable: one line each, not a traceback
            name = str(fault["loc"][0]) if fault["loc"] else ""
            variable = (
                "settings"
                if not name
                else name
                if name.isupper()  # an alias (DATABASE_URL)
                else f"SIBYL_{name.upper()}"
            )
            said = fault["msg"].removeprefix("Value error, ")  # pydantic's prefix: noise here
            sys.stderr.write(f"sibyl-pg: {variable}: {said}\n")
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # Ctrl-C outside a step that says what it leaves: no traceback
        sys.stderr.write("sibyl-pg: interrupted\n")
        raise SystemExit(INTERRUPTED_EXIT) from None
    except Exception as error:
        if _lock_timeout(error):
            sys.stderr.write(
                "sibyl-pg: gave up waiting for a table lock that another session holds"
                f" (lock timeout {get_settings().migration_lock_timeout_ms} ms,"
                " SIBYL_MIGRATION_LOCK_TIMEOUT_MS); nothing was changed. Run it again once that"
                " session is done (pg_stat_activity shows it), or raise the timeout.\n"
            )
            raise SystemExit(2) from None
        from app.service.session import schema_missing

        if schema_missing(error):
            sys.stderr.write(
                "sibyl-pg: this database has no sibyl-pg tables, or older ones: run"
                " `sibyl-pg migrate` (DATABASE_URL names the database)\n"
            )
            raise SystemExit(2) from None
        reason = _database_fault(error)
        if reason is None:
            raise
        sys.stderr.write(f"sibyl-pg: cannot use the database: {reason}\n{DATABASE_HINT}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
