"""Entity and edge verbs (rule: one-write-path): create, read, update, delete a memory; write and
delete an edge; grant a private memory. REST and MCP call these inside one transaction opened by
:func:`app.service.session.run_write` (or ``run_read`` for :func:`get_entity`).

Every memory is written by :func:`app.domain.memories.save_entity`, the one write path shared
with the importer: fields, the passage cut (rule: span-bound) and the mentions derived from
``[[id]]`` links, in one transaction; a body edit re-cuts and re-mints passage ids; any change bumps
``revision``. Permissions are :mod:`app.domain.permissions`. Decisions:

- ``If-Match: <revision>`` on PATCH and DELETE is compared with the locked row: a mismatch is
  412 and nothing changes; concurrent writers with the same revision are serialized by the row
  lock, so exactly one wins. Without ``If-Match`` a PATCH is last-write-wins (still atomic).
- Unreadable and missing targets are the same 404 "Entity not found"; readable but not
  writable is 403. An id given on create that is already taken in the org is 409 whether or not
  the writer can read that memory (ids are the writer's choice; the minted default never
  collides), and the answer names no id.
- A self-edge is 400; an edge that would close a ``SUPERSEDES`` cycle through memories the
  writer can read is 409 (a cycle through a hidden memory is allowed: the check never reveals
  one; checked under an org-wide transaction lock, so concurrent writers cannot close a cycle
  together); a repeated
  edge is written once (``created: false``). ``MENTIONS`` and ``SHARES_COMMUNITY`` are derived
  hops, never written as edges (400).
- Writing ``A SUPERSEDES B`` marks ``B`` superseded when it is ``active`` (a retired memory stays
  retired) and changes no other memory; deleting that edge changes no lifecycle (marking is an
  explicit write: PATCH ``lifecycle``).
- A PATCH making a memory ``private`` is allowed to its owner only (or to anyone when it has
  none: they become its owner): anyone else gets 403 with the reason, since a private memory is
  readable by its owner and grantees only and the editor would lose it (rule: write-permissions).
- The rules every door shares (reserved types, cycles, the superseded mark, links, pending links,
  community retirement) are :mod:`app.domain.write_rules`.
- Deleting a memory removes its passages, mentions, edges, grants and community memberships
  (foreign keys with cascade).
"""

from __future__ import annotations

import re
import secrets

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest, Conflict, Forbidden, NotFound, PreconditionFailed
from app.core.reader import Reader
from app.domain import permissions, write_rules
from app.domain.memories import EntityData, links, save_entity
from app.domain.validation import (
    ID_RE,
    NOT_BLANK,
    clean_text,
    line_problem,
    stored_relationship,
)
from app.domain.write_schemas import EdgeIn, EdgeOut, EntityCreate, EntityOut, EntityPatch
from app.repo import entities as repo
from app.repo import writes as write_repo
from app.repo.directory import delete_grant, insert_grant, user_in_org

MAX_NAME_CHARS = 1000
_REVISION = re.compile(r'^(?:W/)?"?(\d{1,18})"?$')


def parse_if_match(value: str | None) -> list[int] | None:
    """The revisions an ``If-Match`` header accepts (None: no precondition).

    Accepts ``3``, ``"3"``, ``W/"3"`` and comma-separated lists of them; ``*`` is no
    precondition on an existing memory. Raises ``BadRequest`` for anything else.
    """
    if value is None or value.strip() == "*":
        return None
    out = []
    for part in value.split(","):
        match = _REVISION.match(part.strip())
        if match is None:
            raise BadRequest('If-Match must be a revision number, e.g. If-Match: "3"')
        out.append(int(match.group(1)))
    return out


def etag(revision: int) -> str:
    """The ``ETag`` of a memory at ``revision`` (what ``If-Match`` echoes back)."""
    return f'"{revision}"'


def _entity_id(value: str, *, field: str = "id") -> str:
    stripped = value.strip()
    if not ID_RE.fullmatch(stripped):
        raise BadRequest(f"{field} must match [A-Za-z0-9_.:-]{{1,128}}")
    return stripped


_type = write_rules.memory_type


