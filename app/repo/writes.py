"""Write statements: orgs, users, projects, members, grants, entities with their passages,
edges and mentions. Each is idempotent by id (an identical repeated write changes nothing)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

LOCK_ENTITY_SQL = text(
    """/* sibyl:write.entity_lock */
SELECT type, name, content, project_id, scope, owner_id, lifecycle, metadata, revision,
       passage_kind
FROM entities WHERE org_id = :org_id AND id = :id
FOR NO KEY UPDATE"""
)

INSERT_ENTITY_SQL = text(
    """/* sibyl:write.entity_insert */
INSERT INTO entities (org_id, id, type, name, content, project_id, scope, owner_id, lifecycle,
                      metadata, revision)
VALUES (:org_id, :id, :type, :name, :content, :project_id, :scope, :owner_id, :lifecycle,
        CAST(:metadata AS jsonb), 1)
ON CONFLICT (org_id, id) DO NOTHING
RETURNING id"""
)

UPDATE_ENTITY_SQL = text(
    """/* sibyl:write.entity_update */
UPDATE entities SET type = :type, name = :name, content = :content, project_id = :project_id,
       scope = :scope, owner_id = :owner_id, lifecycle = :lifecycle,
       metadata = CAST(:metadata AS jsonb), revision = :revision, updated_at = now()
WHERE org_id = :org_id AND id = :id"""
)

SET_CUT_SQL = text(
    """/* sibyl:write.entity_cut */
UPDATE entities SET passage_kind = :kind, passage_total = :total, passages_lossless = :lossless
WHERE org_id = :org_id AND id = :id"""
)

DELETE_PASSAGES_SQL = text(
    """/* sibyl:write.passages_delete */
DELETE FROM passages WHERE org_id = :org_id AND parent_id = :parent_id"""
)

INSERT_PASSAGE_SQL = text(
    """/* sibyl:write.passage_insert */
INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index, start_offset,
                      end_offset, breadcrumb, content)
VALUES (:org_id, :id, :parent_id, :parent_revision, :passage_index, :start_offset, :end_offset,
        :breadcrumb, :content)"""
)

INSERT_EDGE_SQL = text(
    """/* sibyl:write.edge */
INSERT INTO edges (org_id, src_id, relationship, dst_id)
VALUES (:org_id, :src_id, :relationship, :dst_id)
ON CONFLICT DO NOTHING
RETURNING src_id"""
)

INSERT_MENTION_SQL = text(
    """/* sibyl:write.mention */
INSERT INTO mentions (org_id, src_id, dst_id, derived)
VALUES (:org_id, :src_id, :dst_id, :derived)
ON CONFLICT (org_id, src_id, dst_id) DO UPDATE SET derived = false
WHERE mentions.derived AND NOT EXCLUDED.derived
RETURNING src_id"""
)

DELETE_DERIVED_MENTIONS_SQL = text(
    """/* sibyl:write.mentions_underive */
DELETE FROM mentions WHERE org_id = :org_id AND src_id = :src_id AND derived
RETURNING dst_id"""
)

DELETE_PENDING_SQL = text(
    """/* sibyl:write.pending_delete */
DELETE FROM pending_links WHERE org_id = :org_id AND src_id = :src_id"""
)

INSERT_PENDING_SQL = text(
    """/* sibyl:write.pending_insert */
INSERT INTO pending_links (org_id, src_id, dst_id)
SELECT :org_id, :src_id, d FROM unnest(CAST(:dst_ids AS text[])) AS d
ON CONFLICT DO NOTHING"""
)

# A memory was created: every link waiting for it becomes a derived mention (rule: pending-links).
RESOLVE_PENDING_SQL = text(
    """/* sibyl:write.pending_resolve */
