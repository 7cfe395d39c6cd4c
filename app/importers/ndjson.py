"""Bulk import of NDJSON records (contract §9): one object a line, idempotent by id.

**All or nothing per file** (the default): the whole file is one transaction, written in batches
of ``batch_size`` lines (the progress bar advances per batch). A bad line stops the import and is
reported with its line number, the offending id and the reason; nothing of the file is written,
and a re-run after fixing the line completes the import. With ``atomic=False`` (``sibyl-pg
import --commit-batches``) each batch commits on its own and the error says exactly which lines
were committed (``lines 1-6 were committed``); re-running is still safe, every write being
idempotent.

Every record goes through the write rules REST and MCP apply (:mod:`app.domain.write_rules`,
:func:`app.domain.memories.save_entity`): reserved type and ids refused, SUPERSEDES cycles
refused (the import writes as the operator: its cycle check walks every memory of the org), the
superseded mark set by a SUPERSEDES edge, passages cut, ``[[id]]`` links derived, a link to a
memory not (yet) there kept as a pending link and resolved when the memory arrives (later in the
same file, or in a later import), communities touched retired. The summary reports how many links
are still pending. A declarative re-import of a memory marked superseded by a SUPERSEDES edge
keeps the mark (the edge is there), so a repeated import changes nothing.

**Set-based, kind by kind.** A file (or a batch) is applied in the order org, user, project,
member, entity, edge, mention, grant, so a record may refer to a row stated later in the file.
New memories, their spans and links, edges, mentions and memberships are written a few thousand
rows a statement (bound arrays, :mod:`app.repo.writes`), through the same rule functions as the
one-at-a-time path; a memory already stored (or stated twice) goes through
:func:`save_entity` like a REST edit. Every reference is checked before it is written, so an
error names its line and the id it could not find (``edge dst 'pep_4242' does not exist in org
'org_python'``).

After a load of :data:`ANALYZE_AFTER` lines or more the search statistics of the orgs written are
recounted (:func:`app.repo.term_stats.refresh`, issue 12) and the touched tables are vacuumed and
analyzed (``VACUUM (ANALYZE)``): the servers run without autovacuum, and a fresh visibility map
lets the walk's index-only scans skip the heap.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import FLUSH_STATISTICS_SQL
from app.core.errors import BadRequest, DomainError
from app.domain import write_rules
from app.domain.memories import (
    EntityData,
    checked_cut,
    create_entities,
    save_entity,
    unchanged,
)
from app.domain.validation import (
    BAD_TEXT,
    DOT_SEGMENT_ID,
    DOT_SEGMENTS,
    NOT_BLANK,
    line_problem,
    stored_relationship,
)
from app.domain.write_schemas import JsonObject
from app.repo import term_stats, writes


def _not_a_dot_segment(value: str) -> str:
    if value in DOT_SEGMENTS:
        raise ValueError(f"an id {DOT_SEGMENT_ID}")
    return value


def _one_line(value: str) -> str:
    problem = line_problem(value)  # the rule of names and span labels over REST and MCP
    if problem == NOT_BLANK:
        raise ValueError("must not be blank")
    if problem:
        raise ValueError(f"must be {problem}")
    return value


IdStr = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$"),
    AfterValidator(_not_a_dot_segment),
]
TypeStr = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
RelStr = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{1,64}$")]


class _Rec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OrgRec(_Rec):
    """``{"kind":"org","id":...,"name":...}``"""

    kind: Literal["org"]
    id: IdStr
    name: str = Field(min_length=1, max_length=200)


class UserRec(_Rec):
    """``{"kind":"user","id":...,"org":...,"handle":...,"role":...}``"""

    kind: Literal["user"]
    id: IdStr
    org: IdStr
    handle: str = Field(min_length=1, max_length=200)
    role: Literal["owner", "admin", "member", "viewer"] = "member"


class ProjectRec(_Rec):
    """``{"kind":"project","id":...,"org":...,"name":...,"visibility":...}``"""

    kind: Literal["project"]
    id: IdStr
    org: IdStr
    name: str = Field(min_length=1, max_length=200)
    visibility: Literal["private", "org"] = "private"


class MemberRec(_Rec):
    """``{"kind":"member","project":...,"user":...,"role":...}``"""

    kind: Literal["member"]
    project: IdStr
    user: IdStr
    role: Literal["viewer", "contributor", "maintainer", "owner"]


class SpanRec(_Rec):
    """A declared span ``{start, end, label}`` (§7)."""

    start: int
    end: int
    label: str


class EntityRec(_Rec):
    """An entity (a memory); see contract §9 for defaults."""

    kind: Literal["entity"]
    id: IdStr
    org: IdStr
    type: TypeStr
    # one line of printable text, as over REST (app.domain.entities._name): no control character
    name: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_one_line)]
    content: str = ""
    project: IdStr | None = None
    scope: Literal["project", "private", "org"] | None = None
    owner: IdStr | None = None
    lifecycle: Literal["active", "superseded", "retired"] = "active"
    metadata: JsonObject = Field(default_factory=dict)
    spans: list[SpanRec] | None = None


class EdgeRec(_Rec):
    """``{"kind":"edge","org":...,"src":...,"dst":...,"relationship":...}``"""

    kind: Literal["edge"]
    org: IdStr
    src: IdStr
    dst: IdStr
    relationship: RelStr


class MentionRec(_Rec):
    """``{"kind":"mention","org":...,"src":...,"dst":...}``"""

    kind: Literal["mention"]
    org: IdStr
    src: IdStr
    dst: IdStr


class GrantRec(_Rec):
    """``{"kind":"grant","entity":...,"user":...}``"""

    kind: Literal["grant"]
    entity: IdStr
    user: IdStr


Record = Annotated[
    OrgRec | UserRec | ProjectRec | MemberRec | EntityRec | EdgeRec | MentionRec | GrantRec,
    Field(discriminator="kind"),
]
_RECORD = TypeAdapter(Record)
ANALYZE_AFTER = 1000  # lines; a bulk import this large vacuums and analyzes what it touched
# For the import's transaction only: room to sort a large batch in memory.
BULK_SETTINGS_SQL = "/* sibyl:import.settings */ SELECT set_config('work_mem', '64MB', true)"
# Imports take turns, a transaction at a time: each reads what is stored, then inserts what is
# new, so two at once over the same ids would both insert them (a duplicate key for the later).
IMPORT_LOCK_SQL = "/* sibyl:import.lock */ SELECT pg_advisory_xact_lock(hashtext('sibyl:import'))"
VACUUM_TIMEOUT_S = 600.0
VACUUM_SQL = (
    "/* sibyl:import.vacuum */ VACUUM (ANALYZE) entities, edges, mentions, pending_links, "
    "passages, entity_grants, project_members, projects, users, communities, community_members"
)  # the search statistics' tables: vacuumed by their refresh (app.repo.term_stats.refresh_orgs)


class ImportError_(Exception):
    """A line that could not be imported: its number and a reason naming the offending id (no
    SQL, no stack); ``committed``: the last line of the last committed batch (non-atomic
    imports only; None: nothing of the file was written)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason
        self.committed: int | None = None

    def outcome(self) -> str:
        """What stays written, in words."""
        if self.committed is None:
            return "nothing of the file was written"
        return (
            f"lines 1-{self.committed} were committed; nothing from line "
            f"{self.committed + 1} on was written"
        )