def memory_name(value: str) -> str:
    """A memory's name: stripped, 1..MAX_NAME_CHARS characters, one line of printable text
    (:func:`app.domain.validation.line_problem`: no control character, line separator or bidi
    override; not only invisible characters), else 400: a name is printed by lists, CLIs and
    Markdown packs, where an ANSI escape sequence stored in one would drive the reader's
    terminal (``"\x1b[31m"`` in a name)."""
    stripped = clean_text(value, field="name").strip()
    if not stripped or len(stripped) > MAX_NAME_CHARS:
        raise BadRequest(f"name must be 1-{MAX_NAME_CHARS} characters, not blank")
    problem = line_problem(stripped)
    if problem == NOT_BLANK:
        raise BadRequest(f"name must be 1-{MAX_NAME_CHARS} characters, not blank")
    if problem:
        raise BadRequest(f"name must be {problem}")
    return stripped


def _project(value: str | None) -> str | None:
    return None if value is None else _entity_id(value, field="project")


_check_scope = write_rules.check_scope
PRIVATE_BY_OWNER = (
    "Only the memory's owner may make it private (you would no longer be able to read it)"
)


def relationship_name(value: str) -> str:
    """An upper-cased relationship name a writer may store (the importer's rule:
    :func:`app.domain.validation.stored_relationship`); ``BadRequest`` outside
    ``[A-Za-z0-9_]{1,64}`` or for a derived hop (``MENTIONS``: write a ``[[id]]`` link;
    ``SHARES_COMMUNITY``: detected)."""
    return stored_relationship(value.strip())


async def _read_back(conn: AsyncConnection, reader: Reader, entity_id: str) -> EntityOut:
    row = await repo.get_entity(conn, reader_params=reader.params(), entity_id=entity_id)
    if row is None:  # the writer can always read what they may write; keep 404 semantics anyway
        raise NotFound()
    return EntityOut(**row.__dict__)


async def _may_link(conn: AsyncConnection, reader: Reader, ids: list[str]) -> list[str]:
    return await permissions.readable_subset(conn, reader, ids)


async def get_entity(conn: AsyncConnection, reader: Reader, entity_id: str) -> EntityOut:
    """``GET /api/entities/{id}``: the memory through the one read rule.

    Raises ``NotFound`` (404 "Entity not found") when absent or unreadable; a passage id is not
    a memory (read it with ``fetch_slice``).
    """
    row = await repo.get_entity(conn, reader_params=reader.params(), entity_id=entity_id)
    if row is None:
        raise NotFound()
    return EntityOut(**row.__dict__)


async def create_entity(
    conn: AsyncConnection, reader: Reader, body: EntityCreate, *, evidence_lines: int
) -> EntityOut:
    """Create a memory owned by ``reader``; returns it at revision 1.

    Raises ``BadRequest`` (bad id, type, name, scope/project combination, content over
    1,000,000 characters, declared spans that do not tile the body), ``NotFound`` ("Project not
    found"), ``Forbidden`` (placement not allowed, see :func:`permissions.check_placement`),
    ``Conflict`` (the id is taken in the org).
    """
    type_ = _type(body.type)
    entity_id = (
        write_rules.memory_id(body.id) if body.id is not None else f"{type_}_{secrets.token_hex(6)}"
    )
    project_id = _project(body.project)
    scope = body.scope or ("project" if project_id else "private")
    _check_scope(scope, project_id)
    await permissions.check_placement(conn, reader, scope=scope, project_id=project_id)
    if await repo.lock_new_id(conn, org_id=reader.org_id, entity_id=entity_id):
        raise Conflict(write_rules.ID_TAKEN)
    data = EntityData(
        id=entity_id,
        type=type_,
        name=memory_name(body.name),
        content=clean_text(body.content, field="content"),
        scope=scope,
        project_id=project_id,
        owner_id=reader.user_id,
        lifecycle=body.lifecycle,
        metadata=body.metadata,
        spans=[s.model_dump() for s in body.spans] if body.spans is not None else None,
    )

    async def may_link(ids: list[str]) -> list[str]:
        return await _may_link(conn, reader, ids)

    await save_entity(
        conn,
        org_id=reader.org_id,
        data=data,
        evidence_lines=evidence_lines,
        may_link=may_link,
    )
    return await _read_back(conn, reader, entity_id)


