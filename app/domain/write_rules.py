"""The write rules (rules: one-write-path, pending-links): one place, applied by REST, MCP and
import.

Every door that writes a memory or an edge calls these functions, so a rule holds whichever way
a row came in (``tests/test_write_rules.py`` runs each rule through REST, MCP and the import):

- **reserved types**: ``passage`` is the type of the spans the service cuts; no memory may take
  it, and no memory id may start with ``passage_`` (:func:`memory_type`, :func:`memory_id`);
- **scope and project agree**: an ``org`` memory has no project, a ``project`` memory has one
  (:func:`check_scope`);
- **SUPERSEDES stays acyclic**: an edge that would close a cycle is refused with 409. The check
  walks only the memories the writer can read (a cycle through a memory hidden from the writer
  is allowed, so the answer never reveals it); the import, which has no reader (it writes as the
  operator), walks every memory of the org (:func:`write_edge`);
- **the superseded mark**: writing ``A SUPERSEDES B`` marks ``B`` superseded when it is active
  (a retired memory stays retired), restamping its spans with the new revision;
- **passages cut** and **links derived**: :func:`app.domain.memories.save_entity` (the one
  memory write), which also keeps links to missing targets as pending links and resolves the
  pending links to a memory when it is created;
- **communities retired**: a write that changes a member's scope, project or lifecycle, or the
  links between memories (an edge or a derived mention written or deleted), deletes the
  communities that hold any memory it touched, in the same transaction
  (:func:`retire_communities`; for links, only a link whose two ends lie in one audience, the
  links detection uses: :func:`retire_link_communities`, so a write a reader cannot see retires
  nothing it sees); they give no ``SHARES_COMMUNITY`` hop until a rebuild recomputes them. The
  write records its org as due (``community_retirements``), and a serving process rebuilds due
  orgs every ``SIBYL_COMMUNITIES_REFRESH_S`` seconds (:mod:`app.service.workers.communities`);
  detection reads a whole org (Louvain over every link), too much to run inside each write;
- **word statistics retired**: a write that changes or removes a row the search statistics count
  (the text, scope or project of a project- or org-scoped memory, or the memory itself) marks its
  audience's counts not fresh, in the same transaction (:func:`retire_term_stats`); its readers'
  searches weigh words by the fallback until ``sibyl-pg stats refresh`` recounts
  (:mod:`app.domain.terms`). A new memory is counted from the next refresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest, Conflict
from app.domain.validation import path_id_problem
from app.repo import communities as community_repo
from app.repo import entities as entity_repo
from app.repo import term_stats
from app.repo import writes as write_repo

TYPE_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
RESERVED_TYPES = frozenset({"passage"})
RESERVED_TYPE = "type 'passage' is reserved for the spans the service cuts"
RESERVED_ID = "ids starting with 'passage_' are reserved for passages"
ID_TAKEN = "This id is already taken in the org; choose another or omit it"
CYCLE = "This SUPERSEDES edge would close a cycle"
SELF_EDGE = "an edge may not point at its own source"


def memory_type(value: str) -> str:
    """The stored (lower-cased) type of a memory; ``BadRequest`` outside
    ``[a-z][a-z0-9_]{0,63}`` or for a reserved type (``passage``)."""
    lowered = value.strip().lower()
    if not TYPE_RE.fullmatch(lowered):
        raise BadRequest("type must be a lower-case word matching [a-z][a-z0-9_]{0,63}")
    if lowered in RESERVED_TYPES:
        raise BadRequest(RESERVED_TYPE)
    return lowered


def memory_id(value: str, *, field: str = "id") -> str:
    """A memory id as stored; ``BadRequest`` outside ``[A-Za-z0-9_.:-]{1,128}``, ``.`` or ``..``
    (no URL path names them), or with the reserved ``passage_`` prefix."""
    stripped = value.strip()
    problem = path_id_problem(stripped)
    if problem is not None:
        raise BadRequest(f"{field} {problem}")
    if stripped.startswith("passage_"):
        raise BadRequest(RESERVED_ID)
    return stripped


def check_scope(scope: str, project_id: str | None) -> None:
    """``BadRequest`` unless ``scope`` and ``project_id`` agree (org: none; project: one)."""
    if scope == "org" and project_id is not None:
        raise BadRequest("an org-scoped memory has no project")
    if scope == "project" and project_id is None:
        raise BadRequest("a project-scoped memory needs a project")


async def retire_communities(conn: AsyncConnection, *, org_id: str, ids: Sequence[str]) -> None:
    """Delete the communities of ``org_id`` holding any of ``ids`` (same transaction as the
    write that made them stale)."""
    if ids:
        await community_repo.retire(conn, org_id=org_id, entity_ids=list(dict.fromkeys(ids)))


async def retire_link_communities(
    conn: AsyncConnection, *, org_id: str, pairs: Sequence[tuple[str, str]]
) -> None:
    """Delete the communities of ``org_id`` that a written or removed link of ``pairs``
    (source, target) may have formed: only a link whose two ends lie in one audience takes part
    in detection, so a link with a private, retired or other-audience end retires nothing
    (same transaction as the write)."""
    if pairs:
        await community_repo.retire_links(conn, org_id=org_id, pairs=list(dict.fromkeys(pairs)))


async def retire_bulk_link_communities(
    conn: AsyncConnection, *, org_id: str, pairs: Sequence[tuple[str, str]]
) -> None:
    """:func:`retire_link_communities` for a bulk write's new links, skipped (its join is not
    free) when the org has no community yet: then the org is only recorded as due a rebuild
    (:func:`app.repo.communities.mark`), so a freshly imported org gets its communities from a
    serving process (:mod:`app.service.workers.communities`)."""
    if not pairs:
        return
    if await community_repo.has_communities(conn, org_id=org_id):
        await retire_link_communities(conn, org_id=org_id, pairs=pairs)
    else:
        await community_repo.mark(conn, org_id=org_id)


async def retire_moved_communities(
    conn: AsyncConnection,
    *,
    org_id: str,
    entity_id: str,
    placements: Sequence[tuple[str, str | None, str]],
) -> None:
    """A memory moved from the first (scope, project, lifecycle) of ``placements`` to the
    second: delete its own communities and those of the memories it links to (either way) in
    its old and its new audience, since its links left the one and joined the other (same
    transaction as the write)."""
    await retire_communities(conn, org_id=org_id, ids=[entity_id])
    for scope, project_id, lifecycle in placements:
        await community_repo.retire_neighbours(
            conn,
            org_id=org_id,
            entity_id=entity_id,
            scope=scope,
            project_id=project_id,
            lifecycle=lifecycle,
        )


async def retire_term_stats(
    conn: AsyncConnection,
    *,
    org_id: str,
    entity_id: str,
    scope: str,
    project_id: str | None,
    moved_in: bool = False,
) -> None:
    """Mark not fresh the word statistics of the audience the memory ``entity_id`` of ``scope``
    and ``project_id`` may have been counted in (none for a private memory), in the transaction
    of the write that changes or removes it (before a delete: the row is read): an audience
    whose count was taken before the memory was created keeps its counts. ``moved_in``: the
    memory moves into that audience (its new scope or project), whose count does not hold it
    (it was elsewhere, or private): retired by the same rule, and given a row, not fresh, when
    it has none yet (an adversarial review: a move retired only the audience it left)."""
    await term_stats.retire(
        conn,
        org_id=org_id,
        audiences=term_stats.audiences_of(scope, project_id),
        entity_id=entity_id,
        moved_in=moved_in,
    )


@dataclass(frozen=True)
class EdgeResult:
    """What :func:`write_edge` did: ``created`` (False: the edge existed) and the memory it
    marked superseded (None: none)."""

    created: bool
    superseded: str | None


async def write_edge(
    conn: AsyncConnection,
    *,
    org_id: str,
    src: str,
    relationship: str,
    dst: str,
    reader_params: dict[str, object] | None,
) -> EdgeResult:
    """Write ``src -relationship-> dst`` once, under every rule (both ends exist; the caller
    checked who may write it).

    ``reader_params`` (:meth:`Reader.params`) bounds the SUPERSEDES cycle check to what the
    writer can read; None (the import) walks every memory. Raises ``BadRequest`` (self-edge) and
    ``Conflict`` (a SUPERSEDES cycle). Takes the org's SUPERSEDES lock for a SUPERSEDES edge (the
    REST caller takes it before its row locks, the import here).
    """
    if src == dst:
        raise BadRequest(SELF_EDGE)
    if relationship == "SUPERSEDES":
        await entity_repo.lock_supersedes(conn, org_id=org_id)
        if reader_params is None:
            cycle = await entity_repo.supersedes_path(conn, org_id=org_id, src_id=src, dst_id=dst)
        else:
            cycle = await entity_repo.readable_supersedes_path(
                conn, reader_params=reader_params, src_id=src, dst_id=dst
            )
        if cycle:
            raise Conflict(CYCLE)
    created = await entity_repo.insert_edge(
        conn, org_id=org_id, src_id=src, relationship=relationship, dst_id=dst
    )
    superseded = None
    if created:
        await retire_link_communities(conn, org_id=org_id, pairs=[(src, dst)])
        if relationship == "SUPERSEDES":
            revision = await entity_repo.mark_superseded(conn, org_id=org_id, entity_id=dst)
            if revision is not None:
                await write_repo.restamp_passages(
                    conn, org_id=org_id, parent_id=dst, revision=revision
                )
                superseded = dst
    return EdgeResult(created=created, superseded=superseded)


async def keeps_superseded_mark(conn: AsyncConnection, *, org_id: str, entity_id: str) -> bool:
    """True when ``entity_id`` is stored superseded and a SUPERSEDES edge points at it: an
    import line stating it ``active`` keeps the mark that edge set (the import is declarative,
    so a repeated import changes nothing). REST and MCP never call this: there, setting
    ``lifecycle`` is an explicit write that wins."""
    return await entity_repo.marked_by_supersedes(conn, org_id=org_id, entity_id=entity_id)


async def delete_edge(
    conn: AsyncConnection, *, org_id: str, src: str, relationship: str, dst: str
) -> bool:
    """Delete one edge (no lifecycle changes), retiring the communities of its ends; False when
    there was none."""
    deleted = await entity_repo.delete_edge(
        conn, org_id=org_id, src_id=src, relationship=relationship, dst_id=dst
    )
    if deleted:
        await retire_link_communities(conn, org_id=org_id, pairs=[(src, dst)])
    return deleted


@dataclass
class Unsettled:
    """What a write transaction left to settle once committed (see :func:`settling`): per org,
    the memories it created and the sources it stored pending links for."""

    created: dict[str, set[str]] = field(default_factory=dict)
    sources: dict[str, set[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.created or self.sources)


_UNSETTLED: ContextVar[Unsettled | None] = ContextVar("sibyl_unsettled", default=None)


@contextmanager
def settling() -> Iterator[Unsettled]:
    """Collect, for the block, the links a write leaves to settle after its commit."""
    unsettled = Unsettled()
    token = _UNSETTLED.set(unsettled)
    try:
        yield unsettled
    finally:
        _UNSETTLED.reset(token)


def note_created(org_id: str, ids: Sequence[str]) -> None:
    """Record memories created by the running write (nothing outside :func:`settling`)."""
    unsettled = _UNSETTLED.get()
    if unsettled is not None and ids:
        unsettled.created.setdefault(org_id, set()).update(ids)


def note_pending(org_id: str, src_ids: Sequence[str]) -> None:
    """Record sources for which the running write stored pending links."""
    unsettled = _UNSETTLED.get()
    if unsettled is not None and src_ids:
        unsettled.sources.setdefault(org_id, set()).update(src_ids)


async def settle(
    conn: AsyncConnection, unsettled: Unsettled, *, reader_params: dict[str, object] | None
) -> int:
    """After the write committed, in a transaction of its own: resolve the pending links to
    the memories it created, and the pending links it stored whose target exists now.

    This closes the one race of pending links: a link written while its target is being created
    by a concurrent transaction (each transaction sees the other's rows only once committed;
    each settles after its own commit, so the later one of the two always sees both). Returns
    the mentions written; retires the communities they touch.
    """
    written: list[str] = []
    for org_id, ids in sorted(unsettled.created.items()):
        gained = await write_repo.resolve_pending_many(conn, org_id=org_id, ids=sorted(ids))
        await retire_link_communities(conn, org_id=org_id, pairs=gained)
        written += [s for s, _ in gained]
    for org_id, ids in sorted(unsettled.sources.items()):
        params = reader_params if reader_params is not None else None
        pairs = await write_repo.settle_sources(
            conn, org_id=org_id, ids=sorted(ids), reader_params=params
        )
        await retire_link_communities(conn, org_id=org_id, pairs=pairs)
        written += [s for s, _ in pairs]
    return len(written)