@dataclass
class ImportSummary:
    """What an import did, by kind and outcome, plus the relationship pairs it wrote or kept."""

    lines: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    relationships: Counter[str] = field(default_factory=Counter)
    pending_links: int = 0  # links of the imported orgs still waiting for their target
    orgs: set[str] = field(default_factory=set)

    def render(self) -> str:
        """A short human summary, one line per kind."""
        kinds = sorted({k.split(":")[0] for k in self.outcomes})
        parts = []
        for kind in kinds:
            detail = ", ".join(
                f"{n} {k.split(':')[1]}"
                for k, n in sorted(self.outcomes.items())
                if k.startswith(kind + ":")
            )
            parts.append(f"  {kind}: {detail}")
        rels = ", ".join(f"{n} {r}" for r, n in sorted(self.relationships.items()))
        return "\n".join(
            [
                f"imported {self.lines} lines",
                *parts,
                f"  edge pairs: {rels or 'none'}",
                f"  pending links: {self.pending_links} (a [[id]] whose memory is not there yet)",
            ]
        )


def parse_line(line_no: int, raw: str) -> Record | None:
    """Parse and validate one NDJSON line (blank lines are skipped: None).

    Raises ``ImportError_`` with the line number and the first validation problem.
    """
    if not raw.strip():
        return None
    try:  # the fast path: pydantic parses and validates in one go
        rec = _RECORD.validate_json(raw)
    except ValidationError:
        pass  # the slow path below words the first problem
    else:
        if "\\u0000" in raw:  # a NUL escaped in a string: PostgreSQL text cannot hold it
            _refuse_nul(line_no, rec.model_dump(mode="json"), kind=rec.kind)
        return rec
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImportError_(line_no, f"not valid JSON ({exc.msg})") from None
    except RecursionError:  # a line nested ~1,000 levels deep (a breaker trial: a traceback)
        raise ImportError_(line_no, "not valid JSON (nested deeper than it can be read)") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's limit; a review)
        raise ImportError_(line_no, "not valid JSON (a number too long to read)") from None
    try:
        rec = _RECORD.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "record"
        rid = obj.get("id") if isinstance(obj, dict) else None
        named = f" of '{rid}'" if isinstance(rid, str) and len(rid) <= 128 else ""
        said = err["msg"].removeprefix("Value error, ")  # pydantic's prefix: noise to a reader
        raise ImportError_(line_no, f"{where}{named}: {said}") from None
    _refuse_nul(line_no, rec.model_dump(mode="json"), kind=rec.kind)
    return rec


