"""The admin verbs (rule: write-permissions): users, projects, members, grants and API keys of one
org.

Who is an admin: a key with the ``admin`` scope, not restricted to projects, whose user is an
org ``owner`` or ``admin``. For anyone else the admin routes do not exist: every refusal of
:func:`require_admin` is ``NotFound("Not found")``, as for the DBA ``explain`` route. An admin
acts only inside their own org (every statement is bounded by the reader's org id), and never
above their own rank (viewer < member < admin < owner): an org admin cannot create, change,
delete or mint keys for an org owner, nor hand out the owner role.

User ids are always minted by the service (they are unique across orgs, so a chosen id could
reveal that another org uses it); project ids may be chosen (they are unique per org).
Operators use the same repository functions from the CLI, without these checks.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest, Conflict, Forbidden, NotFound
from app.core.reader import Reader
from app.domain import keys as key_domain
from app.domain import permissions
from app.domain.entities import grant_in_effect, set_grant
from app.domain.validation import clean_text, path_id_problem
from app.domain.write_schemas import (
    GrantOut,
    KeyCreated,
    KeyIn,
    KeyOut,
    MemberIn,
    MemberOut,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
    UserIn,
    UserOut,
    UserPatch,
)
from app.repo import directory as repo

HIDDEN = permissions.ADMIN_HIDDEN
MAX_LABEL_CHARS = 200


def require_admin(reader: Reader) -> None:
    """Raise ``NotFound("Not found")`` unless ``reader`` is an org admin on an admin key
    (:func:`app.domain.permissions.require_admin`)."""
    permissions.require_admin(reader)


def _outranks(reader: Reader, role: str) -> None:
    if permissions.ORG_ROLE_RANK[role] > permissions.ORG_ROLE_RANK[reader.org_role]:
        raise Forbidden("An org admin cannot act on or grant the owner role")


def _text(value: str, *, field: str, limit: int = MAX_LABEL_CHARS) -> str:
    stripped = clean_text(value, field=field).strip()
    if not stripped or len(stripped) > limit:
        raise BadRequest(f"{field} must be 1-{limit} characters, not blank")
    return stripped


def _id(value: str, *, field: str) -> str:
    stripped = value.strip()
    problem = path_id_problem(stripped)
    if problem is not None:
        raise BadRequest(f"{field} {problem}")
    return stripped


async def _user_role(conn: AsyncConnection, reader: Reader, user_id: str) -> str:
    role = await repo.user_role(conn, org_id=reader.org_id, user_id=user_id.strip())
    if role is None:
        raise NotFound("User not found")
    return role


async def _project(conn: AsyncConnection, reader: Reader, project_id: str) -> str:
    pid = project_id.strip()
    if not await repo.project_exists(conn, org_id=reader.org_id, project_id=pid):
        raise NotFound("Project not found")
    return pid


# --- users -------------------------------------------------------------------------------------


async def list_users(conn: AsyncConnection, reader: Reader) -> list[UserOut]:
    """Every user of the admin's org."""
    require_admin(reader)
    return [UserOut(**u) for u in await repo.list_users(conn, org_id=reader.org_id)]


async def create_user(conn: AsyncConnection, reader: Reader, body: UserIn) -> UserOut:
    """Add a user (id minted: ``user_<12 hex>``). ``Forbidden`` above the admin's rank."""
    require_admin(reader)
    _outranks(reader, body.role)
    row = await repo.insert_user(
        conn,
        org_id=reader.org_id,
        user_id="user_" + secrets.token_hex(6),
        handle=_text(body.handle, field="handle"),
        role=body.role,
    )
    if row is None:  # pragma: no cover - 48 random bits
        raise Conflict("Could not mint a user id, retry")
    return UserOut(**row)


async def update_user(
    conn: AsyncConnection, reader: Reader, user_id: str, body: UserPatch
) -> UserOut:
    """Change a user's handle or org role. ``NotFound`` outside the org; ``Forbidden`` above the
    admin's rank (either the user's current role or the new one), and for a change of one's own
    role: an admin who demoted themselves would lose every admin route at once, with no way
    back but the operator's CLI; another admin or owner, or the operator
    (``sibyl-pg admin user-role``), changes it. One's own handle may change."""
    require_admin(reader)
    current = await _user_role(conn, reader, user_id)
    _outranks(reader, current)
    if body.role is not None:
        _outranks(reader, body.role)
        if user_id.strip() == reader.user_id and body.role != current:
            raise Forbidden("You cannot change your own role")
    row = await repo.update_user(
        conn,
        org_id=reader.org_id,
        user_id=user_id.strip(),
        handle=_text(body.handle, field="handle") if body.handle is not None else None,
        role=body.role,
    )
    if row is None:
        raise NotFound("User not found")
    return UserOut(**row)


