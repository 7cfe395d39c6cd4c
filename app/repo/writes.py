"""Write statements: orgs, users, projects, members, grants, entities with their passages,
edges and mentions. Each is idempotent by id (an identical repeated write changes nothing)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

UPSERT_ORG_SQL = text(
    """/* sibyl:write.org */
INSERT INTO orgs (id, name) VALUES (:id, :name)
ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name
WHERE orgs.name IS DISTINCT FROM EXCLUDED.name"""
)

UPSERT_USER_SQL = text(
    """/* sibyl:write.user */
INSERT INTO users (org_id, id, handle, role) VALUES (:org_id, :id, :handle, :role)
ON CONFLICT (org_id, id) DO UPDATE SET handle = EXCLUDED.handle, role = EXCLUDED.role
WHERE (users.handle, users.role) IS DISTINCT FROM (EXCLUDED.handle, EXCLUDED.role)"""
)

UPSERT_PROJECT_SQL = text(
    """/* sibyl:write.project */
INSERT INTO projects (org_id, id, name, visibility) VALUES (:org_id, :id, :name, :visibility)
ON CONFLICT (org_id, id) DO UPDATE SET name = EXCLUDED.name, visibility = EXCLUDED.visibility
WHERE (projects.name, projects.visibility) IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.visibility)"""
)

UPSERT_MEMBER_SQL = text(
    """/* sibyl:write.member */
INSERT INTO project_members (org_id, project_id, user_id, role)
SELECT p.org_id, p.id, :user_id, :role FROM projects p WHERE p.id = :project_id
  AND p.org_id = (SELECT u.org_id FROM users u WHERE u.id = :user_id)
ON CONFLICT (org_id, project_id, user_id) DO UPDATE SET role = EXCLUDED.role
WHERE project_members.role IS DISTINCT FROM EXCLUDED.role
RETURNING org_id"""
)

INSERT_GRANT_SQL = text(
    """/* sibyl:write.grant */
INSERT INTO entity_grants (org_id, entity_id, user_id)
SELECT u.org_id, :entity_id, u.id FROM users u WHERE u.id = :user_id
  AND EXISTS (SELECT 1 FROM entities e WHERE e.org_id = u.org_id AND e.id = :entity_id)
ON CONFLICT DO NOTHING
RETURNING org_id"""
)

GRANT_TARGET_SQL = text(
    """/* sibyl:write.grant_target */
SELECT u.org_id FROM users u
WHERE u.id = :user_id
  AND EXISTS (SELECT 1 FROM entities e WHERE e.org_id = u.org_id AND e.id = :entity_id)"""
)

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
        CAST(:metadata AS jsonb), 1)"""
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

# A memory was created: every link waiting for it becomes a derived mention (contract §9).
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


async def insert_entity(conn: AsyncConnection, *, org_id: str, fields: dict[str, Any]) -> None:
    """Insert a new entity at revision 1 (``fields``: id, type, name, content, project_id,
    scope, owner_id, lifecycle, metadata)."""
    await conn.execute(
        INSERT_ENTITY_SQL, {**fields, "org_id": org_id, "metadata": json.dumps(fields["metadata"])}
    )


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


MEMBER_EXISTS_SQL = text(
    """/* sibyl:write.member_exists */
SELECT 1 FROM project_members m JOIN users u ON u.org_id = m.org_id AND u.id = m.user_id
WHERE m.project_id = :project_id AND m.user_id = :user_id"""
)