WITH resolved AS (
    DELETE FROM pending_links WHERE org_id = :org_id AND dst_id = :id RETURNING src_id
)
INSERT INTO mentions (org_id, src_id, dst_id, derived)
SELECT :org_id, r.src_id, :id, true FROM resolved r WHERE r.src_id <> :id
ON CONFLICT (org_id, src_id, dst_id) DO NOTHING
RETURNING src_id"""
)

DERIVED_STATE_SQL = text(
    """/* sibyl:write.derived_state */
SELECT dst_id, true AS mention FROM mentions
WHERE org_id = :org_id AND src_id = :src_id AND derived
UNION ALL
SELECT dst_id, false AS mention FROM pending_links WHERE org_id = :org_id AND src_id = :src_id"""
)

PENDING_COUNT_SQL = text(
    """/* sibyl:write.pending_count */
SELECT count(*) FROM pending_links WHERE org_id = ANY(CAST(:org_ids AS text[]))"""
)

EXISTING_IDS_SQL = text(
    """/* sibyl:write.existing_ids */
SELECT id FROM entities WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[]))"""
)

# The same, each row found locked FOR KEY SHARE until the transaction ends: a row about to be
# referenced (a mention, an edge) cannot be deleted under the writer, and one a concurrent
# delete holds is waited for, then not found.
REFERENCED_IDS_SQL = text(
    """/* sibyl:write.referenced_ids */
SELECT id FROM entities WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[]))
ORDER BY id
FOR KEY SHARE"""
)


@dataclass(frozen=True)
class StoredEntity:
    """The stored state of an entity, locked for update."""

    type: str
    name: str
    content: str
    project_id: str | None
    scope: str
    owner_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    revision: int
    passage_kind: str | None


@dataclass(frozen=True)
class PassageRow:
    """One span to store."""

    id: str
    passage_index: int
    start_offset: int
    end_offset: int
    breadcrumb: str | None
    content: str


async def lock_entity(conn: AsyncConnection, *, org_id: str, entity_id: str) -> StoredEntity | None:
    """The stored entity, row-locked until the transaction ends, or None.

    ``FOR NO KEY UPDATE``: concurrent edits wait, but edges and mentions pointing at the row may
    still be written (their foreign-key checks take ``KEY SHARE``), so an edit and a link never
    deadlock each other."""
    row = (await conn.execute(LOCK_ENTITY_SQL, {"org_id": org_id, "id": entity_id})).first()
    return StoredEntity(**row._mapping) if row is not None else None


async def insert_entity(conn: AsyncConnection, *, org_id: str, fields: dict[str, Any]) -> bool:
    """Insert a new entity at revision 1 (``fields``: id, type, name, content, project_id,
    scope, owner_id, lifecycle, metadata); False when a concurrent writer (an import, which
    takes no per-id lock) committed that id first: nothing was written."""
    rows = await conn.execute(
        INSERT_ENTITY_SQL, {**fields, "org_id": org_id, "metadata": json.dumps(fields["metadata"])}
    )
    return rows.first() is not None


async def update_entity(
    conn: AsyncConnection, *, org_id: str, fields: dict[str, Any], revision: int
) -> None:
    """Overwrite an entity's fields and set its revision."""
    await conn.execute(
        UPDATE_ENTITY_SQL,
        {
            **fields,
            "org_id": org_id,
            "metadata": json.dumps(fields["metadata"]),
            "revision": revision,
        },
    )


async def replace_passages(
    conn: AsyncConnection,
    *,
    org_id: str,
    parent_id: str,
    revision: int,
    kind: str | None,
    lossless: bool,
    passages: Sequence[PassageRow],
) -> None:
    """Replace every span of ``parent_id`` by ``passages`` (same transaction as the edit)."""
    await conn.execute(DELETE_PASSAGES_SQL, {"org_id": org_id, "parent_id": parent_id})
    if passages:
        await conn.execute(
            INSERT_PASSAGE_SQL,
            [
                {
                    "org_id": org_id,
                    "parent_id": parent_id,
                    "parent_revision": revision,
                    "id": p.id,
                    "passage_index": p.passage_index,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "breadcrumb": p.breadcrumb,
                    "content": p.content,
                }
                for p in passages
            ],
        )
    await conn.execute(
        SET_CUT_SQL,
        {
            "org_id": org_id,
            "id": parent_id,
            "kind": kind,
            "total": len(passages),
            "lossless": lossless,
        },
    )


