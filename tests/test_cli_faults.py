"""The CLI and an unusable database: a missing database, a server that refuses the connection,
a malformed ``DATABASE_URL`` or a bad ``SIBYL_*`` setting ends a command with one line saying why
and exit status 2, never a traceback; the same command against the real database works.

The matrix runs the console script's entry point in this process (:func:`app.cli.main`, with
its arguments, environment and standard streams as a shell would give them); the last tests run
the installed ``sibyl-pg`` script in a process of its own, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.core.db import with_database
from app.core.settings import get_settings
from tests.builders import throwaway_database

SIBYL_PG = str(Path(sys.executable).with_name("sibyl-pg"))
"""The console script installed beside the interpreter running the tests."""


@dataclass
class Ran:
    """What a command left: its exit status and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Ran]


@pytest.fixture
def cli_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli_run(url, *args, env=...)``: ``sibyl-pg ARGS`` with ``DATABASE_URL=url`` (and ``env``),
    run in this process through the console script's entry point."""
    import uvicorn

    from app.cli.main import main

    def no_server(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started serving")

    monkeypatch.setattr(uvicorn, "run", no_server)  # `serve` must stop before it listens

    def run(url: str, *args: str, env: dict[str, str] | None = None) -> Ran:
        saved = dict(os.environ)
        os.environ.update({**(env or {}), "DATABASE_URL": url})
        get_settings.cache_clear()
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["sibyl-pg", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            get_settings.cache_clear()
        said = capsys.readouterr()
        return Ran(code, said.out, said.err)

    return run


@pytest.mark.parametrize("args", [("keys", "list"), ("migrate",)])
def test_a_missing_database_is_one_line_not_a_traceback(
    cli_run: Cli, database_url: str, args
) -> None:
    missing = with_database(database_url, "sibyl_no_such_database_4f1e")
    done = cli_run(missing, *args)
    assert done.returncode == 2, done.stderr
    assert 'database "sibyl_no_such_database_4f1e" does not exist' in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    ok = cli_run(database_url, *args)  # the pair: the real database answers
    assert ok.returncode == 0, ok.stderr


def test_a_refused_connection_is_one_line_not_a_traceback(cli_run: Cli) -> None:
    done = cli_run("postgresql://postgres@127.0.0.1:1/x", "keys", "list")
    assert done.returncode == 2, done.stderr
    assert "cannot use the database" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("abc", "valid number"),
        ("nan", "finite number"),
        ("-1", "greater than or equal to 0"),
        ("0.001", "0 (off) or at least 1 second"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    cli_run: Cli, database_url: str, value, says
) -> None:
    """A bad ``SIBYL_*`` value printed a 50-line pydantic traceback with exit status 1, even
    for a command that does not use it (a new-user trial, 2026-12-01)."""
    bad = cli_run(database_url, "keys", "list", env={"SIBYL_STATS_REFRESH_S": value})
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.startswith("sibyl-pg: SIBYL_STATS_REFRESH_S: ") and says in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.splitlines()) == 1
    ok = cli_run(database_url, "keys", "list", env={"SIBYL_STATS_REFRESH_S": "30"})
    assert ok.returncode == 0, ok.stderr


def test_a_setting_set_but_empty_takes_its_default(cli_run: Cli, database_url: str) -> None:
    done = cli_run(database_url, "keys", "list", env={"SIBYL_WALK_HOP_CAP": ""})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not-a-url", "must be a postgresql:// URL"),
        ("mysql://x@y/z", "must be a postgresql:// URL"),
        ("postgresql://u:s3cret-pw@localhost:abc/db", "port that is not a number"),
        ("postgresql://u:s3cret-pw@localhost:99999/db", "port that is not a number"),
        ("postgresql://u:s3cret-pw@localhost/db?options=-cwork_mem%3D1MB", "(options)"),
        ("postgresql://u:s3cret-pw@localhost/db?sslmode=bogus", "sslmode='bogus'"),
        ("postgresql://u:s3cret-pw@localhost/db?sslmode=", "sslmode=''"),
        ("postgresql://u:s3cret-pw@localhost/db?port=abc", "port that is not a number"),
        ("postgresql://u:s3cret-pw@localhost/db?target_session_attrs=x", "target_session_attrs"),
    ],
)
@pytest.mark.parametrize(
    "args",
    [
        ("keys", "list"),
        ("migrate",),
        ("serve", "--port", "1"),
        ("doctor",),
        ("explain", "search", '{"query": "x"}', "--user", "u"),
    ],
)
def test_a_malformed_database_url_is_one_line_not_a_traceback(
    cli_run: Cli, url: str, says: str, args
) -> None:
    """``DATABASE_URL=not-a-url`` ended most commands with a traceback (exit 1, ``serve`` 3) where
    an unreachable server got one line and exit 2 (a new-user trial, 2026-12-01); the line never
    repeats the URL, which may hold a password."""
    done = cli_run(url, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("sibyl-pg: DATABASE_URL: ") and says in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert "s3cret-pw" not in done.stderr + done.stdout


def test_libpq_sslmode_in_the_url_is_understood(cli_run: Cli, database_url: str) -> None:
    """``?sslmode=require`` is the usual form of a hosted PostgreSQL's URL; asyncpg takes no
    ``sslmode`` keyword, so it was a 112-line traceback (a breaker's trial). It is passed as
    asyncpg's ``ssl``: ``disable`` connects to this (plain) server, ``require`` is refused by it
    in one line."""
    plain = cli_run(database_url + "?sslmode=disable", "keys", "list")
    assert plain.returncode == 0, plain.stderr
    tls = cli_run(database_url + "?sslmode=require", "keys", "list")
    assert tls.returncode == 2 and "Traceback" not in tls.stderr, tls.stderr
    assert tls.stderr.startswith("sibyl-pg: cannot use the database: ")


def test_a_database_without_the_schema_says_to_migrate(cli_run: Cli, database_url: str) -> None:
    with throwaway_database(database_url, "sibyl_unmigrated") as url:
        done = cli_run(url, "keys", "list")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "run `sibyl-pg migrate`" in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_import_into_a_database_without_the_schema_says_to_migrate(
    cli_run: Cli, database_url: str, tmp_path: Path
) -> None:
    """An import into an unmigrated database said "line 1: the database refused this record"
    (a new user's trial): a missing table is no fault of the line. The pair: migrated, the same
    file imports."""
    path = tmp_path / "org.ndjson"
    path.write_text('{"kind": "org", "id": "org_unmigrated_pair", "name": "O"}\n')
    with throwaway_database(database_url, "sibyl_unmigrated") as url:
        done = cli_run(url, "import", str(path))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "run `sibyl-pg migrate`" in done.stderr and "refused" not in done.stderr
        assert cli_run(url, "migrate").returncode == 0
        imported = cli_run(url, "import", str(path))
    assert imported.returncode == 0, imported.stderr
    assert "org: 0 unchanged, 1 written" in imported.stdout


def test_serve_says_at_start_why_it_is_not_ready(database_url: str) -> None:
    """A breaker's server started on a database that could never serve (unmigrated, or
    unreachable) and said nothing until killed; it still serves (/readyz answers 503 until the
    database is fixed), but says why in one line first. The pair: a ready database, no line."""
    import socket

    def first_lines(url: str) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        env = {**os.environ, "DATABASE_URL": url}
        args = [SIBYL_PG, "serve", "--port", port]
        proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
        try:
            out = ""
            assert proc.stderr is not None
            for line in proc.stderr:  # until uvicorn says it started
                out += line
                if "Started server process" in line or "Uvicorn running" in line:
                    break
            return out
        finally:
            proc.terminate()
            proc.wait(30)

    with throwaway_database(database_url, "sibyl_unmigrated") as url:
        said = first_lines(url)
    assert "warning: database schema is not at the newest migration" in said
    assert "run `sibyl-pg migrate`" in said
    assert "warning" not in first_lines(database_url)


def _script(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run([SIBYL_PG, *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_installed_script_says_a_missing_database_in_one_line(database_url: str) -> None:
    """The matrix above, once through the installed script in a process of its own: its entry
    point, exit status and standard error as a shell sees them."""
    missing = with_database(database_url, "sibyl_no_such_database_4f1e")
    done = _script(missing, "keys", "list")
    assert done.returncode == 2, done.stderr
    assert 'database "sibyl_no_such_database_4f1e" does not exist' in done.stderr
    assert done.stderr.startswith("sibyl-pg: cannot use the database: ")
    assert "Traceback" not in done.stderr + done.stdout
    ok = _script(database_url, "keys", "list")
    assert ok.returncode == 0, ok.stderr


def test_the_installed_script_says_a_malformed_url_in_one_line() -> None:
    done = _script("postgresql://u:s3cret-pw@localhost:abc/db", "serve", "--port", "1")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("sibyl-pg: DATABASE_URL: ")
    assert "port that is not a number" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert "s3cret-pw" not in done.stderr + done.stdout


PEPS = Path(
    os.environ.get("SIBYL_PEPS_DIR", Path(__file__).parents[2] / "shared" / "data" / "peps")
)


def _drop_title(folder: Path) -> None:
    path = folder / "pep-0008.rst"
    path.write_text(
        "".join(line for line in path.read_text().splitlines(True) if not line.startswith("Title:"))
    )


def _not_utf8(folder: Path) -> None:
    with (folder / "pep-0008.rst").open("ab") as fh:
        fh.write(b"\xff")


def _empty(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink()


@pytest.mark.parametrize(
    ("break_it", "says"),
    [
        (_drop_title, "pep-0008.rst: missing header(s): title"),
        (_not_utf8, "pep-0008.rst: not UTF-8 text"),
        (_empty, "no pep-NNNN.rst file in"),
    ],
    ids=["no-title", "not-utf8", "no-pep"],
)
def test_a_pep_corpus_that_cannot_be_imported_is_one_line_naming_the_file(
    cli_run: Cli, database_url: str, tmp_path: Path, break_it: Callable[[Path], None], says: str
) -> None:
    """A trial got a 47-line traceback for a PEP without its Title header, and a folder holding
    no PEP was reported as a database that could not be used: now one line naming the file (or
    the folder), exit status 1, before anything is written."""
    if not PEPS.is_dir():
        pytest.skip(f"PEP corpus not found at {PEPS}")
    corpus = tmp_path / "peps"
    corpus.mkdir()
    for number in (1, 8, 20):
        name = f"pep-{number:04d}.rst"
        (corpus / name).write_bytes((PEPS / name).read_bytes())
    break_it(corpus)
    done = cli_run(database_url, "import-peps", str(corpus))
    assert done.returncode == 1, done.stderr
    assert says in done.stderr and f"the PEP corpus at {corpus} cannot be imported" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "cannot use the database" not in done.stderr