async def delete_user(conn: AsyncConnection, reader: Reader, user_id: str) -> None:
    """Delete a user (their keys, memberships and grants go too). ``Conflict`` while they own
    memories; ``Forbidden`` for oneself and above the admin's rank."""
    require_admin(reader)
    _outranks(reader, await _user_role(conn, reader, user_id))
    if user_id.strip() == reader.user_id:
        raise Forbidden("You cannot delete yourself")
    outcome = await repo.delete_user(conn, org_id=reader.org_id, user_id=user_id.strip())
    if outcome == "missing":
        raise NotFound("User not found")
    if outcome == "in_use":
        raise Conflict(
            "This user still owns memories: they (or the operator) must delete them, or the"
            " operator gives them another owner (an NDJSON import naming a new `owner`) first"
        )


# --- projects and members ----------------------------------------------------------------------


async def list_projects(conn: AsyncConnection, reader: Reader) -> list[ProjectOut]:
    """Every project of the admin's org."""
    require_admin(reader)
    return [ProjectOut(**p) for p in await repo.list_projects(conn, org_id=reader.org_id)]


async def create_project(conn: AsyncConnection, reader: Reader, body: ProjectIn) -> ProjectOut:
    """Add a project (id chosen or minted ``proj_<12 hex>``). ``Conflict`` when the id is
    taken in the org."""
    require_admin(reader)
    project_id = _id(body.id, field="id") if body.id is not None else "proj_" + secrets.token_hex(6)
    row = await repo.insert_project(
        conn,
        org_id=reader.org_id,
        project_id=project_id,
        name=_text(body.name, field="name"),
        visibility=body.visibility,
    )
    if row is None:
        raise Conflict("A project with this id already exists")
    return ProjectOut(**row)


async def update_project(
    conn: AsyncConnection, reader: Reader, project_id: str, body: ProjectPatch
) -> ProjectOut:
    """Rename a project or change its visibility (readers change at once: the read rule is evaluated
    at read time)."""
    require_admin(reader)
    row = await repo.update_project(
        conn,
        org_id=reader.org_id,
        project_id=project_id.strip(),
        name=_text(body.name, field="name") if body.name is not None else None,
        visibility=body.visibility,
    )
    if row is None:
        raise NotFound("Project not found")
    return ProjectOut(**row)


async def delete_project(conn: AsyncConnection, reader: Reader, project_id: str) -> None:
    """Delete an empty project (its memberships go too). ``Conflict`` while it holds memories."""
    require_admin(reader)
    outcome = await repo.delete_project(conn, org_id=reader.org_id, project_id=project_id.strip())
    if outcome == "missing":
        raise NotFound("Project not found")
    if outcome == "in_use":
        raise Conflict("This project still holds memories: delete or move them first")


async def list_members(conn: AsyncConnection, reader: Reader, project_id: str) -> list[MemberOut]:
    """The members of a project of the admin's org."""
    require_admin(reader)
    pid = await _project(conn, reader, project_id)
    return [
        MemberOut(**m) for m in await repo.list_members(conn, org_id=reader.org_id, project_id=pid)
    ]


async def set_member(
    conn: AsyncConnection, reader: Reader, project_id: str, user_id: str, body: MemberIn
) -> MemberOut:
    """Add a user to a project or change their role there."""
    require_admin(reader)
    pid = await _project(conn, reader, project_id)
    await _user_role(conn, reader, user_id)
    row = await repo.upsert_member(
        conn, org_id=reader.org_id, project_id=pid, user_id=user_id.strip(), role=body.role
    )
    return MemberOut(**row)


async def remove_member(
    conn: AsyncConnection, reader: Reader, project_id: str, user_id: str
) -> None:
    """Remove a user from a project. ``NotFound`` when they were not a member."""
    require_admin(reader)
    pid = await _project(conn, reader, project_id)
    if not await repo.delete_member(
        conn, org_id=reader.org_id, project_id=pid, user_id=user_id.strip()
    ):
        raise NotFound("Member not found")


# --- grants ------------------------------------------------------------------------------------