async def existing_ids(conn: AsyncConnection, *, org_id: str, ids: Sequence[str]) -> set[str]:
    """The subset of ``ids`` that are entities of ``org_id``."""
    if not ids:
        return set()
    rows = await conn.execute(EXISTING_IDS_SQL, {"org_id": org_id, "ids": list(ids)})
    return {r.id for r in rows}


async def referenced_ids(conn: AsyncConnection, *, org_id: str, ids: Sequence[str]) -> set[str]:
    """The subset of ``ids`` that are entities of ``org_id``, each locked ``FOR KEY SHARE``
    until the transaction ends: call it before writing rows that reference them (a mention,
    an edge), so a delete racing the write either waits for it (and then re-pends its links)
    or, committed first, leaves the id out (a link then stays pending). Checked with
    :func:`existing_ids` instead, a target deleted in between would fail the insert's foreign
    key with a 500 (rule: one-error-shape; tests/test_write_concurrency.py)."""
    if not ids:
        return set()
    rows = await conn.execute(REFERENCED_IDS_SQL, {"org_id": org_id, "ids": list(ids)})
    return {r.id for r in rows}


async def rederive_mentions(
    conn: AsyncConnection,
    *,
    org_id: str,
    src_id: str,
    dst_ids: Sequence[str],
    pending_ids: Sequence[str] = (),
) -> set[str]:
    """Replace the mentions derived from ``src_id``'s links by ``src_id → dst_ids`` and its
    pending links by ``src_id → pending_ids``; return the targets of the mentions removed."""
    old = await conn.execute(DELETE_DERIVED_MENTIONS_SQL, {"org_id": org_id, "src_id": src_id})
    removed = {r.dst_id for r in old}
    await conn.execute(DELETE_PENDING_SQL, {"org_id": org_id, "src_id": src_id})
    if dst_ids:
        await conn.execute(
            INSERT_MENTION_SQL,
            [{"org_id": org_id, "src_id": src_id, "dst_id": d, "derived": True} for d in dst_ids],
        )
    if pending_ids:
        await conn.execute(
            INSERT_PENDING_SQL,
            {"org_id": org_id, "src_id": src_id, "dst_ids": list(pending_ids)},
        )
    return removed


async def resolve_pending(conn: AsyncConnection, *, org_id: str, entity_id: str) -> list[str]:
    """Turn every pending link to the new memory ``entity_id`` into a derived mention; return
    the sources that gained one."""
    rows = await conn.execute(RESOLVE_PENDING_SQL, {"org_id": org_id, "id": entity_id})
    return [r.src_id for r in rows]


async def derived_state(
    conn: AsyncConnection, *, org_id: str, src_id: str
) -> tuple[set[str], set[str]]:
    """(targets of ``src_id``'s derived mentions, targets of its pending links)."""
    rows = await conn.execute(DERIVED_STATE_SQL, {"org_id": org_id, "src_id": src_id})
    mentions: set[str] = set()
    pending: set[str] = set()
    for r in rows:
        (mentions if r.mention else pending).add(r.dst_id)
    return mentions, pending


async def pending_count(conn: AsyncConnection, *, org_ids: Sequence[str]) -> int:
    """How many links of the orgs ``org_ids`` still wait for their target."""
    if not org_ids:
        return 0
    return int((await conn.execute(PENDING_COUNT_SQL, {"org_ids": list(org_ids)})).scalar() or 0)


STORED_CUT_SQL = text(
    """/* sibyl:write.stored_cut */
SELECT start_offset, end_offset, breadcrumb FROM passages
WHERE org_id = :org_id AND parent_id = :parent_id ORDER BY passage_index"""
)


