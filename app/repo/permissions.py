"""The statements behind write checks (rule: write-checks-hide-nothing): what a writer may read, and
their roles.

"Can the writer read the target" is always answered by the one read rule
(:func:`app.repo.readrule.readable`) embedded in the ``WHERE`` clause: a row the writer cannot
read never leaves the database, so a denied target and a missing one are the same ``None``.
The rows are locked in id order (``ORDER BY t.id`` below the lock), so concurrent writers that
lock several memories always take their locks in one order and cannot deadlock each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

LockMode = Literal["update", "no_key_update", "share"]

_TARGETS = """/* sibyl:write.targets */
SELECT t.id, t.scope, t.project_id, t.owner_id, t.revision, t.lifecycle, m.role AS project_role
FROM entities t
LEFT JOIN project_members m
       ON m.org_id = t.org_id AND m.project_id = t.project_id AND m.user_id = :r_user
WHERE t.org_id = :r_org AND t.id = ANY(CAST(:ids AS text[]))
  AND {rule}
ORDER BY t.id
FOR {lock} OF t"""

TARGETS_SQL = {
    mode: text(_TARGETS.format(rule=readable("t"), lock=lock))
    for mode, lock in (
        ("update", "UPDATE"),
        ("no_key_update", "NO KEY UPDATE"),
        ("share", "SHARE"),
    )
}

READABLE_IDS_SQL = text(
    f"""/* sibyl:write.readable_ids */
SELECT t.id FROM entities t
WHERE t.org_id = :r_org AND t.id = ANY(CAST(:ids AS text[])) AND {readable("t")}"""
)

PROJECT_ROLE_SQL = text(
    """/* sibyl:write.project_role */
SELECT p.id, m.role
FROM projects p
LEFT JOIN project_members m ON m.org_id = p.org_id AND m.project_id = p.id AND m.user_id = :r_user
WHERE p.org_id = :r_org AND p.id = :project_id
FOR KEY SHARE OF p"""
)


@dataclass(frozen=True)
class Target:
    """A memory the writer can read, locked for the transaction, with the writer's role in its
    project (None: not a member, or no project)."""

    id: str
    scope: str
    project_id: str | None
    owner_id: str | None
    revision: int
    lifecycle: str
    project_role: str | None


async def readable_targets(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    ids: Sequence[str],
    lock: LockMode,
) -> dict[str, Target]:
    """The memories among ``ids`` the reader can read, by id, row-locked in id order.

    ``lock``: ``update`` (an edit or a delete follows), ``no_key_update`` (the row may be updated
    but not deleted, e.g. marked superseded), ``share`` (the row must not change meanwhile).
    """
    rows = await conn.execute(TARGETS_SQL[lock], {**reader_params, "ids": list(ids)})
    return {r.id: Target(**r._mapping) for r in rows}


async def readable_ids(
    conn: AsyncConnection, *, reader_params: dict[str, object], ids: Sequence[str]
) -> set[str]:
    """The subset of ``ids`` the reader can read (no lock)."""
    if not ids:
        return set()
    rows = await conn.execute(READABLE_IDS_SQL, {**reader_params, "ids": list(ids)})
    return {r.id for r in rows}


async def project_role(
    conn: AsyncConnection, *, reader_params: dict[str, object], project_id: str
) -> tuple[bool, str | None]:
    """(the project exists in the reader's org, the reader's role in it or None).

    The project row is key-share locked, so it cannot be deleted before the write commits.
    """
    row = (
        await conn.execute(PROJECT_ROLE_SQL, {**reader_params, "project_id": project_id})
    ).first()
    if row is None:
        return False, None
    return True, row.role
