"""Statements of the org directory (rule: write-permissions): orgs, users, projects,
project members, entity grants and API key records. Every statement is bounded to one org.

Deletes that a foreign key may refuse (a user who still owns memories, a project that still
holds memories) run in a savepoint, so the refusal is an answer (``"in_use"``), not an aborted
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

DeleteOutcome = Literal["deleted", "missing", "in_use"]

INSERT_ORG_SQL = text(
    """/* sibyl:directory.org_insert */
INSERT INTO orgs (id, name) VALUES (:id, :name) ON CONFLICT (id) DO NOTHING RETURNING id"""
)
LIST_ORGS_SQL = text("/* sibyl:directory.orgs */ SELECT id, name, created_at FROM orgs ORDER BY id")

USER_ROLE_SQL = text(
    """/* sibyl:directory.user_role */
SELECT role FROM users WHERE org_id = :org_id AND id = :id"""
)
LIST_USERS_SQL = text(
    """/* sibyl:directory.users */
SELECT id, handle, role, created_at FROM users WHERE org_id = :org_id ORDER BY id"""
)
INSERT_USER_SQL = text(
    """/* sibyl:directory.user_insert */
INSERT INTO users (org_id, id, handle, role) VALUES (:org_id, :id, :handle, :role)
ON CONFLICT DO NOTHING
RETURNING id, handle, role, created_at"""
)
UPDATE_USER_SQL = text(
    """/* sibyl:directory.user_update */
UPDATE users SET handle = coalesce(:handle, handle), role = coalesce(:role, role)
WHERE org_id = :org_id AND id = :id
RETURNING id, handle, role, created_at"""
)
DELETE_USER_SQL = text(
    """/* sibyl:directory.user_delete */
DELETE FROM users WHERE org_id = :org_id AND id = :id RETURNING id"""
)

LIST_PROJECTS_SQL = text(
    """/* sibyl:directory.projects */
SELECT id, name, visibility, created_at FROM projects WHERE org_id = :org_id ORDER BY id"""
)
INSERT_PROJECT_SQL = text(
    """/* sibyl:directory.project_insert */
INSERT INTO projects (org_id, id, name, visibility) VALUES (:org_id, :id, :name, :visibility)
ON CONFLICT DO NOTHING
RETURNING id, name, visibility, created_at"""
)
UPDATE_PROJECT_SQL = text(
    """/* sibyl:directory.project_update */
UPDATE projects SET name = coalesce(:name, name), visibility = coalesce(:visibility, visibility)
WHERE org_id = :org_id AND id = :id
RETURNING id, name, visibility, created_at"""
)
DELETE_PROJECT_SQL = text(
    """/* sibyl:directory.project_delete */
DELETE FROM projects WHERE org_id = :org_id AND id = :id RETURNING id"""
)
PROJECT_EXISTS_SQL = text(
    """/* sibyl:directory.project_exists */
SELECT 1 FROM projects WHERE org_id = :org_id AND id = :id"""
)

LIST_MEMBERS_SQL = text(
    """/* sibyl:directory.members */
SELECT project_id, user_id, role FROM project_members
WHERE org_id = :org_id AND project_id = :project_id ORDER BY user_id"""
)
UPSERT_MEMBER_SQL = text(
    """/* sibyl:directory.member_upsert */
INSERT INTO project_members (org_id, project_id, user_id, role)
VALUES (:org_id, :project_id, :user_id, :role)
ON CONFLICT (org_id, project_id, user_id) DO UPDATE SET role = EXCLUDED.role
RETURNING project_id, user_id, role"""
)
DELETE_MEMBER_SQL = text(
    """/* sibyl:directory.member_delete */
DELETE FROM project_members WHERE org_id = :org_id AND project_id = :project_id
  AND user_id = :user_id RETURNING user_id"""
)

INSERT_GRANT_SQL = text(
    """/* sibyl:directory.grant_insert */
INSERT INTO entity_grants (org_id, entity_id, user_id) VALUES (:org_id, :entity_id, :user_id)
ON CONFLICT DO NOTHING RETURNING user_id"""
)
DELETE_GRANT_SQL = text(
    """/* sibyl:directory.grant_delete */
DELETE FROM entity_grants WHERE org_id = :org_id AND entity_id = :entity_id
  AND user_id = :user_id RETURNING user_id"""
)
LIST_GRANTS_SQL = text(
    """/* sibyl:directory.grants */
