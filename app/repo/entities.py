"""Statements of the entity and edge routes (rule: one-write-path): read one memory through the read
rule, delete a memory, write and delete edges, keep SUPERSEDES acyclic.

Inserting a memory and its passages is :mod:`app.repo.writes` (shared with the importer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

GET_ENTITY_SQL = text(
    f"""/* sibyl:entity.get */
SELECT t.id, t.type, t.name, t.content, t.scope, t.project_id, t.owner_id, t.lifecycle,
       t.metadata, t.revision, t.passage_kind, t.passage_total, t.created_at, t.updated_at
FROM entities t
WHERE t.org_id = :r_org AND t.id = :id AND {readable("t")}"""
)

DELETE_ENTITY_SQL = text(
    """/* sibyl:entity.delete */
DELETE FROM entities WHERE org_id = :org_id AND id = :id RETURNING id"""
)

# The memory goes, the [[links]] to it stay in their sources' bodies: they wait again as pending
# links, and become mentions once more if a memory of that id is created (rule: pending-links).
# The sources are locked FOR KEY SHARE first: a source deleted at the same moment (its delete
# holds its row) is waited for and then left out, where it would fail the pending link's
# foreign key (two DELETEs at once, of a memory and of one linking to it; docs/decisions.md).
REPEND_LINKS_SQL = text(
    """/* sibyl:entity.delete_repend */
WITH sources AS (
    SELECT s.id FROM entities s
    WHERE s.org_id = :org_id AND s.id <> :id
      AND s.id IN (SELECT m.src_id FROM mentions m
                   WHERE m.org_id = :org_id AND m.dst_id = :id AND m.derived)
    ORDER BY s.id
    FOR KEY SHARE
)
INSERT INTO pending_links (org_id, src_id, dst_id)
SELECT :org_id, s.id, :id FROM sources s
ON CONFLICT DO NOTHING"""
)

ENTITY_CREATE_LOCK_SQL = text(
    """/* sibyl:entity.create_lock */
SELECT pg_advisory_xact_lock(hashtext(:org_id), hashtext('sibyl:entity:' || :id))"""
)

ID_TAKEN_SQL = text(
    """/* sibyl:entity.id_taken */
SELECT 1 FROM entities WHERE org_id = :org_id AND id = :id"""
)

INSERT_EDGE_SQL = text(
    """/* sibyl:edge.insert */
INSERT INTO edges (org_id, src_id, relationship, dst_id)
VALUES (:org_id, :src_id, :relationship, :dst_id)
ON CONFLICT DO NOTHING
RETURNING src_id"""
)

DELETE_EDGE_SQL = text(
    """/* sibyl:edge.delete */
DELETE FROM edges
WHERE org_id = :org_id AND src_id = :src_id AND relationship = :relationship AND dst_id = :dst_id
RETURNING src_id"""
)

SUPERSEDES_LOCK_SQL = text(
    """/* sibyl:edge.supersedes_lock */
SELECT pg_advisory_xact_lock(hashtext(:org_id), hashtext('sibyl:supersedes'))"""
)

# Would src -SUPERSEDES-> dst close a cycle? Only if src is reachable from dst already. UNION (not
# UNION ALL) drops ids already reached, so the walk ends even on a cycle an import let in.
SUPERSEDES_PATH_SQL = text(
    """/* sibyl:edge.supersedes_path */
WITH RECURSIVE reach(id) AS (
    SELECT CAST(:dst_id AS text) COLLATE "C"
  UNION
    SELECT e.dst_id
    FROM reach r
    JOIN edges e ON e.org_id = :org_id AND e.src_id = r.id AND e.relationship = 'SUPERSEDES'
)
SELECT EXISTS (SELECT 1 FROM reach WHERE id = :src_id)"""
)

# The same walk through the memories the writer can read only (rule: write-checks-hide-nothing; a
# write check never reveals a hidden memory): a SUPERSEDES path through a memory the writer cannot
# read is no path.
READABLE_SUPERSEDES_PATH_SQL = text(
    f"""/* sibyl:edge.supersedes_path_readable */
WITH RECURSIVE reach(id) AS (
    SELECT CAST(:dst_id AS text) COLLATE "C"
  UNION
    SELECT e.dst_id
    FROM reach r
    JOIN edges e ON e.org_id = :r_org AND e.src_id = r.id AND e.relationship = 'SUPERSEDES'
    JOIN entities t ON t.org_id = e.org_id AND t.id = e.dst_id
    WHERE {readable("t")}
)
SELECT EXISTS (SELECT 1 FROM reach WHERE id = :src_id)"""
)

MARKED_SQL = text(
    """/* sibyl:entity.marked_by_supersedes */