async def update_entity(
    conn: AsyncConnection,
    reader: Reader,
    entity_id: str,
    body: EntityPatch,
    *,
    if_match: list[int] | None,
    evidence_lines: int,
) -> EntityOut:
    """Change the fields of ``body`` that were sent; return the memory after the change.

    A body edit re-cuts in this transaction (new passage ids; old ones 404 in ``fetch_slice``)
    and re-derives mentions; any change bumps the revision; an identical PATCH changes nothing.
    A change of scope or project must be allowed at the destination (see
    :func:`permissions.check_placement`). Raises ``NotFound``, ``Forbidden``,
    ``PreconditionFailed`` (If-Match does not name the current revision) and ``BadRequest``.
    """
    permissions.require_read_scope(reader)  # the answer is the whole memory
    target = await permissions.writable_target(conn, reader, entity_id, lock="no_key_update")
    if if_match is not None and target.revision not in if_match:
        raise PreconditionFailed("The memory has changed: its revision is not the If-Match one")
    stored = await write_repo.lock_entity(conn, org_id=reader.org_id, entity_id=target.id)
    if stored is None:  # locked above in this transaction: cannot happen
        raise NotFound()
    sent = body.model_fields_set
    scope = body.scope or stored.scope
    if "project" in sent:
        project_id = _project(body.project)
    elif scope == "org":
        project_id = None
    else:
        project_id = stored.project_id
    _check_scope(scope, project_id)
    if scope == "private" and stored.scope != "private" and stored.owner_id != reader.user_id:
        # Made private, it would be readable by its owner (and grantees) only: an editor who is
        # not the owner would change it and lose it in the same breath. Refused, with why. A
        # memory imported without an owner has none to make it private: an editor who did so
        # would become its owner and take it from every other reader.
        raise Forbidden(PRIVATE_BY_OWNER)
    owner_id = (stored.owner_id or reader.user_id) if scope == "private" else stored.owner_id
    if (scope, project_id) != (stored.scope, stored.project_id):
        if not permissions.may_move(reader, target):
            raise Forbidden(permissions.NOT_MOVABLE)
        await permissions.check_placement(conn, reader, scope=scope, project_id=project_id)
    data = EntityData(
        id=target.id,
        type=_type(body.type) if body.type is not None else stored.type,
        name=memory_name(body.name) if body.name is not None else stored.name,
        content=(
            clean_text(body.content, field="content")
            if body.content is not None
            else stored.content
        ),
        scope=scope,
        project_id=project_id,
        owner_id=owner_id,
        lifecycle=body.lifecycle or stored.lifecycle,
        metadata=body.metadata if body.metadata is not None else stored.metadata,
        spans=[s.model_dump() for s in body.spans] if body.spans is not None else None,
    )

    async def may_link(ids: list[str]) -> list[str]:
        return await _may_link(conn, reader, ids)

    await save_entity(
        conn,
        org_id=reader.org_id,
        data=data,
        evidence_lines=evidence_lines,
        may_link=may_link,
    )
    return await _read_back(conn, reader, target.id)


async def delete_entity(
    conn: AsyncConnection, reader: Reader, entity_id: str, *, if_match: list[int] | None
) -> None:
    """Delete a memory with everything derived from it (passages, mentions, edges, grants,
    community memberships), retiring the word statistics that counted it. Raises ``NotFound``,
    ``Forbidden``, ``PreconditionFailed``."""
    target = await permissions.writable_target(conn, reader, entity_id)
    if if_match is not None and target.revision not in if_match:
        raise PreconditionFailed("The memory has changed: its revision is not the If-Match one")
    await write_rules.retire_communities(conn, org_id=reader.org_id, ids=[target.id])
    await write_rules.retire_term_stats(
        conn,
        org_id=reader.org_id,
        entity_id=target.id,
        scope=target.scope,
        project_id=target.project_id,
    )
    # a body link under an explicit (imported) mention of the same pair waits again too: the
    # mention row no longer says that the body links it (a breaker lost such a link for good)
    explicit = await repo.explicit_sources(conn, org_id=reader.org_id, entity_id=target.id)
    linked = [source for source, body in explicit if target.id in links(body)]
    await repo.delete_entity(conn, org_id=reader.org_id, entity_id=target.id, also_pending=linked)


async def _edge_targets(
    conn: AsyncConnection, reader: Reader, body: EdgeIn
) -> tuple[str, str, str]:
    """Validate an edge and authorize it; return (src, relationship, dst), rows locked."""
    src = _entity_id(body.src, field="src")
    dst = _entity_id(body.dst, field="dst")
    relationship = relationship_name(body.relationship)
    if src == dst:
        raise BadRequest("an edge may not point at its own source")
    target_write = relationship in permissions.TARGET_WRITE_RELATIONSHIPS
    if relationship == "SUPERSEDES":  # before any row lock: one lock order for every writer
        await repo.lock_supersedes(conn, org_id=reader.org_id)
    found = await permissions.load_targets(
        conn, reader, [src, dst], lock="no_key_update" if target_write else "share"
    )
    if src not in found or dst not in found:
        raise NotFound()
    if not permissions.may_write(reader, found[src]):
        raise Forbidden(permissions.NOT_WRITABLE)
    if target_write and not permissions.may_write(reader, found[dst]):
        raise Forbidden(f"{relationship} needs write access to its target too")
    return src, relationship, dst