async def stored_cut(
    conn: AsyncConnection, *, org_id: str, parent_id: str
) -> list[tuple[int, int, str | None]]:
    """The (start, end, breadcrumb) of each stored span of ``parent_id``, in order."""
    rows = await conn.execute(STORED_CUT_SQL, {"org_id": org_id, "parent_id": parent_id})
    return [(r.start_offset, r.end_offset, r.breadcrumb) for r in rows]


RESTAMP_PASSAGES_SQL = text(
    """/* sibyl:write.passages_restamp */
UPDATE passages SET parent_revision = :revision
WHERE org_id = :org_id AND parent_id = :parent_id"""
)


async def restamp_passages(
    conn: AsyncConnection, *, org_id: str, parent_id: str, revision: int
) -> None:
    """Move the unchanged spans of ``parent_id`` to ``revision`` (ids and text kept): an edit
    that did not touch the body bumps the revision without re-cutting."""
    await conn.execute(
        RESTAMP_PASSAGES_SQL, {"org_id": org_id, "parent_id": parent_id, "revision": revision}
    )


# ---- set-based statements of the bulk import (the same rows the one-at-a-time path writes) ----

RESOLVE_PENDING_MANY_SQL = text(
    """/* sibyl:import.pending_resolve */
WITH resolved AS (
    DELETE FROM pending_links
    WHERE org_id = :org_id AND dst_id = ANY(CAST(:ids AS text[]))
    RETURNING src_id, dst_id
)
INSERT INTO mentions (org_id, src_id, dst_id, derived)
SELECT :org_id, r.src_id, r.dst_id, true FROM resolved r WHERE r.src_id <> r.dst_id
ON CONFLICT (org_id, src_id, dst_id) DO NOTHING
RETURNING src_id, dst_id"""
)

# Links of new memories: a mention where the target exists, a pending link where it does not.
DERIVE_LINKS_SQL = text(
    """/* sibyl:import.links */
WITH found AS (  -- the targets that exist, locked FOR KEY SHARE (see sibyl:write.referenced_ids)
    SELECT e.id FROM entities e
    WHERE e.org_id = :org_id AND e.id = ANY(CAST(:dsts AS text[]))
    ORDER BY e.id
    FOR KEY SHARE
), l AS (
    SELECT l.src_id, l.dst_id, l.dst_id IN (SELECT id FROM found) AS found
    FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS l(src_id, dst_id)
), mentioned AS (
    INSERT INTO mentions (org_id, src_id, dst_id, derived)
    SELECT :org_id, l.src_id, l.dst_id, true FROM l WHERE l.found
    ON CONFLICT (org_id, src_id, dst_id) DO NOTHING
)
INSERT INTO pending_links (org_id, src_id, dst_id)
SELECT :org_id, l.src_id, l.dst_id FROM l WHERE NOT l.found
ON CONFLICT DO NOTHING"""
)

INSERT_MENTIONS_SQL = text(
    """/* sibyl:import.mentions */
INSERT INTO mentions (org_id, src_id, dst_id, derived)
SELECT DISTINCT :org_id, x.src_id, x.dst_id, false
FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS x(src_id, dst_id)
ON CONFLICT (org_id, src_id, dst_id) DO UPDATE SET derived = false
WHERE mentions.derived
RETURNING src_id, dst_id"""
)


T = TypeVar("T")
# Rows per statement of the bulk import's links: each statement stays well under a second even
# on a busy server (a service engine's statement timeout applies to the import too).
LINK_ROWS = 5_000


TEXT_CHARS = 250_000  # characters of text a statement indexes at most (full-text work)


def parts(
    rows: Sequence[T], size: int, weight: Callable[[T], int] | None = None
) -> Iterator[Sequence[T]]:
    """``rows`` in consecutive slices of at most ``size`` rows and, with ``weight``, at most
    :data:`TEXT_CHARS` of total weight (a single heavier row goes alone)."""
    start = 0
    while start < len(rows):
        end, total = start, 0
        while end < len(rows) and end - start < size:
            total += weight(rows[end]) if weight is not None else 0
            if end > start and total > TEXT_CHARS:
                break
            end += 1
        yield rows[start:end]
        start = end


