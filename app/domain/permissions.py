"""Write permissions (rule: write-permissions): who may create, edit, delete and link memories.

Reading is never decided here: every target is first loaded through the one read rule
(:mod:`app.repo.permissions`, which embeds :func:`app.repo.readrule.readable`). A target the
writer cannot read is a ``NotFound`` identical to a missing one; a readable target the writer may
not write is ``Forbidden`` (403). The rules, decided for this service:

- **project** memories: a project role of ``contributor`` or higher (``viewer`` < ``contributor``
  < ``maintainer`` < ``owner``). Org ``owner``\\ s and ``admin``\\ s count as project owners of
  every project of their org (they already read every project, and manage memberships).
- **private** memories: only their owner writes them (a grant gives read access only). An owner
  keeps write access to their private memory inside a project even without a project role;
  *moving* a memory into a project always needs write access to that project.
- **org** memories: their owner, and org owners and admins. Creating one needs an org role above
  ``viewer``.
- A key restricted to projects writes only inside those projects: a memory outside every project
  (org, or private without a project) is unreadable to it (404) and cannot be created with it
  (403).
- **placement**: a memory is created in, or moved to, a project only by a writer of that project;
  a project the writer cannot read is "Project not found" (404), exactly like a missing one.
- **moving** a project memory out of its project (another project, or the org: its readers
  change) needs more than editing it: its owner, a ``maintainer`` or ``owner`` of its project, or
  an org owner or admin. A ``contributor`` edits other people's memories in the project but
  cannot carry them to a wider audience (a colleague's note of a private project made
  org-wide). Private and org memories are edited only by their owner or an
  org owner/admin already.
- **edges**: write access to the source and read access to the target; ``SUPERSEDES`` and
  ``CONTRADICTS`` also need write access to the target.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import Forbidden, NotFound
from app.core.reader import Reader
from app.repo import permissions as repo
from app.repo.permissions import LockMode, Target

PROJECT_ROLE_RANK = {"viewer": 0, "contributor": 1, "maintainer": 2, "owner": 3}
ORG_ROLE_RANK = {"viewer": 0, "member": 1, "admin": 2, "owner": 3}
ORG_ADMINS = frozenset({"owner", "admin"})
WRITE_ROLE = "contributor"
TARGET_WRITE_RELATIONSHIPS = frozenset({"SUPERSEDES", "CONTRADICTS"})

NOT_WRITABLE = "You may read this memory but not change it"
NOT_MOVABLE = (
    "Only the memory's owner, a maintainer of its project or an org admin may move it out of"
    " its project (its readers would change)"
)
MOVE_ROLE = "maintainer"
PROJECT_NOT_WRITABLE = "You may not write memories in this project"


def is_org_admin(reader: Reader) -> bool:
    """True for org owners and admins."""
    return reader.org_role in ORG_ADMINS


ADMIN_SCOPE = "admin"
READ_SCOPE = "read"
LACKS_READ = "This key lacks the 'read' scope"


def require_read_scope(reader: Reader) -> None:
    """``Forbidden(LACKS_READ)`` (403) unless ``reader``'s key holds the ``read`` scope: for a
    verb reached through another scope that answers with what its reader reads. An edit answers
    with the whole memory (a ``write``-only key read any memory it could edit with an empty
    ``PATCH``), an admin's explain runs the read verb it explains and its grant list tells which
    memories the admin reads (an ``admin``-only key would rank searches through explain).
    Checked before the target is looked up, so the answer is the same whether
    or not it exists."""
    if READ_SCOPE not in reader.scopes:
        raise Forbidden(LACKS_READ)


ADMIN_HIDDEN = "Not found"


def require_admin(reader: Reader | None) -> Reader:
    """``reader`` when it is an org owner or admin using an unrestricted key with the ``admin``
    scope: the rule of every ``/api/admin`` route and admin verb (explain, doctor, directory).

    Anyone else (no key, an unknown or revoked one, a key without ``admin``, a project-restricted
    key, a member) gets the same ``NotFound("Not found")``: the route does not exist for them.
    """
    if (
        reader is None
        or ADMIN_SCOPE not in reader.scopes
        or reader.restricted
        or not is_org_admin(reader)
    ):
        raise NotFound(ADMIN_HIDDEN)
    return reader


def writes_project(reader: Reader, project_id: str, role: str | None) -> bool:
    """True when ``reader`` (whose role in ``project_id`` is ``role``) may write memories in it.

    The project must be in the reader's readable set (which also honours a key's project list).
    """
    if not reader.can_read_project(project_id):
        return False
    if is_org_admin(reader):
        return True
    return role is not None and PROJECT_ROLE_RANK[role] >= PROJECT_ROLE_RANK[WRITE_ROLE]


def may_write(reader: Reader, target: Target) -> bool:
    """True when ``reader`` may edit or delete ``target`` (a memory they can read)."""
    if target.scope == "project":
        return target.project_id is not None and writes_project(
            reader, target.project_id, target.project_role
        )
    if target.scope == "private":
        return target.owner_id == reader.user_id
    return target.owner_id == reader.user_id or is_org_admin(reader)


def may_move(reader: Reader, target: Target) -> bool:
    """True when ``reader``, who may write ``target``, may also change its scope or project
    (see the module docstring: *moving*)."""
    if target.scope != "project" or target.owner_id == reader.user_id or is_org_admin(reader):
        return True
    role = target.project_role
    return role is not None and PROJECT_ROLE_RANK[role] >= PROJECT_ROLE_RANK[MOVE_ROLE]


async def load_targets(
    conn: AsyncConnection, reader: Reader, ids: Sequence[str], *, lock: LockMode
) -> dict[str, Target]:
    """The memories among ``ids`` that ``reader`` can read, row-locked (see
    :func:`app.repo.permissions.readable_targets`)."""
    return await repo.readable_targets(
        conn, reader_params=reader.params(), ids=list(dict.fromkeys(ids)), lock=lock
    )


async def writable_target(
    conn: AsyncConnection, reader: Reader, entity_id: str, *, lock: LockMode = "update"
) -> Target:
    """The memory ``entity_id``, locked, when ``reader`` may change it.

    Raises ``NotFound`` (absent or unreadable, indistinguishable) or ``Forbidden`` (readable but
    not writable).
    """
    target = (await load_targets(conn, reader, [entity_id], lock=lock)).get(entity_id)
    if target is None:
        raise NotFound()
    if not may_write(reader, target):
        raise Forbidden(NOT_WRITABLE)
    return target


async def check_placement(
    conn: AsyncConnection, reader: Reader, *, scope: str, project_id: str | None
) -> None:
    """Raise unless ``reader`` may place a memory of ``scope`` in ``project_id`` (None: none).

    ``NotFound("Project not found")`` for a project that is absent or unreadable to the reader;
    ``Forbidden`` for a readable project the reader may not write, for an ``org`` memory by an
    org ``viewer``, and for any memory outside a project written with a project-restricted key.
    """
    if project_id is not None:
        if not reader.can_read_project(project_id):
            raise NotFound("Project not found")
        exists, role = await repo.project_role(
            conn, reader_params=reader.params(), project_id=project_id
        )
        if not exists:
            raise NotFound("Project not found")
        if not writes_project(reader, project_id, role):
            raise Forbidden(PROJECT_NOT_WRITABLE)
        return
    if reader.restricted:
        raise Forbidden("A key restricted to projects writes only inside those projects")
    if scope == "org" and reader.org_role == "viewer":
        raise Forbidden("Org viewers may not write org-wide memories")


async def readable_subset(conn: AsyncConnection, reader: Reader, ids: list[str]) -> list[str]:
    """``ids`` the reader can read, in the given order (the ``may_link`` of mention derivation:
    a ``[[link]]`` to a memory the writer cannot read is dropped, as if it did not exist)."""
    keep = await repo.readable_ids(conn, reader_params=reader.params(), ids=ids)
    return [i for i in ids if i in keep]