async def list_grants(conn: AsyncConnection, reader: Reader, entity_id: str) -> list[GrantOut]:
    """The grants of a memory the admin can read (else ``NotFound("Entity not found")``); a key
    without ``read`` gets 403 (:func:`app.domain.permissions.require_read_scope`)."""
    require_admin(reader)
    permissions.require_read_scope(reader)
    entity_id = entity_id.strip()
    found = await permissions.load_targets(conn, reader, [entity_id], lock="share")
    target = found.get(entity_id)
    if target is None:
        raise NotFound()
    rows = await repo.list_grants(conn, org_id=reader.org_id, entity_id=entity_id)
    return [
        GrantOut(**g, in_effect=grant_in_effect(target.scope, target.owner_id, g["user_id"]))
        for g in rows
    ]


async def admin_grant(
    conn: AsyncConnection, reader: Reader, entity_id: str, user_id: str, *, granted: bool
) -> GrantOut:
    """Grant read access to a memory the admin owns, or revoke a grant on a memory the admin can
    read themselves (:func:`app.domain.entities.set_grant`: only an owner widens a memory's
    readers, and nobody revokes what they cannot read). Both look the memory up through the
    admin's read rule, so a key without ``read`` gets 403, whether or not the memory exists."""
    require_admin(reader)
    permissions.require_read_scope(reader)
    in_effect = await set_grant(conn, reader, entity_id, user_id, granted=granted, as_admin=True)
    return GrantOut(entity_id=entity_id.strip(), user_id=user_id.strip(), in_effect=in_effect)


# --- API keys ----------------------------------------------------------------------------------


def _key_out(record: repo.KeyRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "user_id": record.user_id,
        "scopes": record.scopes,
        "projects": record.projects,
        "label": record.label,
        "created_at": record.created_at,
        "revoked_at": record.revoked_at,
    }


async def list_keys(
    conn: AsyncConnection, reader: Reader, *, user_id: str | None, include_revoked: bool
) -> list[KeyOut]:
    """Key records of the org (never a secret), optionally of one user."""
    require_admin(reader)
    records = await repo.list_keys(
        conn,
        org_id=reader.org_id,
        user_id=user_id.strip() if user_id else None,
        include_revoked=include_revoked,
    )
    return [KeyOut(**_key_out(r)) for r in records]


KEYS_FOR_OTHERS = (
    "An admin key mints keys for its own user only: a key for another user would read and write"
    " as them, their private memories included. The operator mints it:"
    " sibyl-pg keys create --user USER_ID"
)
KEY_WIDER_THAN_CALLER = "A key cannot mint a key with more scopes than its own ({scopes})"


async def create_key(conn: AsyncConnection, reader: Reader, body: KeyIn) -> KeyCreated:
    """Mint a key for the admin's own user; the secret is in the answer, only this once.

    Only for oneself: an org admin who minted a key for a member would read that member's
    private memories through it, which the read rule forbids admins;
    keys for other users come from the operator (``sibyl-pg keys create``). The new key's scopes
    are a subset of the calling key's (an ``admin``-only key minted itself ``read,write,admin``);
    a key restricted to projects never reaches the admin routes.
    ``NotFound`` for a user outside the org; ``Forbidden`` for another user of the org or more
    scopes than the caller's; ``BadRequest`` for a project outside the org.
    """
    require_admin(reader)
    user_id = body.user_id.strip()
    await _user_role(conn, reader, user_id)  # 404 for no such user of the org
    if user_id != reader.user_id:
        raise Forbidden(KEYS_FOR_OTHERS)
    if not set(body.scopes) <= reader.scopes:
        raise Forbidden(KEY_WIDER_THAN_CALLER.format(scopes=",".join(sorted(reader.scopes))))
    label = _text(body.label, field="label") if body.label is not None else None
    key_id, key = await key_domain.create_key(
        conn, user_id=user_id, scopes=body.scopes, projects=body.projects, label=label
    )
    record = next(
        r
        for r in await repo.list_keys(conn, org_id=reader.org_id, user_id=user_id)
        if r.id == key_id
    )
    return KeyCreated(**_key_out(record), key=key)


async def revoke_key(conn: AsyncConnection, reader: Reader, key_id: str) -> None:
    """Revoke a live key of the org at once. ``NotFound`` for no such live key in the org."""
    require_admin(reader)
    owner = await repo.live_key_user(conn, org_id=reader.org_id, key_id=key_id.strip())
    if owner is None:
        raise NotFound("Key not found")
    _outranks(reader, owner[1])
    await repo.revoke_key(conn, org_id=reader.org_id, key_id=key_id.strip())