SELECT EXISTS (SELECT 1 FROM entities t
               WHERE t.org_id = :org_id AND t.id = :id AND t.lifecycle = 'superseded')
   AND EXISTS (SELECT 1 FROM edges e
               WHERE e.org_id = :org_id AND e.dst_id = :id AND e.relationship = 'SUPERSEDES')"""
)

MARK_SUPERSEDED_SQL = text(
    """/* sibyl:entity.mark_superseded */
UPDATE entities SET lifecycle = 'superseded', revision = revision + 1, updated_at = now()
WHERE org_id = :org_id AND id = :id AND lifecycle = 'active'
RETURNING revision"""
)


@dataclass(frozen=True)
class EntityRow:
    """One memory, every stored field a reader may see."""

    id: str
    type: str
    name: str
    content: str
    scope: str
    project_id: str | None
    owner_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    revision: int
    passage_kind: str | None
    passage_total: int
    created_at: datetime
    updated_at: datetime


async def get_entity(
    conn: AsyncConnection, *, reader_params: dict[str, object], entity_id: str
) -> EntityRow | None:
    """The memory ``entity_id`` if the reader can read it (the one read rule), else None."""
    row = (await conn.execute(GET_ENTITY_SQL, {**reader_params, "id": entity_id})).first()
    return EntityRow(**row._mapping) if row is not None else None


async def lock_new_id(conn: AsyncConnection, *, org_id: str, entity_id: str) -> bool:
    """Serialize creators of ``entity_id`` in ``org_id`` (transaction advisory lock) and
    return whether the id is already taken (by any memory of the org)."""
    await conn.execute(ENTITY_CREATE_LOCK_SQL, {"org_id": org_id, "id": entity_id})
    return (
        await conn.execute(ID_TAKEN_SQL, {"org_id": org_id, "id": entity_id})
    ).first() is not None


# The memories holding an explicit (imported) mention of a memory about to be deleted, with
# their bodies, locked FOR KEY SHARE like sibyl:entity.delete_repend's sources: an explicit
# mention takes over a derived one (derived = false), so whether the body links it too is read
# from the body itself (app.domain.entities.delete_entity).
EXPLICIT_SOURCES_SQL = text(
    """/* sibyl:entity.delete_explicit_sources */
SELECT s.id, s.content FROM entities s
WHERE s.org_id = :org_id AND s.id <> :id
  AND s.id IN (SELECT m.src_id FROM mentions m
               WHERE m.org_id = :org_id AND m.dst_id = :id AND NOT m.derived)
ORDER BY s.id
FOR KEY SHARE"""
)

PEND_SQL = text(
    """/* sibyl:entity.delete_pend */
