"""Bulk import of NDJSON records (rule: import-idempotent): one object a line, idempotent by id.

**All or nothing per file** (the default): the whole file is one transaction. A bad line stops
the import and is reported with its line number, the offending id and the reason (and how many
other lines of that step were refused too); nothing of the file is written, and a re-run after
fixing the line completes the import. With ``atomic=False`` (``sibyl-pg import
--commit-batches``) each batch commits on its own and the error says exactly which lines were
committed. With ``on_error="skip"`` (``--on-error skip``) every line a rule refuses is left out
(nothing of it is stored), reported by ``on_refused`` (the CLI's reject file) and counted by
rule in the summary, and the rest is imported.

**Read whole, last line wins.** Every line is read and validated first (``reading``); a record
stated twice (the same org, user, project, membership, memory, edge, mention or grant) counts
once, as its last line states it: the earlier lines are ``overridden``, so a file naming one id
on two lines imports the same every time (re-importing it changes nothing: no revision bump,
no new passage ids).

Every record goes through the write rules REST and MCP apply (:mod:`app.domain.write_rules`,
:func:`app.domain.memories.save_entity`), set-based (:mod:`app.importers.bulk`): reserved type
and ids refused, SUPERSEDES cycles refused (the import writes as the operator: its cycle check
counts every memory of the org), the superseded mark set by a SUPERSEDES edge, passages cut,
``[[id]]`` links derived, a link to a memory not (yet) there kept as a pending link and resolved
when the memory arrives, communities touched retired, text stored in NFC. A declarative
re-import of a memory marked superseded by a SUPERSEDES edge keeps the mark.

After a load of :data:`ANALYZE_AFTER` lines or more the search statistics of the orgs written are
recounted (:func:`app.repo.term_stats.refresh_orgs`) and the tables written are vacuumed and
analyzed (``VACUUM (ANALYZE)``): the servers run without autovacuum, and a fresh visibility map
lets the walk's index-only scans skip the heap. The tables are analyzed first (the recount is
planned on their statistics), then the two run at once, on two connections (the recount only
reads the tables the vacuum works on). The summary times each part: reading, writing, analyze,
statistics, vacuum (the last two overlapping).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.errors import BadRequest
from app.domain import write_rules
from app.domain.entities import memory_name
from app.domain.memories import EntityData
from app.domain.validation import (
    BAD_TEXT,
    DOT_SEGMENT_ID,
    DOT_SEGMENTS,
)
from app.domain.write_schemas import JsonObject
from app.importers.bulk import BatchWriter, ImportError_, Refusal
from app.repo import imports as imports_repo
from app.repo import term_stats, writes

__all__ = [
    "ImportError_",
    "ImportInterrupted",
    "ImportSummary",
    "Refusal",
    "from_dicts",
    "import_records",
    "parse_line",
    "read_file",
]


def _not_a_dot_segment(value: str) -> str:
    if value in DOT_SEGMENTS:
        raise ValueError(f"an id {DOT_SEGMENT_ID}")
    return value


IdStr = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$"),
    AfterValidator(_not_a_dot_segment),
]
# the type is judged as over REST, where the memory is made (:func:`entity_data`, by
# app.domain.write_rules.memory_type): stored stripped and lower-cased (``"NOTE"``: ``note``),
# a bad alphabet or the reserved ``passage`` in any case a line a rule refuses, as REST does
TypeStr = Annotated[str, StringConstraints(min_length=1, max_length=200)]
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
    """A declared span ``{start, end, label}`` (rule: declared-spans)."""

    start: int
    end: int
    label: str


class EntityRec(_Rec):
    """An entity (a memory); see docs/import-format.md for defaults."""

    kind: Literal["entity"]
    id: IdStr
    org: IdStr
    type: TypeStr
    # stripped, then one line of printable text of 1-1000 characters, as over REST (the rule is
    # applied where the memory is made, app.domain.entities.memory_name: REST's own message)
    name: str
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
VACUUM_TIMEOUT_S = 600.0
TABLES = {
    "org": ("orgs",),
    "user": ("users",),
    "project": ("projects",),
    "member": ("project_members",),
    "entity": (
        "entities",
        "passages",
        "mentions",
        "pending_links",
        "communities",
        "community_members",
    ),
    "edge": ("edges", "entities", "passages", "communities", "community_members"),
    "mention": ("mentions", "communities", "community_members"),
    "grant": ("entity_grants",),
}
"""The tables a kind of record writes (a memory: its passages, links and the communities it
retires; an edge: the superseded mark): what the import vacuums. The search statistics' tables
are vacuumed by their own refresh."""


@dataclass
class ImportSummary:
    """What an import did, by kind and outcome, the relationship pairs it wrote or kept, the
    lines refused by rule, and how long each part took (seconds)."""

    lines: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    relationships: Counter[str] = field(default_factory=Counter)
    pending_links: int = 0  # links of the imported orgs still waiting for their target
    orgs: set[str] = field(default_factory=set)
    rejected: Counter[str] = field(default_factory=Counter)  # refused lines by rule
    timings: dict[str, float] = field(default_factory=dict)  # reading, writing, statistics...
    kinds: set[str] = field(default_factory=set)  # the kinds of record written
    committed: int | None = None  # --commit-batches: the last line of the last batch committed
    written: bool = False  # every transaction of the writing phase committed

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
        rejected = sum(self.rejected.values())
        out = [
            f"imported {self.lines - rejected} of {self.lines} lines"
            if rejected
            else f"imported {self.lines} lines",
            *parts,
            f"  edge pairs: {rels or 'none'}",
            f"  pending links: {self.pending_links} (a [[id]] whose memory is not there yet)",
        ]
        if self.rejected:
            by_rule = ", ".join(f"{n} {rule}" for rule, n in sorted(self.rejected.items()))
            out.append(f"  rejected: {sum(self.rejected.values())} lines ({by_rule})")
        if self.timings:
            took = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
            out.append(f"  took: {took}")
        return "\n".join(out)


class Progress(Protocol):
    """What an import tells a progress display: a phase starts (its label and how many units
    it counts, None: unknown), and units of the running phase are done."""

    def phase(self, label: str, total: int | None) -> None:
        """A new phase starts."""

    def advance(self, n: int) -> None:
        """``n`` more units of the running phase are done."""


class ImportInterrupted(Exception):
    """The import was cancelled (Ctrl-C); the message says what stays written."""


class _Silent:
    def phase(self, label: str, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        pass


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
        said = "a byte order mark before the record" if "BOM" in exc.msg else exc.msg
        raise ImportError_(line_no, f"not valid JSON ({said})") from None
    except RecursionError:  # a line nested ~1,000 levels deep: a refused line
        raise ImportError_(line_no, "not valid JSON (nested deeper than it can be read)") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's limit)
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


Item = tuple[int, "Record | Refusal"]


def read_file(path: Path, *, lenient: bool = False) -> Iterator[Item]:
    """Numbered, validated records of an NDJSON file (1-based line numbers). A line that is no
    record (not UTF-8, not JSON, not of the format) raises ``ImportError_``, or with
    ``lenient`` is yielded as a :class:`Refusal` holding its text."""
    with path.open("rb") as fh:
        for n, data in enumerate(fh, start=1):
            if n == 1:  # a byte order mark opening the file (Windows editors write one)
                data = data.removeprefix(b"\xef\xbb\xbf")
            try:
                raw = data.decode("utf-8")
                rec = parse_line(n, raw)
            except UnicodeDecodeError as exc:
                said = f"not valid UTF-8 (byte {exc.start + 1})"
                if n == 1 and data.startswith(b"\x1f\x8b"):
                    said += "; the file looks gzip-compressed: import <(zcat FILE)"
                problem = ImportError_(n, said)
                if not lenient:
                    raise problem from None
                # the bytes that are not UTF-8 as \xNN escapes: the line can be told apart
                yield n, _malformed(problem, data.decode("utf-8", "backslashreplace"))
                continue
            except ImportError_ as problem:
                if not lenient:
                    raise
                yield n, _malformed(problem, raw)
                continue
            if rec is not None:
                yield n, rec


def _malformed(problem: ImportError_, raw: str) -> Refusal:
    return Refusal(problem.line, problem.reason, "malformed", text=raw.rstrip("\r\n"))


def from_dicts(records: Iterable[dict[str, Any]]) -> Iterator[Item]:
    """Validated records from dicts (e.g. the PEP mapping), numbered as lines of an NDJSON file."""
    for n, obj in enumerate(records, start=1):
        rec = parse_line(n, json.dumps(obj))
        if rec is not None:
            yield n, rec


def entity_data(rec: EntityRec) -> EntityData:
    """The memory a record states, with the import's defaults (rule: import-idempotent), its
    type and name as REST stores them; ``BadRequest`` (REST's message) for a type or name REST
    refuses, or when its scope, project and owner do not agree."""
    scope = rec.scope or ("project" if rec.project else "private")
    write_rules.check_scope(scope, rec.project)
    if scope == "private" and not rec.owner:
        raise BadRequest("a private entity needs an owner")
    return EntityData(
        id=rec.id,
        type=write_rules.memory_type(rec.type),
        name=memory_name(rec.name),
        content=rec.content,
        scope=scope,
        project_id=rec.project,
        owner_id=rec.owner,
        lifecycle=rec.lifecycle,
        metadata=rec.metadata,
        spans=[s.model_dump() for s in rec.spans] if rec.spans is not None else None,
    )


def _key(rec: Any) -> tuple[str, ...]:
    """What a record states, whatever its other fields: two lines of one key state one row."""
    kind = rec.kind
    if kind == "edge":
        return (kind, rec.org, rec.src, rec.relationship.upper(), rec.dst)
    if kind == "entity" or kind == "project":
        return (kind, rec.org, rec.id)
    if kind == "user":  # one id in two orgs: two records, the second refused (id taken)
        return (kind, rec.org, rec.id)
    if kind == "org":
        return (kind, rec.id)
    if kind == "member":
        return (kind, rec.project, rec.user)
    if kind == "mention":
        return (kind, rec.org, rec.src, rec.dst)
    return (kind, rec.entity, rec.user)


def last_lines(items: list[tuple[int, Record]]) -> tuple[list[tuple[int, Record]], Counter[str]]:
    """``items`` with each key kept once, at its last line (in line order), and how many
    earlier lines of each kind a later one overrode."""
    last: dict[tuple[str, ...], int] = {}
    for index, (_, rec) in enumerate(items):
        last[_key(rec)] = index
    keep = set(last.values())
    overridden: Counter[str] = Counter(
        f"{rec.kind}:overridden" for i, (_, rec) in enumerate(items) if i not in keep
    )
    return [item for i, item in enumerate(items) if i in keep], overridden


def _accepted(
    records: Iterable[Item],
    summary: ImportSummary,
    refused: list[Refusal],
    *,
    skip: bool,
    advance: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Record]]:
    """The records of ``records`` that are no refusal, in order, each line counted in
    ``summary.lines``: a refusal raises ``ImportError_``, or with ``skip`` joins ``refused``;
    ``advance`` (a progress display) is told of every 5,000 lines read."""
    for n, rec in records:
        summary.lines += 1
        if advance is not None and summary.lines % 5000 == 0:
            advance(5000)
        if isinstance(rec, Refusal):
            if not skip:
                raise ImportError_(n, rec.reason)
            refused.append(rec)
            continue
        yield n, rec


def _windows(
    records: Iterable[tuple[int, Record]], size: int
) -> Iterator[list[tuple[int, Record]]]:
    """A streamed import's records, ``size`` lines at a time, as they arrive; ``ValueError``
    on a repeated key."""
    first_line: dict[tuple[str, ...], int] = {}
    window: list[tuple[int, Record]] = []
    for n, rec in records:
        seen = first_line.setdefault(_key(rec), n)
        if seen != n:
            raise ValueError(f"line {n} repeats the key of line {seen} in a streamed import")
        window.append((n, rec))
        if len(window) >= size:
            yield window
            window = []
    if window:
        yield window


class _Earlier(NamedTuple):
    """The lines a later line of the same key overrode (``lines``, by key, in line order) and
    the key of every line of such a key (``key_of``, by line number)."""

    lines: dict[tuple[str, ...], list[tuple[int, Record]]]
    key_of: dict[int, tuple[str, ...]]


def _earlier_lines(items: list[tuple[int, Record]]) -> _Earlier:
    """What :func:`last_lines` overrode in ``items``: each key stated on more than one line."""
    by_key: dict[tuple[str, ...], list[tuple[int, Record]]] = defaultdict(list)
    for item in items:
        by_key[_key(item[1])].append(item)
    repeated = {key: found for key, found in by_key.items() if len(found) > 1}
    return _Earlier(
        {key: found[:-1] for key, found in repeated.items()},
        {n: key for key, found in repeated.items() for n, _ in found},
    )


def _fallbacks(
    refusals: list[Refusal], earlier: _Earlier, outcomes: Counter[str]
) -> list[tuple[int, tuple[int, Record]]]:
    """With ``skip``, a refused line overrides nothing (rule: import-idempotent): for each of
    ``refusals`` whose key an earlier line stated, (the refused line, that earlier line: the
    latest of them), taken out of ``earlier`` and no longer counted as overridden in
    ``outcomes``. The caller writes the batch again without the refused lines and with these,
    as if the refused lines were not in the file: what refers to the key, later in the batch,
    finds it, and the lines keep their order."""
    out: list[tuple[int, tuple[int, Record]]] = []
    for refusal in refusals:
        key = earlier.key_of.get(refusal.line)
        lines = earlier.lines.get(key) if key is not None else None
        if not lines:
            continue
        n, rec = lines.pop()
        counted = f"{rec.kind}:overridden"
        outcomes[counted] -= 1
        if outcomes[counted] <= 0:
            del outcomes[counted]
        out.append((refusal.line, (n, rec)))
    return out


def _report(
    refused: list[Refusal],
    summary: ImportSummary,
    on_refused: Callable[[Refusal], None] | None,
    *,
    through: int | None = None,
) -> None:
    """Count by rule and give to ``on_refused``, in line order, the refusals of lines up to
    ``through`` (None: all of them), taking them out of ``refused``."""
    refused.sort(key=lambda r: r.line)
    cut = (
        len(refused)
        if through is None
        else next((i for i, r in enumerate(refused) if r.line > through), len(refused))
    )
    told = refused[:cut]
    del refused[:cut]
    summary.rejected.update(r.rule for r in told)
    if on_refused is not None:
        for refusal in told:
            on_refused(refusal)


def _no_progress(_n: int) -> None:
    """A batch written again is not counted twice by the progress display."""


async def _write_batch(
    conn: AsyncConnection,
    batch: list[tuple[int, Record]],
    earlier: _Earlier,
    *,
    skip: bool,
    evidence_lines: int,
    into: tuple[Counter[str], Counter[str], list[Refusal]],
    overridden: Counter[str],
    advance: Callable[[int], None],
) -> list[tuple[int, Record]]:
    """Write ``batch`` in ``conn``'s transaction; return the lines written. Its outcomes,
    relationships and refusals go ``into`` those three. With ``skip`` and a key stated on more
    than one line (``earlier``), it is written from a savepoint: when a refused line has an
    earlier line of its key (:func:`_fallbacks`, which takes it out of ``overridden``), the
    attempt is rolled back and the batch written again with that line in the refused one's
    place, as often as needed; only the attempt kept is counted."""
    attempt = batch
    swapped_out: list[Refusal] = []  # refused lines an earlier line of their key replaced
    while attempt:
        retry = await conn.begin_nested() if skip and earlier.lines else None
        outcomes: Counter[str] = Counter()
        relationships: Counter[str] = Counter()
        refused: list[Refusal] = []
        writer = BatchWriter(
            conn,
            evidence_lines=evidence_lines,
            skip=skip,
            outcomes=outcomes,
            relationships=relationships,
            refused=refused,
            advance=advance,
            entity_data=entity_data,
        )
        await writer.write(attempt)
        # a line refused for a missing reference may only miss a line refused in this attempt
        # (its memory's last line): it is tried again once the lines refused for their own
        # fault have their earlier lines in place, and falls back itself only when none has
        fallible = [r for r in refused if earlier.lines.get(earlier.key_of.get(r.line, ()))]
        own = [r for r in fallible if r.rule != "missing reference"]
        swaps = _fallbacks(own or fallible, earlier, overridden)
        if not swaps:
            if retry is not None:
                await retry.commit()
            into[0].update(outcomes)
            into[1].update(relationships)
            into[2].extend(swapped_out + refused)
            return attempt
        assert retry is not None
        await retry.rollback()
        gone = {line for line, _ in swaps}
        swapped_out += [r for r in refused if r.line in gone]
        attempt = sorted(
            [item for item in attempt if item[0] not in gone] + [item for _, item in swaps]
        )
        advance = _no_progress
    return []


async def import_records(
    engine: AsyncEngine,
    records: Iterable[Item],
    *,
    total: int | None = None,
    batch_size: int = 500,
    evidence_lines: int = 40,
    atomic: bool = True,
    on_error: Literal["stop", "skip"] = "stop",
    on_refused: Callable[[Refusal], None] | None = None,
    progress: Progress | None = None,
    streamed: bool = False,
) -> ImportSummary:
    """Write numbered records (as :func:`read_file` yields them); return the summary.

    ``atomic`` (default): the whole input in one transaction. Otherwise one committed
    transaction per batch of ``batch_size`` lines (after the last-line-wins pass). With
    ``on_error="stop"`` (default) the first refused line raises ``ImportError_`` (its
    ``committed`` says which lines stay written: None, none); with ``"skip"`` refused lines are
    left out and given to ``on_refused`` in line order. ``progress`` is told of each phase
    (reading, writing, statistics, vacuum); a command line passes a ``rich`` bar
    (:class:`app.cli.progress.PhaseProgress`).

    ``streamed`` (atomic only, else ``ValueError``): the records are written as they arrive, a
    window of ``batch_size`` lines at a time, in the one transaction, so that a producer still
    at work (the PEP parser's processes) runs while the database writes. Last-line-wins needs
    the whole input first, so the producer vouches that no key appears twice: a repeated key
    raises ``ValueError`` naming both lines (nothing is written).

    Cancelled (Ctrl-C), it raises :class:`ImportInterrupted` saying what stays written, once
    ``on_refused`` has every line refused so far: those read, and those of the committed
    transactions (the lines of the one cancelled are neither written nor judged).
    """
    summary = ImportSummary()
    refused: list[Refusal] = []  # read, or of a committed transaction: not yet told
    with _interruption_says_what_stays(summary, refused, on_refused):
        display: Progress = progress or _Silent()
        skip = on_error == "skip"
        started = time.perf_counter()
        transactions: Iterable[Iterable[list[tuple[int, Record]]]]  # each: the batches it writes
        earlier = _Earlier({}, {})  # with skip: what a later line overrode (see _fallbacks)
        if streamed:
            if not atomic:
                raise ValueError("a streamed import is written in one transaction (atomic)")
            summary.timings["reading"] = 0.0  # the lines are read while they are written
            accepted = _accepted(records, summary, refused, skip=skip)
            transactions = [_windows(accepted, batch_size)]
        else:
            display.phase("reading", total)
            items = list(_accepted(records, summary, refused, skip=skip, advance=display.advance))
            display.advance(summary.lines % 5000)
            winners, overridden = last_lines(items)
            summary.outcomes.update(overridden)
            if skip:
                earlier = _earlier_lines(items)
            summary.timings["reading"] = time.perf_counter() - started
            total = len(winners)
            if atomic:
                transactions = [[winners]]
            else:
                transactions = [
                    [winners[i : i + batch_size]] for i in range(0, len(winners), batch_size)
                ]

        started = time.perf_counter()
        display.phase("writing", total)
        with write_rules.settling() as unsettled:
            for batches in transactions:
                outcomes: Counter[str] = Counter()
                relationships: Counter[str] = Counter()
                found: list[Refusal] = []
                written: list[tuple[int, Record]] = []
                try:
                    async with engine.begin() as conn:
                        await imports_repo.begin_import(conn)
                        for batch in batches:
                            written += await _write_batch(
                                conn,
                                batch,
                                earlier,
                                skip=skip,
                                evidence_lines=evidence_lines,
                                into=(outcomes, relationships, found),
                                overridden=summary.outcomes,
                                advance=display.advance,
                            )
                except ImportError_ as exc:
                    exc.committed = summary.committed
                    raise
                if not written:
                    continue
                if not atomic:
                    summary.committed = max(n for n, _ in written)
                summary.outcomes.update(outcomes)
                summary.relationships.update(relationships)
                refused += found
                if summary.committed is not None:  # told as their batch commits: kept on Ctrl-C
                    _report(refused, summary, on_refused, through=summary.committed)
                summary.orgs.update(o for _, rec in written if (o := getattr(rec, "org", None)))
                summary.kinds.update(rec.kind for _, rec in written)
            summary.written = True
            async with engine.begin() as conn:  # links a concurrent write left: settled now
                if unsettled:
                    await write_rules.settle(conn, unsettled, reader_params=None)
                summary.pending_links = await writes.pending_count(
                    conn, org_ids=sorted(summary.orgs)
                )
        summary.timings["writing"] = time.perf_counter() - started
        _report(refused, summary, on_refused)
        if summary.lines >= ANALYZE_AFTER and summary.kinds:
            # two backends at once: the recount reads what the vacuum does not lock
            display.phase("search statistics and vacuum", None)

            async def timed(part: str, work: Awaitable[Any]) -> None:
                began = time.perf_counter()
                await work
                summary.timings[part] = time.perf_counter() - began

            tables = sorted({t for k in summary.kinds for t in TABLES[k]})
            # the recount's statements are planned on the loaded tables' statistics: planned on
            # those of the empty tables the load started from, the impact lists' count of the PEP
            # org ran for minutes instead of seconds (ANALYZE samples: a second or two)
            await timed("analyze", analyze(engine, tables=tables))
            await asyncio.gather(
                timed("statistics", term_stats.refresh_orgs(engine, sorted(summary.orgs))),
                timed("vacuum", vacuum(engine, tables=tables)),
            )
        return summary


@contextlib.contextmanager
def _interruption_says_what_stays(
    summary: ImportSummary,
    refused: list[Refusal],
    on_refused: Callable[[Refusal], None] | None,
) -> Iterator[None]:
    """Inside the block, a cancellation (Ctrl-C) ends as :class:`ImportInterrupted` saying what
    stays written, whatever the cancellation raised on its way out (a connection invalidated
    mid-statement cannot roll back), once the lines refused so far and not yet told
    (``refused``: those read, and those of committed transactions; not those of the
    transaction cancelled, which wrote nothing) are given to ``on_refused``."""
    try:
        yield
    except BaseException:
        task = asyncio.current_task()
        if task is None or not task.cancelling():
            raise
        _report(refused, summary, on_refused)
        raise ImportInterrupted(_outcome(summary)) from None


def _outcome(summary: ImportSummary) -> str:
    """What an interrupted import left written, in words."""
    if summary.written:
        refused = sum(summary.rejected.values())
        written = (
            f"every line but the {refused} refused ones (listed in the reject file) was written"
            if refused
            else "every line was written"
        )
        return (
            f"{written}, but the search statistics were not recounted: run "
            "`sibyl-pg stats refresh` (and VACUUM (ANALYZE) the database)"
        )
    if summary.committed is None:
        return "nothing of the file was written"
    return (
        f"lines 1-{summary.committed} were committed; nothing from line "
        f"{summary.committed + 1} on was written"
    )


async def analyze(engine: AsyncEngine, *, tables: list[str]) -> None:
    """``ANALYZE`` the tables an import wrote: the planner's statistics, before the recount."""
    await imports_repo.analyze(engine, tables, timeout_s=VACUUM_TIMEOUT_S)


async def vacuum(engine: AsyncEngine, *, tables: list[str] | None = None) -> None:
    """``VACUUM (ANALYZE)`` the tables an import wrote (default: every table an import writes),
    outside any transaction: fresh statistics for the planner and a fresh visibility map for
    index-only scans. Not bound by a service engine's statement timeout (up to
    :data:`VACUUM_TIMEOUT_S`)."""
    names = tables if tables is not None else sorted({t for ts in TABLES.values() for t in ts})
    await imports_repo.vacuum_analyze(engine, names, timeout_s=VACUUM_TIMEOUT_S)