SELECT entity_id, user_id FROM entity_grants
WHERE org_id = :org_id AND entity_id = :entity_id ORDER BY user_id"""
)

LIST_KEYS_SQL = text(
    """/* sibyl:directory.keys */
SELECT id, org_id, user_id, scopes, project_ids AS projects, label, created_at, revoked_at
FROM api_keys
WHERE (CAST(:org_id AS text) IS NULL OR org_id = :org_id)
  AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)
  AND (:include_revoked OR revoked_at IS NULL)
ORDER BY org_id, user_id, created_at, id"""
)
KEY_USER_SQL = text(
    """/* sibyl:directory.key_user */
SELECT k.user_id, u.role FROM api_keys k JOIN users u ON u.org_id = k.org_id AND u.id = k.user_id
WHERE k.org_id = :org_id AND k.id = :id AND k.revoked_at IS NULL"""
)
REVOKE_KEY_SQL = text(
    """/* sibyl:directory.key_revoke */
UPDATE api_keys SET revoked_at = now()
WHERE org_id = :org_id AND id = :id AND revoked_at IS NULL RETURNING id"""
)


@dataclass(frozen=True)
class KeyRecord:
    """An API key's record (never its secret, which is stored only as a hash)."""

    id: str
    org_id: str
    user_id: str
    scopes: list[str]
    projects: list[str] | None
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


def _rows(result: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in result]


async def _delete(conn: AsyncConnection, statement: Any, params: dict[str, Any]) -> DeleteOutcome:
    try:
        async with conn.begin_nested():
            row = (await conn.execute(statement, params)).first()
    except IntegrityError:
        return "in_use"
    return "deleted" if row is not None else "missing"


async def insert_org(conn: AsyncConnection, *, org_id: str, name: str) -> bool:
    """Create an org; False when the id is taken."""
    return (await conn.execute(INSERT_ORG_SQL, {"id": org_id, "name": name})).first() is not None