INSERT INTO pending_links (org_id, src_id, dst_id)
SELECT :org_id, s, :id FROM unnest(CAST(:sources AS text[])) AS s
ON CONFLICT DO NOTHING"""
)


async def explicit_sources(
    conn: AsyncConnection, *, org_id: str, entity_id: str
) -> list[tuple[str, str]]:
    """(id, body) of the memories with an explicit mention of ``entity_id``, locked FOR KEY
    SHARE (:data:`EXPLICIT_SOURCES_SQL`)."""
    rows = await conn.execute(EXPLICIT_SOURCES_SQL, {"org_id": org_id, "id": entity_id})
    return [(r.id, r.content) for r in rows]


async def delete_entity(
    conn: AsyncConnection, *, org_id: str, entity_id: str, also_pending: Sequence[str] = ()
) -> bool:
    """Delete a memory; its passages, mentions, edges, grants and community memberships go with
    it (foreign keys ``ON DELETE CASCADE``), and the links to it derived from other memories'
    bodies turn back into pending links, as do those of ``also_pending`` (sources locked by
    :func:`explicit_sources` whose body links it under an explicit mention). True when a row
    was deleted."""
    await conn.execute(REPEND_LINKS_SQL, {"org_id": org_id, "id": entity_id})
    if also_pending:
        params = {"org_id": org_id, "id": entity_id, "sources": list(also_pending)}
        await conn.execute(PEND_SQL, params)
    result = await conn.execute(DELETE_ENTITY_SQL, {"org_id": org_id, "id": entity_id})
    return result.first() is not None


async def insert_edge(
    conn: AsyncConnection, *, org_id: str, src_id: str, relationship: str, dst_id: str
) -> bool:
    """Insert ``src -relationship-> dst``; False when it already existed (nothing written).

    ``ON CONFLICT DO NOTHING``: a concurrent identical insert waits for the first to commit, then
    writes nothing, so two writers of one edge leave exactly one row and no error.
    """
    result = await conn.execute(
        INSERT_EDGE_SQL,
        {"org_id": org_id, "src_id": src_id, "relationship": relationship, "dst_id": dst_id},
    )
    return result.first() is not None


async def delete_edge(
    conn: AsyncConnection, *, org_id: str, src_id: str, relationship: str, dst_id: str
) -> bool:
    """Delete one edge; False when there was none."""
    result = await conn.execute(
        DELETE_EDGE_SQL,
        {"org_id": org_id, "src_id": src_id, "relationship": relationship, "dst_id": dst_id},
    )
    return result.first() is not None


async def lock_supersedes(conn: AsyncConnection, *, org_id: str) -> None:
    """Serialize every SUPERSEDES writer of ``org_id`` until the transaction ends, so the cycle
    check and the insert that follows it see every other SUPERSEDES edge of the org."""
    await conn.execute(SUPERSEDES_LOCK_SQL, {"org_id": org_id})


async def supersedes_path(conn: AsyncConnection, *, org_id: str, src_id: str, dst_id: str) -> bool:
    """True when ``dst`` already reaches ``src`` through SUPERSEDES edges (so ``src
    -SUPERSEDES-> dst`` would close a cycle). Reads every edge of the org, readable or not:
    the import's check (it writes as the operator); REST and MCP use
    :func:`readable_supersedes_path`."""
    result = await conn.execute(
        SUPERSEDES_PATH_SQL, {"org_id": org_id, "src_id": src_id, "dst_id": dst_id}
    )
    return bool(result.scalar())


async def readable_supersedes_path(
    conn: AsyncConnection, *, reader_params: dict[str, object], src_id: str, dst_id: str
) -> bool:
    """True when ``dst`` reaches ``src`` through SUPERSEDES edges whose every memory the reader
    (``reader_params``) can read; a path through a hidden memory does not count."""
    result = await conn.execute(
        READABLE_SUPERSEDES_PATH_SQL, {**reader_params, "src_id": src_id, "dst_id": dst_id}
    )
    return bool(result.scalar())


async def mark_superseded(conn: AsyncConnection, *, org_id: str, entity_id: str) -> int | None:
    """Set an ``active`` memory's lifecycle to ``superseded`` (revision + 1); return the new
    revision, or None when it was not active (superseded or retired: left as it is)."""
    return (await conn.execute(MARK_SUPERSEDED_SQL, {"org_id": org_id, "id": entity_id})).scalar()


async def marked_by_supersedes(conn: AsyncConnection, *, org_id: str, entity_id: str) -> bool:
    """True when ``entity_id`` is superseded and the target of a SUPERSEDES edge."""
    return bool((await conn.execute(MARKED_SQL, {"org_id": org_id, "id": entity_id})).scalar())


# Bulk form of the cycle check (the import): would any of the new SUPERSEDES edges (already
# inserted) lie on a cycle? Only if its target reaches its source.
MARK_SUPERSEDED_MANY_SQL = text(
    """/* sibyl:entity.mark_superseded_many */
UPDATE entities SET lifecycle = 'superseded', revision = revision + 1, updated_at = now()
WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[])) AND lifecycle = 'active'
RETURNING id"""
)

RESTAMP_MANY_SQL = text(
    """/* sibyl:entity.restamp_many */
UPDATE passages p SET parent_revision = e.revision
FROM entities e
WHERE p.org_id = :org_id AND p.parent_id = ANY(CAST(:ids AS text[]))
  AND e.org_id = p.org_id AND e.id = p.parent_id"""
)


async def mark_superseded_many(conn: AsyncConnection, *, org_id: str, ids: list[str]) -> list[str]:
    """:func:`mark_superseded` for many memories, their spans restamped; return those marked."""
    if not ids:
        return []
    marked = [
        r.id for r in await conn.execute(MARK_SUPERSEDED_MANY_SQL, {"org_id": org_id, "ids": ids})
    ]
    if marked:
        await conn.execute(RESTAMP_MANY_SQL, {"org_id": org_id, "ids": marked})
    return marked