def _refuse_nul(line_no: int, value: Any, *, kind: str) -> None:
    """``ImportError_`` naming the first field of ``value`` holding a NUL character, as REST
    refuses it (``validation.clean_text``)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if "\x00" in k:
                raise ImportError_(line_no, f"{kind}: {BAD_TEXT}")
            _refuse_nul(line_no, v, kind=f"{kind}.{k}")
    elif isinstance(value, list):
        for v in value:
            _refuse_nul(line_no, v, kind=kind)
    elif isinstance(value, str) and "\x00" in value:
        raise ImportError_(line_no, f"{kind}: {BAD_TEXT}")


def read_file(path: Path) -> Iterator[tuple[int, Record]]:
    """Numbered, validated records of an NDJSON file (1-based line numbers)."""
    with path.open("rb") as fh:
        for n, data in enumerate(fh, start=1):
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportError_(n, f"not valid UTF-8 (byte {exc.start + 1})") from None
            rec = parse_line(n, raw)
            if rec is not None:
                yield n, rec


def from_dicts(records: Iterable[dict[str, Any]]) -> Iterator[tuple[int, Record]]:
    """Validated records from dicts (e.g. the PEP mapping), numbered as lines of an NDJSON file."""
    for n, obj in enumerate(records, start=1):
        rec = parse_line(n, json.dumps(obj))
        if rec is not None:
            yield n, rec


async def _missing(conn: AsyncConnection, kind: str, org: str, ids: dict[str, str]) -> None:
    """``BadRequest`` naming the first of ``ids`` (field → id) that is no memory of ``org``,
    e.g. "edge dst 'pep_4242' does not exist in org 'org_python'"."""
    found = await writes.referenced_ids(conn, org_id=org, ids=list(ids.values()))
    for where, id_ in ids.items():
        if id_ not in found:
            raise BadRequest(f"{kind} {where} '{id_}' does not exist in org '{org}'")


def _entity_data(rec: EntityRec, lifecycle: str | None = None) -> EntityData:
    """The memory a record states, with the import's defaults (§9); ``BadRequest`` when its
    scope, project and owner do not agree."""
    scope = rec.scope or ("project" if rec.project else "private")
    write_rules.check_scope(scope, rec.project)
    if scope == "private" and not rec.owner:
        raise BadRequest("a private entity needs an owner")
    return EntityData(
        id=rec.id,
        type=rec.type,
        name=rec.name,
        content=rec.content,
        scope=scope,
        project_id=rec.project,
        owner_id=rec.owner,
        lifecycle=lifecycle or rec.lifecycle,
        metadata=rec.metadata,
        spans=[s.model_dump() for s in rec.spans] if rec.spans is not None else None,
    )


async def _entity(conn: AsyncConnection, rec: EntityRec, evidence_lines: int) -> str:
    """Write one memory the way REST does (:func:`save_entity`); the outcome word."""
    lifecycle = rec.lifecycle
    if lifecycle == "active" and await write_rules.keeps_superseded_mark(
        conn, org_id=rec.org, entity_id=rec.id
    ):
        lifecycle = "superseded"
    data = _entity_data(rec, lifecycle)
    outcome, _ = await save_entity(conn, org_id=rec.org, data=data, evidence_lines=evidence_lines)
    return outcome


async def _apply(conn: AsyncConnection, rec: Record, evidence_lines: int) -> str:
    """Write one record; return its outcome word."""
    if isinstance(rec, OrgRec):
        r = await conn.execute(writes.UPSERT_ORG_SQL, {"id": rec.id, "name": rec.name})
        return "written" if r.rowcount else "unchanged"
    if isinstance(rec, UserRec):
        r = await conn.execute(
            writes.UPSERT_USER_SQL,
            {"org_id": rec.org, "id": rec.id, "handle": rec.handle, "role": rec.role},
        )
        return "written" if r.rowcount else "unchanged"
    if isinstance(rec, ProjectRec):
        r = await conn.execute(
            writes.UPSERT_PROJECT_SQL,
            {"org_id": rec.org, "id": rec.id, "name": rec.name, "visibility": rec.visibility},
        )
        return "written" if r.rowcount else "unchanged"
    if isinstance(rec, MemberRec):
        r = await conn.execute(
            writes.UPSERT_MEMBER_SQL,
            {"project_id": rec.project, "user_id": rec.user, "role": rec.role},
        )
        if r.rowcount:
            return "written"
        exists = await conn.execute(
            writes.MEMBER_EXISTS_SQL, {"project_id": rec.project, "user_id": rec.user}
        )
        if exists.first() is None:
            raise BadRequest(
                f"project '{rec.project}' or user '{rec.user}' does not exist, "
                "or they belong to different orgs"
            )
        return "unchanged"
    if isinstance(rec, EntityRec):
        return await _entity(conn, rec, evidence_lines)
    if isinstance(rec, EdgeRec):
        relationship = stored_relationship(rec.relationship)
        if rec.src == rec.dst:
            raise BadRequest(write_rules.SELF_EDGE)
        await _missing(conn, rec.kind, rec.org, {"src": rec.src, "dst": rec.dst})
        result = await write_rules.write_edge(
            conn,
            org_id=rec.org,
            src=rec.src,
            relationship=relationship,
            dst=rec.dst,
            reader_params=None,
        )
        return "written" if result.created else "unchanged"
    if isinstance(rec, MentionRec):
        if rec.src == rec.dst:
            raise BadRequest("a mention may not point at its own source")
        await _missing(conn, rec.kind, rec.org, {"src": rec.src, "dst": rec.dst})
        r = await conn.execute(
            writes.INSERT_MENTION_SQL,
            {"org_id": rec.org, "src_id": rec.src, "dst_id": rec.dst, "derived": False},
        )
        if r.first():
            await write_rules.retire_link_communities(
                conn, org_id=rec.org, pairs=[(rec.src, rec.dst)]
            )
            return "written"
        return "unchanged"
    r = await conn.execute(writes.INSERT_GRANT_SQL, {"entity_id": rec.entity, "user_id": rec.user})
    if r.first():
        return "written"
    target = await conn.execute(
        writes.GRANT_TARGET_SQL, {"entity_id": rec.entity, "user_id": rec.user}
    )
    if target.first() is None:
        raise BadRequest(
            f"entity '{rec.entity}' or user '{rec.user}' does not exist, "
            "or they belong to different orgs"
        )
    return "unchanged"


async def import_records(
    engine: AsyncEngine,
    records: Iterable[tuple[int, Record]],
    *,
    total: int | None = None,
    batch_size: int = 500,
    evidence_lines: int = 40,
    show_progress: bool = False,
    atomic: bool = True,
    on_written: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Write numbered records; return the summary.

    ``atomic`` (default): the whole file in one transaction, applied kind by kind, so a bad line
    leaves nothing written (``batch_size``: lines per step of the "reading" progress bar).
    Otherwise one committed transaction per batch of ``batch_size`` lines. Raises
    ``ImportError_`` for the first bad line (a validation error of a later line surfaces when it
    is reached); its ``committed`` says which lines stay written (None: none). ``on_written(n)``
    is told of every ``n`` records applied (for a caller's own progress display).
    """
    summary = ImportSummary()
    progress = Progress(
        TextColumn("importing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not show_progress,
        transient=False,
    )
    committed: int | None = None  # last line of the last committed batch (non-atomic)
    with progress:
        task = progress.add_task("import", total=total)

        def advance(n: int) -> None:
            progress.update(task, advance=n)
            if on_written is not None:
                on_written(n)

        try:
            with write_rules.settling() as unsettled:
                if atomic:
                    async with engine.begin() as conn:
                        await conn.execute(text(BULK_SETTINGS_SQL))
                        await conn.execute(text(IMPORT_LOCK_SQL))
                        reading = progress.add_task("reading", total=total)
                        everything = []
                        for item in records:
                            everything.append(item)
                            if len(everything) % batch_size == 0:
                                progress.update(reading, advance=batch_size)
                        progress.update(reading, completed=len(everything))
                        await _write_batch(conn, everything, summary, evidence_lines, advance)
                else:
                    async for batch in _batches(records, batch_size):
                        async with engine.begin() as conn:
                            await conn.execute(text(BULK_SETTINGS_SQL))
                            await conn.execute(text(IMPORT_LOCK_SQL))
                            await _write_batch(conn, batch, summary, evidence_lines, advance)
                        committed = batch[-1][0]
                async with engine.begin() as conn:  # links a concurrent write left: settled now
                    if unsettled:
                        await write_rules.settle(conn, unsettled, reader_params=None)
                    summary.pending_links = await writes.pending_count(
                        conn, org_ids=sorted(summary.orgs)
                    )
        except ImportError_ as exc:
            exc.committed = committed
            raise
    if summary.lines >= ANALYZE_AFTER:
        # a bulk load: recount the search statistics of the orgs it wrote (issue 12)
        await term_stats.refresh_orgs(engine, sorted(summary.orgs))
        await vacuum(engine)
    return summary


async def vacuum(engine: AsyncEngine) -> None:
    """``VACUUM (ANALYZE)`` the tables an import writes (outside any transaction): fresh
    statistics for the planner and a fresh visibility map for index-only scans. Not bound by a
    service engine's statement timeout (up to :data:`VACUUM_TIMEOUT_S`)."""
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        raw = (await auto.get_raw_connection()).driver_connection
        assert raw is not None
        await raw.execute("SET statement_timeout = 0")
        try:
            await raw.execute(FLUSH_STATISTICS_SQL)  # counts of the last second's writes first
            await raw.execute(VACUUM_SQL, timeout=VACUUM_TIMEOUT_S)
        finally:
            await raw.execute("RESET statement_timeout")


async def _batches(
    records: Iterable[tuple[int, Record]], size: int
) -> AsyncIterator[list[tuple[int, Record]]]:
    batch: list[tuple[int, Record]] = []
    for item in records:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


_FK_DETAIL = re.compile(
    r'Key \((?P<cols>[^)]*)\)=\((?P<vals>[^)]*)\) is not present in table "(?P<t>\w+)"'
)
_TAKEN_DETAIL = re.compile(r"Key \(org_id, id\)=\((?P<org>[^,]*), (?P<id>[^)]*)\) already exists")


def _integrity_reason(exc: IntegrityError) -> str:
    """A reason naming the missing row, from PostgreSQL's error detail (no SQL, no stack)."""
    orig = exc.orig
    cause = getattr(orig, "__cause__", None)
    detail = str(getattr(orig, "detail", None) or getattr(cause, "detail", None) or "")
    taken = _TAKEN_DETAIL.search(detail)
    constraint = getattr(orig, "constraint_name", None) or getattr(cause, "constraint_name", None)
    if taken is not None and constraint == "pk_entities":
        return (
            f"entity '{taken['id']}' was created in org '{taken['org']}' by another writer "
            "meanwhile; run the import again"
        )
    match = _FK_DETAIL.search(detail)
    if match is not None:
        pairs = dict(zip(match["cols"].split(", "), match["vals"].split(", "), strict=False))
        table = match["t"]
        what = {"orgs": "org", "users": "user", "projects": "project", "entities": "entity"}.get(
            table, table
        )
        missing = [v for k, v in pairs.items() if k != "org_id"] or [pairs.get("org_id", "?")]
        org = pairs.get("org_id")
        where = f" in org '{org}'" if org and table != "orgs" else ""
        return f"{what} '{missing[-1]}' does not exist{where}"
    return (
        "refers to an org, user, project or entity that does not exist, "
        "or breaks a rule of the schema"
    )


KIND_ORDER = ("org", "user", "project", "member", "entity", "edge", "mention", "grant")
Numbered = list[tuple[int, Record]]


@contextlib.asynccontextmanager
async def _at(line: int) -> AsyncIterator[None]:
    """Report any refusal inside the block as an ``ImportError_`` of ``line``."""
    try:
        yield
    except DomainError as exc:
        raise ImportError_(line, exc.detail) from None
    except IntegrityError as exc:
        raise ImportError_(line, _integrity_reason(exc)) from None
    except DBAPIError:
        raise ImportError_(line, "the database refused this record") from None


def _by_org(items: Numbered) -> dict[str, Numbered]:
    out: dict[str, Numbered] = defaultdict(list)
    for n, rec in items:
        out[getattr(rec, "org", "")].append((n, rec))
    return out


async def _write_batch(
    conn: AsyncConnection,
    batch: Numbered,
    summary: ImportSummary,
    evidence_lines: int,
    advance: Callable[[int], None] = lambda n: None,
) -> None:
    """Apply numbered records kind by kind (org, user, project, member, entity, edge, mention,
    grant), so a record may refer to any row of the batch; memories, edges and mentions
    set-based, the directory rows one by one."""
    outcomes: Counter[str] = Counter()
    rels: Counter[str] = Counter()
    by_kind: dict[str, Numbered] = defaultdict(list)
    for n, rec in batch:
        by_kind[rec.kind].append((n, rec))
    for kind in KIND_ORDER:
        items = by_kind.get(kind, [])
        if not items:
            continue
        if kind == "entity":  # the longest kind (cutting, indexing): it advances as it goes
            await _entities(conn, items, outcomes, evidence_lines, advance)
            continue
        elif kind == "edge":
            await _edges(conn, items, outcomes, rels)
        elif kind == "mention":
            await _mentions(conn, items, outcomes)
        elif kind == "member":
            await _members(conn, items, outcomes)
        else:
            for n, rec in items:
                async with _at(n):
                    outcomes[f"{kind}:{await _apply(conn, rec, evidence_lines)}"] += 1
        advance(len(items))
    summary.lines += len(batch)
    summary.outcomes.update(outcomes)
    summary.relationships.update(rels)
    summary.orgs.update(o for n, rec in batch if (o := getattr(rec, "org", None)) is not None)


async def _entities(
    conn: AsyncConnection,
    items: Numbered,
    outcomes: Counter[str],
    evidence_lines: int,
    advance: Callable[[int], None] = lambda n: None,
) -> None:
    """New memories set-based (:func:`create_entities`); a memory already stored, or stated a
    second time, one by one through :func:`save_entity` after them."""
    for org, recs in _by_org(items).items():
        prepared = []
        for n, rec in recs:
            assert isinstance(rec, EntityRec)
            async with _at(n):
                data = _entity_data(rec)
                prepared.append((n, rec, data, checked_cut(data, evidence_lines=evidence_lines)))
            advance(1)  # cut and checked; the set-based writes follow for the whole kind
        first = recs[0][0]
        if not await writes.org_exists(conn, org_id=org):
            raise ImportError_(first, f"org '{org}' does not exist")
        refs = [(n, "user", d.owner_id) for n, _, d, _ in prepared if d.owner_id is not None]
        refs += [(n, "project", d.project_id) for n, _, d, _ in prepared if d.project_id]
        missing = await writes.first_missing_ref(conn, org_id=org, refs=refs)
        if missing is not None:
            line, kind, id_ = missing
            raise ImportError_(line, f"{kind} '{id_}' does not exist in org '{org}'")
        stored = await writes.existing_ids(conn, org_id=org, ids=[d.id for _, _, d, _ in prepared])
        seen: set[str] = set()
        new, later = [], []
        for n, rec, data, projection in prepared:
            if data.id in stored or data.id in seen:
                later.append((n, rec))
            else:
                seen.add(data.id)
                new.append((data, projection))
        async with _at(first):
            await create_entities(conn, org_id=org, items=new)
        outcomes["entity:created"] += len(new)
        # stored ones stated once, without declared spans: the unchanged found set-based
        counts = Counter(rec.id for _, rec in later if isinstance(rec, EntityRec))
        once = [
            data
            for _, rec, data, _ in prepared
            if data.id in stored and counts[data.id] == 1 and data.spans is None
        ]
        same, _ = await unchanged(conn, org_id=org, items=once, keep_mark=True)
        outcomes["entity:unchanged"] += len(same)
        for n, rec in later:
            assert isinstance(rec, EntityRec)
            if rec.id in same:
                continue
            async with _at(n):
                outcomes[f"entity:{await _entity(conn, rec, evidence_lines)}"] += 1


async def _edges(
    conn: AsyncConnection, items: Numbered, outcomes: Counter[str], rels: Counter[str]
) -> None:
    """Edges set-based through :func:`write_rules.write_edges`; when the SUPERSEDES ones close
    a cycle, they are written one by one (:func:`write_rules.write_edge`) to name the line."""
    for org, recs in _by_org(items).items():
        edges: list[tuple[int, str, str, str]] = []
        for n, rec in recs:
            assert isinstance(rec, EdgeRec)
            async with _at(n):
                relationship = stored_relationship(rec.relationship)
                if rec.src == rec.dst:
                    raise BadRequest(write_rules.SELF_EDGE)
            edges.append((n, rec.src, relationship, rec.dst))
            rels[rec.relationship.upper()] += 1
        refs = [(n, f, i) for n, s, _, d in edges for f, i in (("src", s), ("dst", d))]
        missing = await writes.first_missing(conn, org_id=org, refs=refs)
        if missing is not None:
            line, where, id_ = missing
            raise ImportError_(line, f"edge {where} '{id_}' does not exist in org '{org}'")
        plain = [(s, r, d) for _, s, r, d in edges if r != "SUPERSEDES"]
        async with _at(edges[0][0]):
            written = len(await write_rules.write_edges(conn, org_id=org, edges=plain))
        supersedes = [e for e in edges if e[2] == "SUPERSEDES"]
        try:
            async with _at(supersedes[0][0] if supersedes else 0):
                written += len(
                    await write_rules.write_edges(
                        conn, org_id=org, edges=[(s, r, d) for _, s, r, d in supersedes]
                    )
                )
        except write_rules.CycleInBulk:
            for n, s, r, d in supersedes:
                async with _at(n):
                    result = await write_rules.write_edge(
                        conn, org_id=org, src=s, relationship=r, dst=d, reader_params=None
                    )
                    written += result.created
        outcomes["edge:written"] += written
        outcomes["edge:unchanged"] += len(edges) - written


async def _members(conn: AsyncConnection, items: Numbered, outcomes: Counter[str]) -> None:
    """Memberships set-based (a pair stated twice: the last line wins)."""
    rows = []
    for n, rec in items:
        assert isinstance(rec, MemberRec)
        rows.append((n, rec.project, rec.user, rec.role))
    missing = await writes.first_missing_member(conn, members=[(n, p, u) for n, p, u, _ in rows])
    if missing is not None:
        line, project, user = missing
        raise ImportError_(
            line,
            f"project '{project}' or user '{user}' does not exist, "
            "or they belong to different orgs",
        )
    last = {(p, u): r for _, p, u, r in rows}
    async with _at(rows[0][0]):
        written = await writes.upsert_members(
            conn, members=[(p, u, r) for (p, u), r in last.items()]
        )
    outcomes["member:written"] += written
    outcomes["member:unchanged"] += len(rows) - written


async def _mentions(conn: AsyncConnection, items: Numbered, outcomes: Counter[str]) -> None:
    """Explicit mentions set-based; the communities of their ends retired."""
    for org, recs in _by_org(items).items():
        pairs: list[tuple[int, str, str]] = []
        for n, rec in recs:
            assert isinstance(rec, MentionRec)
            if rec.src == rec.dst:
                raise ImportError_(n, "a mention may not point at its own source")
            pairs.append((n, rec.src, rec.dst))
        refs = [(n, f, i) for n, s, d in pairs for f, i in (("src", s), ("dst", d))]
        missing = await writes.first_missing(conn, org_id=org, refs=refs)
        if missing is not None:
            line, where, id_ = missing
            raise ImportError_(line, f"mention {where} '{id_}' does not exist in org '{org}'")
        async with _at(pairs[0][0]):
            written = await writes.insert_mentions(
                conn, org_id=org, pairs=[(s, d) for _, s, d in pairs]
            )
            await write_rules.retire_bulk_link_communities(
                conn, org_id=org, pairs=sorted(set(written))
            )
        outcomes["mention:written"] += len(written)
        outcomes["mention:unchanged"] += len(pairs) - len(written)