async def create_edge(conn: AsyncConnection, reader: Reader, body: EdgeIn) -> EdgeOut:
    """``POST /api/edges``: write ``src -relationship-> dst`` once.

    Raises ``BadRequest`` (self-edge, bad names, a derived relationship), ``NotFound`` (either
    end absent or unreadable), ``Forbidden`` (source, or the target of SUPERSEDES/CONTRADICTS,
    not writable), ``Conflict`` (a SUPERSEDES cycle). A SUPERSEDES edge marks an active target
    superseded (``superseded`` names it).
    """
    src, relationship, dst = await _edge_targets(conn, reader, body)
    result = await write_rules.write_edge(
        conn,
        org_id=reader.org_id,
        src=src,
        relationship=relationship,
        dst=dst,
        reader_params=reader.params(),
    )
    return EdgeOut(
        src=src,
        relationship=relationship,
        dst=dst,
        created=result.created,
        superseded=result.superseded,
    )


async def delete_edge(conn: AsyncConnection, reader: Reader, body: EdgeIn) -> None:
    """``DELETE /api/edges``: remove one edge; permissions as for writing it. No lifecycle
    changes. Raises ``NotFound`` ("Edge not found" when both ends are readable but the edge
    does not exist), ``Forbidden``, ``BadRequest``."""
    src, relationship, dst = await _edge_targets(conn, reader, body)
    if not await write_rules.delete_edge(
        conn, org_id=reader.org_id, src=src, relationship=relationship, dst=dst
    ):
        raise NotFound("Edge not found")


ONLY_OWNER_SHARES = "Only the memory's owner may share it"


async def set_grant(
    conn: AsyncConnection,
    reader: Reader,
    entity_id: str,
    user_id: str,
    *,
    granted: bool,
    as_admin: bool = False,
) -> bool:
    """Grant (or revoke) read access to a memory for ``user_id`` of the reader's org; returns
    whether such a grant widens who reads the memory now (:func:`grant_in_effect`).

    Granting widens who reads a private memory: only its owner may (rule: write-permissions; an org
    admin holding a grant could otherwise re-share it through the admin route). Revoking narrows it:
    its owner, or with ``as_admin`` (an org owner/admin on an admin route) an admin who can read the
    memory themselves (nobody revokes what they cannot read). Raises ``NotFound`` (memory or user
    absent/unreadable, or no such grant to revoke), ``Forbidden``.
    """
    # NO KEY UPDATE: the grant trigger updates this row (migration 0015); two grants holding
    # SHARE would each wait for the other to release it (a deadlock, a 503 after the retries)
    found = await permissions.load_targets(conn, reader, [entity_id], lock="no_key_update")
    target = found.get(entity_id)
    if target is None:
        raise NotFound()
    owner = target.owner_id == reader.user_id
    if granted and not owner:
        raise Forbidden(ONLY_OWNER_SHARES)
    if not (owner or (as_admin and permissions.is_org_admin(reader))):
        raise Forbidden(ONLY_OWNER_SHARES + "; an org admin may revoke a grant on the admin route")
    user = user_id
    if not await user_in_org(conn, org_id=reader.org_id, user_id=user):
        raise NotFound("User not found")
    if granted:
        await insert_grant(conn, org_id=reader.org_id, entity_id=target.id, user_id=user)
    elif not await delete_grant(conn, org_id=reader.org_id, entity_id=target.id, user_id=user):
        raise NotFound("Grant not found")
    return grant_in_effect(target.scope, target.owner_id, user)


def grant_in_effect(scope: str, owner_id: str | None, user_id: str) -> bool:
    """Whether a grant of a memory of ``scope`` owned by ``owner_id`` to ``user_id`` widens who
    reads it: only a private memory is read through grants (rule: one-read-rule), and its owner
    reads it anyway. A grant on another memory is kept (it applies if the memory becomes
    private), and its answer says it changes nothing now."""
    return scope == "private" and owner_id != user_id