async def list_orgs(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every org (operators only: the CLI)."""
    return _rows(await conn.execute(LIST_ORGS_SQL))


async def user_role(conn: AsyncConnection, *, org_id: str, user_id: str) -> str | None:
    """The org role of ``user_id`` in ``org_id``, or None when no such user is in that org."""
    return (await conn.execute(USER_ROLE_SQL, {"org_id": org_id, "id": user_id})).scalar()


async def user_in_org(conn: AsyncConnection, *, org_id: str, user_id: str) -> bool:
    """True when ``user_id`` is a user of ``org_id``."""
    return await user_role(conn, org_id=org_id, user_id=user_id) is not None


async def list_users(conn: AsyncConnection, *, org_id: str) -> list[dict[str, Any]]:
    """The users of ``org_id`` by id: ``{id, handle, role, created_at}``."""
    return _rows(await conn.execute(LIST_USERS_SQL, {"org_id": org_id}))


async def insert_user(
    conn: AsyncConnection, *, org_id: str, user_id: str, handle: str, role: str
) -> dict[str, Any] | None:
    """Create a user; None when the id is taken (user ids are unique across orgs)."""
    row = (
        await conn.execute(
            INSERT_USER_SQL, {"org_id": org_id, "id": user_id, "handle": handle, "role": role}
        )
    ).first()
    return dict(row._mapping) if row is not None else None


async def update_user(
    conn: AsyncConnection, *, org_id: str, user_id: str, handle: str | None, role: str | None
) -> dict[str, Any] | None:
    """Change a user's handle and/or role (None: keep); None when no such user."""
    row = (
        await conn.execute(
            UPDATE_USER_SQL, {"org_id": org_id, "id": user_id, "handle": handle, "role": role}
        )
    ).first()
    return dict(row._mapping) if row is not None else None


async def delete_user(conn: AsyncConnection, *, org_id: str, user_id: str) -> DeleteOutcome:
    """Delete a user with their keys, memberships and grants; ``in_use`` while they still own
    memories (hand those over or delete them first)."""
    return await _delete(conn, DELETE_USER_SQL, {"org_id": org_id, "id": user_id})


async def list_projects(conn: AsyncConnection, *, org_id: str) -> list[dict[str, Any]]:
    """The projects of ``org_id`` by id: ``{id, name, visibility, created_at}``."""
    return _rows(await conn.execute(LIST_PROJECTS_SQL, {"org_id": org_id}))


async def project_exists(conn: AsyncConnection, *, org_id: str, project_id: str) -> bool:
    """True when ``project_id`` is a project of ``org_id``."""
    params = {"org_id": org_id, "id": project_id}
    return (await conn.execute(PROJECT_EXISTS_SQL, params)).first() is not None


async def insert_project(
    conn: AsyncConnection, *, org_id: str, project_id: str, name: str, visibility: str
) -> dict[str, Any] | None:
    """Create a project; None when the id is taken in the org."""
    row = (
        await conn.execute(
            INSERT_PROJECT_SQL,
            {"org_id": org_id, "id": project_id, "name": name, "visibility": visibility},
        )
    ).first()
    return dict(row._mapping) if row is not None else None


async def update_project(
    conn: AsyncConnection,
    *,
    org_id: str,
    project_id: str,
    name: str | None,
    visibility: str | None,
) -> dict[str, Any] | None:
    """Rename a project or change its visibility (None: keep); None when no such project."""
    row = (
        await conn.execute(
            UPDATE_PROJECT_SQL,
            {"org_id": org_id, "id": project_id, "name": name, "visibility": visibility},
        )
    ).first()
    return dict(row._mapping) if row is not None else None


async def delete_project(conn: AsyncConnection, *, org_id: str, project_id: str) -> DeleteOutcome:
    """Delete a project and its memberships; ``in_use`` while it still holds memories."""
    return await _delete(conn, DELETE_PROJECT_SQL, {"org_id": org_id, "id": project_id})


async def list_members(
    conn: AsyncConnection, *, org_id: str, project_id: str
) -> list[dict[str, Any]]:
    """The members of a project: ``{project_id, user_id, role}`` by user id."""
    return _rows(await conn.execute(LIST_MEMBERS_SQL, {"org_id": org_id, "project_id": project_id}))


async def upsert_member(
    conn: AsyncConnection, *, org_id: str, project_id: str, user_id: str, role: str
) -> dict[str, Any]:
    """Set ``user_id``'s role in ``project_id`` (both must exist in ``org_id``)."""
    row = (
        await conn.execute(
            UPSERT_MEMBER_SQL,
            {"org_id": org_id, "project_id": project_id, "user_id": user_id, "role": role},
        )
    ).one()
    return dict(row._mapping)


async def delete_member(
    conn: AsyncConnection, *, org_id: str, project_id: str, user_id: str
) -> bool:
    """Remove a membership; False when there was none."""
    params = {"org_id": org_id, "project_id": project_id, "user_id": user_id}
    return (await conn.execute(DELETE_MEMBER_SQL, params)).first() is not None


async def insert_grant(conn: AsyncConnection, *, org_id: str, entity_id: str, user_id: str) -> bool:
    """Grant ``user_id`` read access to memory ``entity_id``; False when it already had it."""
    params = {"org_id": org_id, "entity_id": entity_id, "user_id": user_id}
    return (await conn.execute(INSERT_GRANT_SQL, params)).first() is not None


async def delete_grant(conn: AsyncConnection, *, org_id: str, entity_id: str, user_id: str) -> bool:
    """Revoke a grant; False when there was none."""
    params = {"org_id": org_id, "entity_id": entity_id, "user_id": user_id}
    return (await conn.execute(DELETE_GRANT_SQL, params)).first() is not None


async def list_grants(
    conn: AsyncConnection, *, org_id: str, entity_id: str
) -> list[dict[str, Any]]:
    """The grants of one memory: ``{entity_id, user_id}`` by user id."""
    return _rows(await conn.execute(LIST_GRANTS_SQL, {"org_id": org_id, "entity_id": entity_id}))


async def list_keys(
    conn: AsyncConnection,
    *,
    org_id: str | None = None,
    user_id: str | None = None,
    include_revoked: bool = True,
) -> list[KeyRecord]:
    """Key records (never secrets), optionally of one org and/or one user."""
    rows = await conn.execute(
        LIST_KEYS_SQL, {"org_id": org_id, "user_id": user_id, "include_revoked": include_revoked}
    )
    return [KeyRecord(**r._mapping) for r in rows]


async def live_key_user(
    conn: AsyncConnection, *, org_id: str, key_id: str
) -> tuple[str, str] | None:
    """(user id, org role) of the live key ``key_id`` of ``org_id``, or None."""
    row = (await conn.execute(KEY_USER_SQL, {"org_id": org_id, "id": key_id})).first()
    return (row.user_id, row.role) if row is not None else None


async def revoke_key(conn: AsyncConnection, *, org_id: str, key_id: str) -> bool:
    """Revoke a live key of ``org_id``; False when there is none."""
    return (
        await conn.execute(REVOKE_KEY_SQL, {"org_id": org_id, "id": key_id})
    ).first() is not None
