"""Writing one transaction of an import, kind by kind and set-based, line by line in its answers.

:class:`BatchWriter` applies numbered records in the order org, user, project, member, entity,
edge, mention, grant, so a record may refer to a row stated later in the file. For each kind it
first applies the rules that need no database (the same functions REST and MCP call:
:mod:`app.domain.write_rules`, :func:`app.domain.memories.checked_cut`,
:func:`app.domain.validation.stored_relationship`), then checks every reference of the whole
kind in a few statements (which orgs, users, projects and memories exist, locking the memories
referenced ``FOR KEY SHARE`` as a foreign key check would), then writes what passed: new rows
through ``COPY`` into staging tables (:mod:`app.repo.bulk`), a memory already stored through
:func:`app.domain.memories.save_entity` like a REST edit. SUPERSEDES edges are checked for
cycles in line order against the org's stored ones (under the org's SUPERSEDES lock), so the
line refused is the one REST would refuse had the lines been sent one by one.

A line a rule refuses becomes a :class:`Refusal` (its line, the rule's own message, a short rule
name). With ``skip`` the others are written and nothing of a refused line is: a memory saved one
by one runs under a savepoint. Without it, the first refusal (by line) of a kind stops the
transaction (:class:`ImportError_`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import DomainError, sqlstate
from app.domain import spans, write_rules
from app.domain.memories import (
    EntityData,
    checked_cut,
    links,
    passage_rows,
    save_entity,
    unchanged,
)
from app.domain.validation import stored_relationship
from app.repo import bulk, writes
from app.repo import communities as community_repo
from app.repo import entities as entity_repo

PARALLEL_CUT_CHARS = 4_000_000
"""Characters of bodies to cut (those over the prose threshold, evidence, declared spans)
above which a batch cuts them in one worker process per core: below, starting the workers
costs more than they save."""
MISSING_MEMBER = "project '{p}' or user '{u}' does not exist, or they belong to different orgs"
MISSING_GRANT = "entity '{e}' or user '{u}' does not exist, or they belong to different orgs"
SELF_MENTION = "a mention may not point at its own source"
TAKEN_MEANWHILE = (
    "entity '{i}' was created in org '{o}' by another writer meanwhile; run the import again"
)


class ImportError_(Exception):
    """A line that could not be imported: its number and a reason naming the offending id (no
    SQL, no stack); ``committed``: the last line of the last committed batch (non-atomic
    imports only; None: nothing of the file was written); ``more``: how many other lines of
    the same step were refused too; ``subject``: the record in words when ``reason`` (the
    rule's own message, as REST answers it) does not name it, said before the reason."""

    def __init__(self, line: int, reason: str, more: int = 0, subject: str | None = None) -> None:
        super().__init__(f"line {line}: {subject + ': ' if subject else ''}{reason}")
        self.line = line
        self.reason = reason
        self.more = more
        self.committed: int | None = None

    def outcome(self) -> str:
        """What stays written, in words."""
        if self.committed is None:
            return "nothing of the file was written"
        return (
            f"lines 1-{self.committed} were committed; nothing from line "
            f"{self.committed + 1} on was written"
        )


RULES = {
    write_rules.RESERVED_TYPE: "reserved type",
    write_rules.RESERVED_ID: "reserved id",
    write_rules.CYCLE: "SUPERSEDES cycle",
    write_rules.SELF_EDGE: "link to itself",
    SELF_MENTION: "link to itself",
}


def rule_of(reason: str) -> str:
    """The short name of the rule a refusal's message states (the summary counts by it)."""
    if reason in RULES:
        return RULES[reason]
    if "does not exist" in reason:
        return "missing reference"
    if "another writer" in reason or "another org" in reason:
        return "id taken"
    return "refused by a rule"


@dataclass(frozen=True)
class Refusal:
    """A line refused: its number, the rule's message, the rule's short name, and what the
    line held (the record as read, or the raw text of a line that is no record)."""

    line: int
    reason: str
    rule: str
    record: dict[str, Any] | None = None
    text: str | None = None

    def to_json(self) -> str:
        """One line of the reject file (NDJSON)."""
        out: dict[str, Any] = {"line": self.line, "rule": self.rule, "reason": self.reason}
        if self.record is not None:
            out["record"] = self.record
        if self.text is not None:
            out["text"] = self.text
        return json.dumps(out, ensure_ascii=False)


def subject(refusal: Refusal) -> str | None:
    """The record a refusal refuses, in words (``entity 'r09'``), for the message an
    all-or-nothing import stops with; None when its reason names it already (it starts with
    the record's kind, or quotes its id, or every id that makes its key)."""
    rec = refusal.record or {}
    kind = rec.get("kind")
    if kind == "edge":
        what = f"edge '{rec.get('src')}' -{rec.get('relationship')}-> '{rec.get('dst')}'"
    elif kind == "mention":
        what = f"mention '{rec.get('src')}' -> '{rec.get('dst')}'"
    elif kind == "member":
        what = f"member '{rec.get('user')}' of project '{rec.get('project')}'"
    elif kind == "grant":
        what = f"grant of '{rec.get('entity')}' to '{rec.get('user')}'"
    elif kind is not None and "id" in rec:
        what = f"{kind} '{rec['id']}'"
    else:
        return None
    own = ("id",) if "id" in rec else ("src", "dst", "project", "entity", "user")
    named_already = [f"'{rec[k]}'" in refusal.reason for k in own if k in rec]
    if refusal.reason.startswith(f"{kind} ") or (named_already and all(named_already)):
        return None
    return what


def _record_of(rec: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = rec.model_dump(mode="json", exclude_unset=True)
    return dumped


def _cut_one(item: tuple[EntityData, int]) -> tuple[spans.Projection | None, str | None]:
    """:func:`checked_cut` in a worker: (projection, None) or (None, the refusal's reason)."""
    data, evidence_lines = item
    try:
        return checked_cut(data, evidence_lines=evidence_lines), None
    except DomainError as exc:
        return None, exc.detail


def _needs_cut(data: EntityData) -> bool:
    return data.spans is not None or len(data.content) > spans.PROSE_MIN_BODY


async def cut_all(
    datas: Sequence[EntityData], evidence_lines: int
) -> list[tuple[spans.Projection | None, str | None]]:
    """:func:`_cut_one` of every memory, in order: in one worker process per core when the
    bodies to cut hold over :data:`PARALLEL_CUT_CHARS` characters, here otherwise."""
    heavy = sum(len(d.content) for d in datas if _needs_cut(d))
    workers = min(os.cpu_count() or 1, 8)
    if heavy < PARALLEL_CUT_CHARS or workers < 2:
        return [_cut_one((d, evidence_lines)) for d in datas]
    out: list[tuple[spans.Projection | None, str | None]] = [(None, None)] * len(datas)
    todo = [i for i, d in enumerate(datas) if _needs_cut(d)]
    for i, d in enumerate(datas):
        if not _needs_cut(d):
            out[i] = _cut_one((d, evidence_lines))
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        chunk = max(1, len(todo) // (workers * 8))
        results = await loop.run_in_executor(
            None,
            lambda: list(
                pool.map(_cut_one, [(datas[i], evidence_lines) for i in todo], chunksize=chunk)
            ),
        )
    for i, result in zip(todo, results, strict=True):
        out[i] = result
    return out


_FK_DETAIL = re.compile(
    r'Key \((?P<cols>[^)]*)\)=\((?P<vals>[^)]*)\) is not present in table "(?P<t>\w+)"'
)
_TAKEN_DETAIL = re.compile(r"Key \(org_id, id\)=\((?P<org>[^,]*), (?P<id>[^)]*)\) already exists")


def integrity_reason(exc: IntegrityError) -> str:
    """A reason naming the missing row, from PostgreSQL's error detail (no SQL, no stack)."""
    orig = exc.orig
    cause = getattr(orig, "__cause__", None)
    detail = str(getattr(orig, "detail", None) or getattr(cause, "detail", None) or "")
    taken = _TAKEN_DETAIL.search(detail)
    constraint = getattr(orig, "constraint_name", None) or getattr(cause, "constraint_name", None)
    if taken is not None and constraint == "pk_entities":
        return TAKEN_MEANWHILE.format(i=taken["id"], o=taken["org"])
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


@contextlib.asynccontextmanager
async def at_line(line: int) -> AsyncIterator[None]:
    """Report any refusal inside the block as an :class:`ImportError_` of ``line``."""
    try:
        yield
    except DomainError as exc:
        raise ImportError_(line, exc.detail) from None
    except IntegrityError as exc:
        raise ImportError_(line, integrity_reason(exc)) from None
    except DBAPIError as exc:
        code = sqlstate(exc)  # no table, a dropped connection, a timeout: not the line's fault
        if code is None or code[:2] not in RECORD_FAULT_CLASSES:
            raise
        raise ImportError_(line, "the database refused this record") from None


RECORD_FAULT_CLASSES = ("22", "23", "54")
"""SQLSTATE classes a record itself can cause (data exception, integrity, a program limit such
as an index row too large): a refused line. Any other database error (a missing table, a lost
connection, a timeout) stops the import and is reported as what it is."""


KIND_ORDER = ("org", "user", "project", "member", "entity", "edge", "mention", "grant")
Numbered = list[tuple[int, Any]]


def by_org(items: Numbered) -> dict[str, Numbered]:
    """``items`` (records with an ``org``) grouped by it, in line order."""
    orgs = {rec.org for _, rec in items}
    if len(orgs) == 1:  # the usual file: one org
        return {orgs.pop(): items}
    out: dict[str, Numbered] = defaultdict(list)
    for n, rec in items:
        out[rec.org].append((n, rec))
    return out


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether ``goal`` is reachable from ``start`` along ``graph``'s edges."""
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


class BatchWriter:
    """Writes numbered records in one transaction (module docstring); counts outcomes,
    relationships and refusals into the given counters and list."""

    def __init__(
        self,
        conn: AsyncConnection,
        *,
        evidence_lines: int,
        skip: bool,
        outcomes: Counter[str],
        relationships: Counter[str],
        refused: list[Refusal],
        advance: Callable[[int], None],
        entity_data: Callable[[Any], EntityData],
    ) -> None:
        self.conn = conn
        self.evidence_lines = evidence_lines
        self.skip = skip
        self.outcomes = outcomes
        self.relationships = relationships
        self.refused = refused
        self.advance = advance
        self.entity_data = entity_data
        self._new_refusals: list[Refusal] = []
        self.set_based = False  # whether foreign keys may be checked set-based only

    def refuse(self, line: int, reason: str, rec: Any) -> None:
        """Record that ``line`` is refused for ``reason``."""
        self._new_refusals.append(Refusal(line, reason, rule_of(reason), _record_of(rec)))

    def settle_step(self) -> None:
        """End a step of checks: without ``skip``, its first refusal (by line) stops the
        transaction; with it, the refusals join the import's list."""
        found = sorted(self._new_refusals, key=lambda r: r.line)
        self._new_refusals = []
        if not found:
            return
        if not self.skip:
            first = found[0]
            raise ImportError_(first.line, first.reason, len(found) - 1, subject(first))
        self.refused.extend(found)

    async def write(self, items: Numbered) -> None:
        """Apply ``items`` kind by kind (module docstring)."""
        self.set_based = await bulk.may_skip_row_checks(self.conn)
        kinds: dict[str, Numbered] = defaultdict(list)
        for n, rec in items:
            kinds[rec.kind].append((n, rec))
        steps = {
            "org": self._orgs,
            "user": self._users,
            "project": self._projects,
            "member": self._members,
            "entity": self._entities,
            "edge": self._edges,
            "mention": self._mentions,
            "grant": self._grants,
        }
        for kind in KIND_ORDER:
            if kinds.get(kind):
                await steps[kind](kinds[kind])

    # ---- directory ------------------------------------------------------------------------

    async def _orgs(self, items: Numbered) -> None:
        async with at_line(items[0][0]):
            written = await bulk.upsert_orgs(self.conn, rows=[(r.id, r.name) for _, r in items])
        self.outcomes["org:written"] += written
        self.outcomes["org:unchanged"] += len(items) - written
        self.advance(len(items))

    async def _known_org(self, items: Numbered) -> Numbered:
        """``items`` whose org exists; the others refused."""
        found = await bulk.orgs_found(self.conn, ids=[r.org for _, r in items])
        kept = []
        for n, rec in items:
            if rec.org in found:
                kept.append((n, rec))
            else:
                self.refuse(n, f"org '{rec.org}' does not exist", rec)
        return kept

    async def _users(self, items: Numbered) -> None:
        kept = await self._known_org(items)
        elsewhere = await bulk.users_elsewhere(self.conn, rows=[(r.id, r.org) for _, r in kept])
        ok = []
        org_of: dict[str, str] = {}  # a file naming one user in two orgs: the first line holds
        for n, rec in kept:
            if rec.id in elsewhere or org_of.setdefault(rec.id, rec.org) != rec.org:
                self.refuse(n, f"user '{rec.id}' exists in another org (ids are unique)", rec)
            else:
                ok.append((n, rec))
        self.settle_step()
        async with at_line(items[0][0]):
            written = await bulk.upsert_users(
                self.conn, rows=[(r.org, r.id, r.handle, r.role) for _, r in ok]
            )
        self.outcomes["user:written"] += written
        self.outcomes["user:unchanged"] += len(ok) - written
        self.advance(len(items))

    async def _projects(self, items: Numbered) -> None:
        kept = await self._known_org(items)
        self.settle_step()
        async with at_line(items[0][0]):
            written = await bulk.upsert_projects(
                self.conn, rows=[(r.org, r.id, r.name, r.visibility) for _, r in kept]
            )
        self.outcomes["project:written"] += written
        self.outcomes["project:unchanged"] += len(kept) - written
        self.advance(len(items))

    async def _members(self, items: Numbered) -> None:
        missing = await bulk.members_missing(
            self.conn, rows=[(n, r.project, r.user) for n, r in items]
        )
        kept = []
        for n, rec in items:
            if n in missing:
                self.refuse(n, MISSING_MEMBER.format(p=rec.project, u=rec.user), rec)
            else:
                kept.append((n, rec))
        self.settle_step()
        async with at_line(items[0][0]):
            written = await writes.upsert_members(
                self.conn, members=[(r.project, r.user, r.role) for _, r in kept]
            )
        self.outcomes["member:written"] += written
        self.outcomes["member:unchanged"] += len(kept) - written
        self.advance(len(items))

    async def _grants(self, items: Numbered) -> None:
        missing = await bulk.grants_missing(
            self.conn, rows=[(n, r.entity, r.user) for n, r in items]
        )
        kept = []
        for n, rec in items:
            if n in missing:
                self.refuse(n, MISSING_GRANT.format(e=rec.entity, u=rec.user), rec)
            else:
                kept.append((n, rec))
        self.settle_step()
        async with at_line(items[0][0]):
            written = await bulk.insert_grants(
                self.conn, rows=[(r.entity, r.user) for _, r in kept]
            )
        self.outcomes["grant:written"] += written
        self.outcomes["grant:unchanged"] += len(kept) - written
        self.advance(len(items))

    # ---- memories -------------------------------------------------------------------------

    async def _entities(self, items: Numbered) -> None:
        for org, recs in by_org(items).items():
            await self._org_entities(org, recs)

    async def _org_entities(self, org: str, recs: Numbered) -> None:
        conn = self.conn
        prepared: list[tuple[int, Any, EntityData]] = []
        for n, rec in recs:
            try:
                prepared.append((n, rec, self.entity_data(rec)))
            except DomainError as exc:
                self.refuse(n, exc.detail, rec)
        cuts = await cut_all([d for _, _, d in prepared], self.evidence_lines)
        checked: list[tuple[int, Any, EntityData, spans.Projection | None]] = []
        for (n, rec, data), (projection, problem) in zip(prepared, cuts, strict=True):
            if problem is not None:
                self.refuse(n, problem, rec)
            else:
                checked.append((n, rec, data, projection))
        self.advance(len(recs) // 2)
        if not await bulk.orgs_found(conn, ids=[org]):
            for n, rec, _, _ in checked:
                self.refuse(n, f"org '{org}' does not exist", rec)
            self.settle_step()
            return
        owners = await bulk.users_found(
            conn, org_id=org, ids=[d.owner_id for _, _, d, _ in checked if d.owner_id]
        )
        projects = await bulk.projects_found(
            conn, org_id=org, ids=[d.project_id for _, _, d, _ in checked if d.project_id]
        )
        ready = []
        for n, rec, data, projection in checked:
            if data.owner_id is not None and data.owner_id not in owners:
                self.refuse(n, f"user '{data.owner_id}' does not exist in org '{org}'", rec)
            elif data.project_id is not None and data.project_id not in projects:
                self.refuse(n, f"project '{data.project_id}' does not exist in org '{org}'", rec)
            else:
                ready.append((n, rec, data, projection))
        self.settle_step()
        stored = await writes.existing_ids(conn, org_id=org, ids=[d.id for _, _, d, _ in ready])
        new = [(n, rec, d, p) for n, rec, d, p in ready if d.id not in stored]
        async with at_line(new[0][0] if new else 0), bulk.checked_set_based(conn, self.set_based):
            inserted = await bulk.insert_entities(
                conn, org_id=org, rows=[(d.fields(), p) for _, _, d, p in new]
            )
        for n, rec, data, _ in new:
            if data.id not in inserted:
                self.refuse(n, TAKEN_MEANWHILE.format(i=data.id, o=org), rec)
        self.settle_step()
        created = [(d, p) for _, _, d, p in new if d.id in inserted]
        async with at_line(new[0][0] if new else 0):
            await self._derive_new(org, created)
        self.outcomes["entity:created"] += len(created)
        await self._stored_entities(org, [(n, rec, d) for n, rec, d, _ in ready if d.id in stored])
        self.advance(len(recs) - len(recs) // 2)

    async def _derive_new(
        self, org: str, items: Sequence[tuple[EntityData, spans.Projection | None]]
    ) -> None:
        """The spans, links and pending links of new memories (as :func:`save_entity` writes
        them for one): passages at revision 1, pending links to them resolved, their own links
        stored, communities of memories that gained a mention retired."""
        if not items:
            return
        conn = self.conn
        async with bulk.checked_set_based(conn, self.set_based):  # parents inserted just now
            await bulk.insert_passages(
                conn,
                org_id=org,
                rows=[(d.id, 1, r) for d, p in items for r in passage_rows(d, 1, p)],
            )
        ids = [d.id for d, _ in items]
        gained = await writes.resolve_pending_many(conn, org_id=org, ids=ids)
        write_rules.note_created(org, ids)
        pairs = [(d.id, t) for d, _ in items for t in links(d.content) if t != d.id]
        write_rules.note_pending(org, sorted({s for s, _ in pairs}))
        await writes.derive_links(conn, org_id=org, pairs=pairs)
        await write_rules.retire_bulk_link_communities(conn, org_id=org, pairs=[*gained, *pairs])

    async def _stored_entities(self, org: str, items: list[tuple[int, Any, EntityData]]) -> None:
        """Memories already stored: those a save would leave as they are found set-based
        (``unchanged``), the others saved one by one as a REST edit, keeping a superseded mark
        a SUPERSEDES edge set (the import is declarative)."""
        if not items:
            return
        plain = [d for _, _, d in items if d.spans is None]
        same, lifecycle = await unchanged(self.conn, org_id=org, items=plain, keep_mark=True)
        self.outcomes["entity:unchanged"] += len(same)
        for n, rec, data in items:
            if data.id in same:
                continue
            if data.spans is not None and data.lifecycle == "active":
                if await write_rules.keeps_superseded_mark(
                    self.conn, org_id=org, entity_id=data.id
                ):
                    data.lifecycle = "superseded"
            elif data.id in lifecycle:
                data.lifecycle = lifecycle[data.id]
            outcome = await self._one(n, rec, data, org)
            if outcome is not None:
                self.outcomes[f"entity:{outcome}"] += 1
        self.settle_step()

    async def _one(self, n: int, rec: Any, data: EntityData, org: str) -> str | None:
        """Save one stored memory (under a savepoint with ``skip``); its outcome, or None when
        refused."""
        try:
            if not self.skip:
                async with at_line(n):
                    outcome, _ = await save_entity(
                        self.conn, org_id=org, data=data, evidence_lines=self.evidence_lines
                    )
                return outcome
            async with self.conn.begin_nested():
                outcome, _ = await save_entity(
                    self.conn, org_id=org, data=data, evidence_lines=self.evidence_lines
                )
            return outcome
        except DomainError as exc:
            self.refuse(n, exc.detail, rec)
        except IntegrityError as exc:
            self.refuse(n, integrity_reason(exc), rec)
        return None

    # ---- edges and mentions ---------------------------------------------------------------

    async def _ends(
        self, org: str, kind: str, items: list[tuple[int, Any, str, str]]
    ) -> list[tuple[int, Any, str, str]]:
        """``(line, record, src, dst)`` items whose two ends are memories of ``org`` (locked
        ``FOR KEY SHARE`` until the transaction ends); the others refused."""
        if not await bulk.orgs_found(self.conn, ids=[org]):
            for n, rec, _, _ in items:
                self.refuse(n, f"org '{org}' does not exist", rec)
            return []
        ids = sorted({x for _, _, s, d in items for x in (s, d)})
        found: set[str] = set()
        for start in range(0, len(ids), bulk.COPY_ROWS):
            found |= await writes.referenced_ids(
                self.conn, org_id=org, ids=ids[start : start + bulk.COPY_ROWS]
            )
        kept = []
        for n, rec, s, d in items:
            if s not in found:
                self.refuse(n, f"{kind} src '{s}' does not exist in org '{org}'", rec)
            elif d not in found:
                self.refuse(n, f"{kind} dst '{d}' does not exist in org '{org}'", rec)
            else:
                kept.append((n, rec, s, d))
        return kept

    async def _edges(self, items: Numbered) -> None:
        for org, recs in by_org(items).items():
            await self._org_edges(org, recs)

    async def _org_edges(self, org: str, recs: Numbered) -> None:
        conn = self.conn
        candidates: list[tuple[int, Any, str, str]] = []
        relationship: dict[int, str] = {}
        names: dict[str, str | DomainError] = {}  # a file names a few relationships, often
        for n, rec in recs:
            name = names.get(rec.relationship)
            if name is None:
                try:
                    name = names[rec.relationship] = stored_relationship(rec.relationship)
                except DomainError as exc:
                    name = names[rec.relationship] = exc
            if isinstance(name, DomainError):
                self.refuse(n, name.detail, rec)
            elif rec.src == rec.dst:
                self.refuse(n, write_rules.SELF_EDGE, rec)
            else:
                relationship[n] = name
                candidates.append((n, rec, rec.src, rec.dst))
        kept = await self._ends(org, "edge", candidates)
        self.settle_step()
        plain = [(s, relationship[n], d) for n, _, s, d in kept if relationship[n] != "SUPERSEDES"]
        returning = await community_repo.has_communities(conn, org_id=org)
        self.advance(len(recs) - len(plain))
        written, created = 0, list[tuple[str, str, str]]()
        for start in range(0, len(plain), bulk.COPY_ROWS):
            part = plain[start : start + bulk.COPY_ROWS]
            async with at_line(kept[0][0]), bulk.checked_set_based(conn, self.set_based):
                count, new = await bulk.insert_edges(  # ends locked by _ends
                    conn, org_id=org, edges=part, returning=returning
                )
            written, created = written + count, created + new
            self.advance(len(part))
        async with at_line(kept[0][0] if kept else 0):
            if returning:
                await write_rules.retire_link_communities(
                    conn, org_id=org, pairs=sorted({(s, d) for s, _, d in created})
                )
            elif written:
                await community_repo.mark(conn, org_id=org)
        supersedes = [(n, rec, s, d) for n, rec, s, d in kept if relationship[n] == "SUPERSEDES"]
        written += await self._supersedes(org, supersedes)
        cycles = {r.line for r in self._new_refusals}  # refused just now
        self.relationships.update(relationship[n] for n, *_ in kept if n not in cycles)
        accepted = len(kept) - len(cycles)
        self.settle_step()
        self.outcomes["edge:written"] += written
        self.outcomes["edge:unchanged"] += accepted - written

    async def _supersedes(self, org: str, items: list[tuple[int, Any, str, str]]) -> int:
        """Write SUPERSEDES edges in line order, refusing each that would close a cycle with
        the org's stored ones and those accepted before it (the import writes as the operator:
        every memory counts); mark their targets superseded. Returns how many were new."""
        if not items:
            return 0
        conn = self.conn
        await entity_repo.lock_supersedes(conn, org_id=org)
        graph: dict[str, set[str]] = defaultdict(set)
        for s, d in await bulk.supersedes_edges(conn, org_id=org):
            graph[s].add(d)
        accepted: list[tuple[str, str, str]] = []
        for n, rec, s, d in items:
            if d in graph[s]:
                continue  # stored already (or stated twice): unchanged
            if _reaches(graph, d, s):
                self.refuse(n, write_rules.CYCLE, rec)
                continue
            graph[s].add(d)
            accepted.append((s, "SUPERSEDES", d))
        async with at_line(items[0][0]):
            async with bulk.checked_set_based(conn, self.set_based):
                _, created = await bulk.insert_edges(
                    conn, org_id=org, edges=accepted, returning=True
                )
            await entity_repo.mark_superseded_many(
                conn, org_id=org, ids=sorted({d for _, _, d in created})
            )
            await write_rules.retire_bulk_link_communities(
                conn, org_id=org, pairs=sorted({(s, d) for s, _, d in created})
            )
        return len(created)

    async def _mentions(self, items: Numbered) -> None:
        for org, recs in by_org(items).items():
            candidates = []
            for n, rec in recs:
                if rec.src == rec.dst:
                    self.refuse(n, SELF_MENTION, rec)
                else:
                    candidates.append((n, rec, rec.src, rec.dst))
            kept = await self._ends(org, "mention", candidates)
            self.settle_step()
            async with at_line(kept[0][0] if kept else 0):
                written = await writes.insert_mentions(
                    self.conn, org_id=org, pairs=[(s, d) for _, _, s, d in kept]
                )
                await write_rules.retire_bulk_link_communities(
                    self.conn, org_id=org, pairs=sorted(set(written))
                )
            self.outcomes["mention:written"] += len(written)
            self.outcomes["mention:unchanged"] += len(kept) - len(written)
            self.advance(len(recs))