async def resolve_pending_many(
    conn: AsyncConnection, *, org_id: str, ids: Sequence[str]
) -> list[tuple[str, str]]:
    """:func:`resolve_pending` for many new memories at once; the mentions written, as
    (source, target) pairs."""
    gained: list[tuple[str, str]] = []
    for part in parts(ids, LINK_ROWS):
        rows = await conn.execute(RESOLVE_PENDING_MANY_SQL, {"org_id": org_id, "ids": list(part)})
        gained += [(r.src_id, r.dst_id) for r in rows]
    return gained


async def derive_links(
    conn: AsyncConnection, *, org_id: str, pairs: Sequence[tuple[str, str]]
) -> None:
    """Store the ``[[dst]]`` links of new memories ``(src, dst)``: mentions where ``dst``
    exists, pending links otherwise."""
    for part in parts(pairs, LINK_ROWS):
        await conn.execute(
            DERIVE_LINKS_SQL,
            {"org_id": org_id, "srcs": [s for s, _ in part], "dsts": [d for _, d in part]},
        )


async def insert_mentions(
    conn: AsyncConnection, *, org_id: str, pairs: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Insert explicit mentions (a derived one becomes explicit); return those written."""
    written: list[tuple[str, str]] = []
    for part in parts(pairs, LINK_ROWS):
        rows = await conn.execute(
            INSERT_MENTIONS_SQL,
            {"org_id": org_id, "srcs": [s for s, _ in part], "dsts": [d for _, d in part]},
        )
        written += [(r.src_id, r.dst_id) for r in rows]
    return written


UPSERT_MEMBERS_SQL = text(
    """/* sibyl:import.members */
INSERT INTO project_members (org_id, project_id, user_id, role)
SELECT p.org_id, p.id, u.id, x.role
FROM unnest(CAST(:projects AS text[]), CAST(:users AS text[]), CAST(:roles AS text[]))
     AS x(project_id, user_id, role)
JOIN users u ON u.id = x.user_id
JOIN projects p ON p.org_id = u.org_id AND p.id = x.project_id
ON CONFLICT (org_id, project_id, user_id) DO UPDATE SET role = EXCLUDED.role
WHERE project_members.role IS DISTINCT FROM EXCLUDED.role
RETURNING user_id"""
)


async def upsert_members(conn: AsyncConnection, *, members: Sequence[tuple[str, str, str]]) -> int:
    """Write ``(project, user, role)`` memberships (pairs distinct); return how many changed."""
    if not members:
        return 0
    rows = await conn.execute(
        UPSERT_MEMBERS_SQL,
        {
            "projects": [m[0] for m in members],
            "users": [m[1] for m in members],
            "roles": [m[2] for m in members],
        },
    )
    return len(rows.all())


# After a write commits: the pending links of these sources whose target exists now (created by
# a transaction that committed meanwhile). The import's form (no reader) and the writer's form
# (only targets the writer can read, the may_link rule of the write itself).
SETTLE_SOURCES_SQL = text(
    """/* sibyl:write.pending_settle */
WITH resolved AS (
    DELETE FROM pending_links p
    USING entities t
    WHERE p.org_id = :org_id AND p.src_id = ANY(CAST(:ids AS text[]))
      AND t.org_id = p.org_id AND t.id = p.dst_id
    RETURNING p.src_id, p.dst_id
)
INSERT INTO mentions (org_id, src_id, dst_id, derived)
SELECT :org_id, r.src_id, r.dst_id, true FROM resolved r WHERE r.src_id <> r.dst_id
ON CONFLICT (org_id, src_id, dst_id) DO NOTHING
RETURNING src_id, dst_id"""
)

SETTLE_SOURCES_READABLE_SQL = text(
    f"""/* sibyl:write.pending_settle_readable */
WITH resolved AS (
    DELETE FROM pending_links p
    USING entities t
    WHERE p.org_id = :r_org AND p.src_id = ANY(CAST(:ids AS text[]))
      AND t.org_id = p.org_id AND t.id = p.dst_id AND {readable("t")}
    RETURNING p.src_id, p.dst_id
)
INSERT INTO mentions (org_id, src_id, dst_id, derived)
SELECT :r_org, r.src_id, r.dst_id, true FROM resolved r WHERE r.src_id <> r.dst_id
ON CONFLICT (org_id, src_id, dst_id) DO NOTHING
RETURNING src_id, dst_id"""
)


async def settle_sources(
    conn: AsyncConnection,
    *,
    org_id: str,
    ids: Sequence[str],
    reader_params: dict[str, object] | None,
) -> list[tuple[str, str]]:
    """Resolve the pending links of sources ``ids`` whose target exists (and, with
    ``reader_params``, is readable by that writer); return the mentions written."""
    out: list[tuple[str, str]] = []
    for part in parts(ids, LINK_ROWS):
        if reader_params is None:
            rows = await conn.execute(SETTLE_SOURCES_SQL, {"org_id": org_id, "ids": list(part)})
        else:
            rows = await conn.execute(
                SETTLE_SOURCES_READABLE_SQL, {**reader_params, "ids": list(part)}
            )
        out += [(r.src_id, r.dst_id) for r in rows]
    return out


STORED_STATES_SQL = text(
    """/* sibyl:import.stored_states */
SELECT e.id, e.type, e.name, e.content, e.project_id, e.scope, e.owner_id, e.lifecycle,
       e.metadata,
       (e.lifecycle = 'superseded'
        AND EXISTS (SELECT 1 FROM edges x
                    WHERE x.org_id = e.org_id AND x.dst_id = e.id
                      AND x.relationship = 'SUPERSEDES')) AS marked
FROM entities e
WHERE e.org_id = :org_id AND e.id = ANY(CAST(:ids AS text[]))"""
)

DERIVED_STATES_SQL = text(
    """/* sibyl:import.derived_states */
SELECT src_id, dst_id, true AS mention FROM mentions
WHERE org_id = :org_id AND src_id = ANY(CAST(:ids AS text[])) AND derived
UNION ALL
SELECT src_id, dst_id, false AS mention FROM pending_links
WHERE org_id = :org_id AND src_id = ANY(CAST(:ids AS text[]))"""
)


async def stored_states(
    conn: AsyncConnection, *, org_id: str, ids: Sequence[str]
) -> dict[str, tuple[tuple[Any, ...], bool]]:
    """Per stored id: (type, name, content, project_id, scope, owner_id, lifecycle, metadata),
    and whether it is superseded with a SUPERSEDES edge pointing at it."""
    out: dict[str, tuple[tuple[Any, ...], bool]] = {}
    for part in parts(ids, LINK_ROWS):
        rows = await conn.execute(STORED_STATES_SQL, {"org_id": org_id, "ids": list(part)})
        for r in rows:
            fields = (
                r.type,
                r.name,
                r.content,
                r.project_id,
                r.scope,
                r.owner_id,
                r.lifecycle,
                r.metadata,
            )
            out[r.id] = (fields, bool(r.marked))
    return out


async def derived_states(
    conn: AsyncConnection, *, org_id: str, ids: Sequence[str]
) -> dict[str, tuple[set[str], set[str]]]:
    """Per source id: (targets of its derived mentions, targets of its pending links)."""
    out: dict[str, tuple[set[str], set[str]]] = {i: (set(), set()) for i in ids}
    for part in parts(ids, LINK_ROWS):
        rows = await conn.execute(DERIVED_STATES_SQL, {"org_id": org_id, "ids": list(part)})
        for r in rows:
            out[r.src_id][0 if r.mention else 1].add(r.dst_id)
    return out
