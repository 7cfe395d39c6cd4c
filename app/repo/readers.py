"""Resolve a reader from an API key (or, for operators' CLI commands, from a user id).

The readable project set (rule: readable-project-set) is computed here, once per request, in SQL.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.reader import Reader

_READABLE_PROJECTS = """ARRAY(
        SELECT p.id FROM projects p
        WHERE p.org_id = u.org_id
          AND (p.visibility = 'org'
               OR u.role IN ('owner', 'admin')
               OR EXISTS (SELECT 1 FROM project_members m
                          WHERE m.org_id = p.org_id AND m.project_id = p.id AND m.user_id = u.id))
          AND (k_projects IS NULL OR p.id = ANY(k_projects))
        ORDER BY p.id)"""

READER_BY_KEY = f"""SELECT k.id AS key_id, u.org_id, u.id AS user_id, u.role, k.scopes, k_projects,
       {_READABLE_PROJECTS} AS readable_projects
FROM api_keys k
JOIN users u ON u.org_id = k.org_id AND u.id = k.user_id
CROSS JOIN LATERAL (SELECT k.project_ids AS k_projects) kp
WHERE k.key_hash = :key_hash AND k.revoked_at IS NULL"""
"""The reader row of the live key whose hash is ``:key_hash`` (no row: unknown or revoked), with
columns ``key_id``, ``org_id``, ``user_id``, ``role``, ``scopes`` text[], ``k_projects`` text[]
(NULL: not restricted) and ``readable_projects`` text[]. Also embedded as a CTE by statements
that authenticate and read in one round trip (``app.repo.walk.KEYED_WALK_SQL``)."""

READER_BY_KEY_SQL = text(f"/* sibyl:reader.by_key */\n{READER_BY_KEY}")

READER_BY_USER_SQL = text(
    f"""/* sibyl:reader.by_user */
SELECT NULL AS key_id, u.org_id, u.id AS user_id, u.role,
       ARRAY['read', 'write', 'admin'] AS scopes, k_projects,
       {_READABLE_PROJECTS} AS readable_projects
FROM users u
CROSS JOIN LATERAL (SELECT CAST(:key_projects AS text[]) AS k_projects) kp
WHERE u.id = :user_id"""
)


def hash_key(key: str) -> str:
    """SHA-256 hex digest of an API key: the only form in which keys are stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def reader_of(row: object) -> Reader:
    """The :class:`Reader` of a row holding the columns of :data:`READER_BY_KEY`."""
    m = row._mapping  # type: ignore[attr-defined]
    return Reader(
        org_id=m["org_id"],
        user_id=m["user_id"],
        org_role=m["role"],
        scopes=frozenset(m["scopes"]),
        readable_projects=tuple(m["readable_projects"]),
        restricted=m["k_projects"] is not None,
        key_id=m["key_id"],
    )


async def reader_by_key(conn: AsyncConnection, *, key: str) -> Reader | None:
    """The reader behind ``key``, or None when the key is unknown or revoked."""
    row = (await conn.execute(READER_BY_KEY_SQL, {"key_hash": hash_key(key)})).first()
    return reader_of(row) if row is not None else None


async def reader_by_user(
    conn: AsyncConnection, *, user_id: str, key_projects: list[str] | None = None
) -> Reader | None:
    """The reader a full-scope key of ``user_id`` would be (CLI ``explain``); None if no user."""
    row = (
        await conn.execute(READER_BY_USER_SQL, {"user_id": user_id, "key_projects": key_projects})
    ).first()
    return reader_of(row) if row is not None else None
