"""Bulk import of NDJSON records (contract §9): one object a line, idempotent by id, in batches.

Each batch is one transaction: a bad line stops the import, is reported with its line number,
and nothing of its batch is written (earlier batches stay committed; re-running the import after
fixing the line is safe because every write is idempotent). Entities are cut into passages and
their ``[[id]]`` links derived into mentions exactly as on a REST write.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.errors import BadRequest
from app.domain.memories import EntityData, save_entity
from app.domain.validation import stored_relationship
from app.repo import writes

IdStr = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
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
    name: str = Field(min_length=1, max_length=1000)
    content: str = ""
    project: IdStr | None = None
    scope: Literal["project", "private", "org"] | None = None
    owner: IdStr | None = None
    lifecycle: Literal["active", "superseded", "retired"] = "active"
    metadata: dict[str, Any] = Field(default_factory=dict)
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
ANALYZE_AFTER = 1000  # lines; a bulk import this large refreshes the planner's statistics
ANALYZE_SQL = (
    "/* sibyl:import.analyze */ ANALYZE entities, edges, mentions, passages, entity_grants, "
    "project_members, projects, users"
)


class ImportError_(Exception):
    """A line that could not be imported: its number and a reason (no SQL, no stack)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass
class ImportSummary:
    """What an import did, by kind and outcome, plus the relationship pairs it wrote or kept."""

    lines: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    relationships: Counter[str] = field(default_factory=Counter)

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
            [f"imported {self.lines} lines", *parts, f"  edge pairs: {rels or 'none'}"]
        )


def parse_line(line_no: int, raw: str) -> Record | None:
    """Parse and validate one NDJSON line (blank lines are skipped: None).

    Raises ``ImportError_`` with the line number and the first validation problem.
    """
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImportError_(line_no, f"not valid JSON ({exc.msg})") from None
    try:
        return _RECORD.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "record"
        raise ImportError_(line_no, f"{where}: {err['msg']}") from None


def read_file(path: Path) -> Iterator[tuple[int, Record]]:
    """Numbered, validated records of an NDJSON file (1-based line numbers)."""
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, start=1):
            rec = parse_line(n, raw)
            if rec is not None:
                yield n, rec


def from_dicts(records: Iterable[dict[str, Any]]) -> Iterator[tuple[int, Record]]:
    """Validated records from dicts (e.g. the PEP mapping), numbered as lines of an NDJSON file."""
    for n, obj in enumerate(records, start=1):
        rec = parse_line(n, json.dumps(obj))
        if rec is not None:
            yield n, rec


async def _entity(conn: AsyncConnection, rec: EntityRec, evidence_lines: int) -> str:
    scope = rec.scope or ("project" if rec.project else "private")
    if scope == "org" and rec.project:
        raise BadRequest("an org-scoped entity has no project")
    if scope == "project" and not rec.project:
        raise BadRequest("a project-scoped entity needs a project")
    if scope == "private" and not rec.owner:
        raise BadRequest("a private entity needs an owner")
    if rec.id.startswith("passage_"):
        raise BadRequest("entity ids may not start with 'passage_' (reserved for passages)")
    data = EntityData(
        id=rec.id,
        type=rec.type,
        name=rec.name,
        content=rec.content,
        scope=scope,
        project_id=rec.project,
        owner_id=rec.owner,
        lifecycle=rec.lifecycle,
        metadata=rec.metadata,
        spans=[s.model_dump() for s in rec.spans] if rec.spans is not None else None,
    )
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
            raise BadRequest("unknown project or user, or they belong to different orgs")
        return "unchanged"
    if isinstance(rec, EntityRec):
        return await _entity(conn, rec, evidence_lines)
    if isinstance(rec, EdgeRec):
        if rec.src == rec.dst:
            raise BadRequest("an edge may not point at its own source")
        r = await conn.execute(
            writes.INSERT_EDGE_SQL,
            {
                "org_id": rec.org,
                "src_id": rec.src,
                "relationship": stored_relationship(rec.relationship),
                "dst_id": rec.dst,
            },
        )
        return "written" if r.first() else "unchanged"
    if isinstance(rec, MentionRec):
        if rec.src == rec.dst:
            raise BadRequest("a mention may not point at its own source")
        r = await conn.execute(
            writes.INSERT_MENTION_SQL,
            {"org_id": rec.org, "src_id": rec.src, "dst_id": rec.dst, "derived": False},
        )
        return "written" if r.first() else "unchanged"
    r = await conn.execute(writes.INSERT_GRANT_SQL, {"entity_id": rec.entity, "user_id": rec.user})
    if r.first():
        return "written"
    target = await conn.execute(
        writes.GRANT_TARGET_SQL, {"entity_id": rec.entity, "user_id": rec.user}
    )
    if target.first() is None:
        raise BadRequest("unknown entity or user, or they belong to different orgs")
    return "unchanged"


async def import_records(
    engine: AsyncEngine,
    records: Iterable[tuple[int, Record]],
    *,
    total: int | None = None,
    batch_size: int = 500,
    evidence_lines: int = 40,
    show_progress: bool = False,
) -> ImportSummary:
    """Write numbered records in batches of ``batch_size``, one transaction a batch.

    Returns the summary. Raises ``ImportError_`` for the first bad line (its batch rolled back,
    earlier batches committed); validation errors of later lines surface when they are reached.
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
    with progress:
        task = progress.add_task("import", total=total)
        batch: list[tuple[int, Record]] = []
        iterator = iter(records)
        while True:
            batch.clear()
            for item in iterator:
                batch.append(item)
                if len(batch) >= batch_size:
                    break
            if not batch:
                break
            await _write_batch(engine, batch, summary, evidence_lines)
            progress.update(task, advance=len(batch))
    if summary.lines >= ANALYZE_AFTER:
        # Fresh statistics, so the planner picks the walk's indexes right after a bulk load.
        async with engine.connect() as conn:
            await conn.execute(text(ANALYZE_SQL))
            await conn.commit()
    return summary


async def _write_batch(
    engine: AsyncEngine,
    batch: list[tuple[int, Record]],
    summary: ImportSummary,
    evidence_lines: int,
) -> None:
    outcomes: Counter[str] = Counter()
    rels: Counter[str] = Counter()
    line = batch[0][0]
    try:
        async with engine.begin() as conn:
            for number, rec in batch:
                line = number
                outcome = await _apply(conn, rec, evidence_lines)
                outcomes[f"{rec.kind}:{outcome}"] += 1
                if isinstance(rec, EdgeRec):
                    rels[rec.relationship.upper()] += 1
    except BadRequest as exc:
        raise ImportError_(line, exc.detail) from None
    except IntegrityError:
        raise ImportError_(
            line,
            "refers to an org, user, project or entity that does not exist, "
            "or breaks a rule of the schema",
        ) from None
    except DBAPIError:
        raise ImportError_(line, "the database refused this record") from None
    summary.lines += len(batch)
    summary.outcomes.update(outcomes)
    summary.relationships.update(rels)
