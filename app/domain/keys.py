"""API keys: minted at random, shown once, stored only as SHA-256 (rule: keys-hashed)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest, NotFound
from app.repo import keys as repo
from app.repo.readers import hash_key

SCOPES = ("read", "write", "admin")


async def create_key(
    conn: AsyncConnection,
    *,
    user_id: str,
    scopes: Sequence[str] = ("read",),
    projects: Sequence[str] | None = None,
    label: str | None = None,
) -> tuple[str, str]:
    """Mint a key for ``user_id``; return (key id, the key in clear, shown only now).

    ``scopes`` ⊆ {read, write, admin}; ``projects`` restricts the key to those projects of the
    user's org; ``admin`` only for org owners and admins. Raises ``NotFound`` for an unknown user,
    ``BadRequest`` for a bad scope or project.
    """
    user = (await conn.execute(repo.USER_ORG_SQL, {"user_id": user_id})).first()
    if user is None:
        raise NotFound("User not found")
    org, role = user.org_id, user.role
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise BadRequest("scopes must be a non-empty subset of read, write, admin")
    if "admin" in scopes and role not in ("owner", "admin"):
        raise BadRequest("the admin scope is only for org owners and admins")
    if projects is not None:
        found = set(
            (await conn.execute(repo.PROJECTS_IN_ORG_SQL, {"org_id": org, "ids": list(projects)}))
            .scalars()
            .all()
        )
        if set(projects) - found:
            raise BadRequest("every project of a restricted key must exist in the user's org")
    key_id = "key_" + secrets.token_hex(6)
    key = f"sibyl_{key_id[4:]}_{secrets.token_urlsafe(32)}"
    await conn.execute(
        repo.INSERT_KEY_SQL,
        {
            "id": key_id,
            "org_id": org,
            "user_id": user_id,
            "key_hash": hash_key(key),
            "scopes": sorted(set(scopes)),
            "project_ids": list(projects) if projects is not None else None,
            "label": label,
        },
    )
    return key_id, key


async def revoke_key(conn: AsyncConnection, *, key_id: str) -> None:
    """Revoke a key at once; raises ``NotFound`` when no live key has that id."""
    if (await conn.execute(repo.REVOKE_KEY_SQL, {"id": key_id})).first() is None:
        raise NotFound("No live key has this id (already revoked, or never minted)")
