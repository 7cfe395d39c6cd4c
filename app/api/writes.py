"""REST routes that write (rules: write-permissions, one-write-path): entities, edges, grants, and
the admin directory (users, projects, members, grants, API keys). Thin adapters over
:mod:`app.domain.entities` and :mod:`app.domain.directory`.

Each request is one transaction committed before the answer (:func:`run_write`; ``GET`` uses
:func:`run_read`). Entity answers carry ``ETag: "<revision>"``; send it back as ``If-Match`` on
``PATCH``/``DELETE`` (a mismatch is 412 and nothing changes; without ``If-Match`` the last
write wins). The admin routes answer 404 ``{"detail": "Not found"}`` to every key that is not an
org owner's or admin's unrestricted ``admin`` key, as if they did not exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.errors import documented
from app.core.errors import BadRequest, Forbidden, NotFound, Unauthorized
from app.core.reader import Reader
from app.domain import directory
from app.domain import entities as verbs
from app.domain.write_schemas import (
    EdgeIn,
    EdgeOut,
    EntityCreate,
    EntityOut,
    EntityPatch,
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
from app.service.session import run_read, run_write

T = TypeVar("T")

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description='The revision you last read, e.g. `"3"` (the `ETag`): 412 if it changed.',
    ),
]

WRITE_ERRORS = documented(
    {
        400: "Malformed value (id, type, name, spans, self-edge), with the reason",
        401: "Missing or invalid API key",
        403: "Key without the `write` scope, or readable but not writable",
        404: "Absent or not readable (indistinguishable)",
        409: "Id taken, SUPERSEDES cycle, or a directory row still in use",
        412: "If-Match does not name the current revision; nothing changed",
        415: "A body sent without `Content-Type: application/json`",
        422: "The body does not fit the schema (missing, unknown or wrong-type field, or a value "
        "outside the listed choices)",
        503: "Database unavailable or statement timeout; see Retry-After",
    }
)
ADMIN_ERRORS = documented(
    {
        400: "Malformed value, with the reason",
        403: "Above the admin's own org role",
        404: "Not an admin key (the route does not exist), or no such row",
        409: "Id taken, or the row is still in use",
        415: "A body sent without `Content-Type: application/json`",
        422: "The body does not fit the schema (missing, unknown or wrong-type field, or a value "
        "outside the listed choices)",
        503: "Database unavailable or statement timeout; see Retry-After",
    }
)

entities = APIRouter(prefix="/api", tags=["writes"], responses=WRITE_ERRORS)
admin = APIRouter(prefix="/api/admin", tags=["admin"], responses=ADMIN_ERRORS)
router = APIRouter()


def _engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def _key(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials else None


def _evidence_lines(request: Request) -> int:
    lines: int = request.app.state.settings.evidence_lines
    return lines


async def _write(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    verb: Callable[[AsyncConnection, Reader], Awaitable[T]],
) -> T:
    return await run_write(_engine(request), _key(credentials), verb)


async def _admin(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    verb: Callable[[AsyncConnection, Reader], Awaitable[T]],
) -> T:
    """Run an admin verb; a key that fails authentication as ``admin`` gets the 404 of a
    route that does not exist."""
    entered = False

    async def guarded(conn: AsyncConnection, reader: Reader) -> T:
        nonlocal entered
        entered = True
        return await verb(conn, reader)

    try:
        return await run_write(_engine(request), _key(credentials), guarded, scope="admin")
    except (Unauthorized, Forbidden):
        if entered:
            raise
        raise NotFound(directory.HIDDEN) from None


def _tagged(response: Response, entity: EntityOut) -> EntityOut:
    response.headers["ETag"] = verbs.etag(entity.revision)
    return entity


# --- entities ----------------------------------------------------------------------------------


@entities.post("/entities", status_code=201, response_model=EntityOut)
async def create_entity(
    body: EntityCreate, request: Request, response: Response, credentials: Credentials
) -> EntityOut:
    """Create a memory owned by the key's user (needs the `write` scope).

    Placement: `project` scope needs `contributor` (or higher) in the project; `org` scope needs
    an org role above viewer; a project-restricted key writes only inside its projects. The
    body is cut into passages (rule: span-bound) and `[[entity_id]]` links become mentions (only to
    memories you can read), in the same transaction. 201 with the memory and its `ETag`.
    """

    async def verb(conn: AsyncConnection, reader: Reader) -> EntityOut:
        return await verbs.create_entity(
            conn, reader, body, evidence_lines=_evidence_lines(request)
        )

    return _tagged(response, await _write(request, credentials, verb))


@entities.get("/entities/{entity_id}", response_model=EntityOut)
async def get_entity(
    entity_id: str, request: Request, response: Response, credentials: Credentials
) -> EntityOut:
    """One memory with its full body, through the one read rule (rule: one-read-rule); `ETag` = its
    revision.

    404 `{"detail": "Entity not found"}` when absent or not readable (indistinguishable).
    """

    async def verb(conn: AsyncConnection, reader: Reader) -> EntityOut:
        return await verbs.get_entity(conn, reader, entity_id)

    return _tagged(response, await run_read(_engine(request), _key(credentials), verb))


@entities.patch("/entities/{entity_id}", response_model=EntityOut)
async def update_entity(
    entity_id: str,
    body: EntityPatch,
    request: Request,
    response: Response,
    credentials: Credentials,
    if_match: IfMatch = None,
) -> EntityOut:
    """Change a memory: only the fields sent (`project: null` takes it out of its project, with
    `scope` `org` or `private` in the same request: a project-scoped memory needs one; `metadata`
    is replaced whole; `lifecycle` marks it superseded or retired).

    A body change re-cuts its passages in the same transaction (old passage ids then 404) and
    re-derives its mentions; every change bumps `revision`. With `If-Match` a stale revision is
    412 and nothing changes; without it the last write wins. A new scope or project must be
    writable by you.
    """
    expected = verbs.parse_if_match(if_match)

    async def verb(conn: AsyncConnection, reader: Reader) -> EntityOut:
        return await verbs.update_entity(
            conn,
            reader,
            entity_id,
            body,
            if_match=expected,
            evidence_lines=_evidence_lines(request),
        )

    return _tagged(response, await _write(request, credentials, verb))


@entities.delete("/entities/{entity_id}", status_code=204)
async def delete_entity(
    entity_id: str, request: Request, credentials: Credentials, if_match: IfMatch = None
) -> Response:
    """Delete a memory with its passages, mentions, edges, grants and community memberships."""
    expected = verbs.parse_if_match(if_match)

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await verbs.delete_entity(conn, reader, entity_id, if_match=expected)

    await _write(request, credentials, verb)
    return Response(status_code=204)


@entities.put("/entities/{entity_id}/grants/{user_id}", response_model=GrantOut)
async def grant(
    entity_id: str, user_id: str, request: Request, credentials: Credentials
) -> GrantOut:
    """Share your private memory with a user of your org (read access). Owner only.

    ``in_effect`` says whether the grant widens who reads it now: false on a project or org
    memory (kept: it applies if the memory becomes private) and for its owner."""

    async def verb(conn: AsyncConnection, reader: Reader) -> GrantOut:
        in_effect = await verbs.set_grant(conn, reader, entity_id, user_id, granted=True)
        return GrantOut(entity_id=entity_id, user_id=user_id, in_effect=in_effect)

    return await _write(request, credentials, verb)


@entities.delete("/entities/{entity_id}/grants/{user_id}", status_code=204)
async def ungrant(
    entity_id: str, user_id: str, request: Request, credentials: Credentials
) -> Response:
    """Stop sharing your private memory with a user. Owner only."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await verbs.set_grant(conn, reader, entity_id, user_id, granted=False)

    await _write(request, credentials, verb)
    return Response(status_code=204)


# --- edges -------------------------------------------------------------------------------------


@entities.post(
    "/edges",
    status_code=201,
    response_model=EdgeOut,
    responses={200: {"description": "The edge already existed; nothing was written"}},
)
async def create_edge(
    body: EdgeIn, request: Request, response: Response, credentials: Credentials
) -> EdgeOut:
    """Write `src -relationship-> dst` (dependent → dependency, newer → older).

    Needs write access to `src` and read access to `dst` (write access for SUPERSEDES and
    CONTRADICTS). 201 when written, 200 when it already existed. A self-edge is 400, a
    SUPERSEDES cycle 409. `A SUPERSEDES B` marks an active `B` superseded.
    """

    async def verb(conn: AsyncConnection, reader: Reader) -> EdgeOut:
        return await verbs.create_edge(conn, reader, body)

    edge = await _write(request, credentials, verb)
    if not edge.created:
        response.status_code = 200
    return edge


EDGE_PARAMETERS = frozenset({"src", "relationship", "dst"})


@entities.delete("/edges", status_code=204)
async def delete_edge(
    request: Request,
    credentials: Credentials,
    src: Annotated[str, Query(description="Source memory id")],
    relationship: Annotated[str, Query(description="Relationship name")],
    dst: Annotated[str, Query(description="Target memory id")],
) -> Response:
    """Delete the edge `src -relationship-> dst` (same permissions as writing it). Lifecycles
    are left as they are. 404 "Edge not found" when there is no such edge. 400 when a
    parameter is given twice or an unknown one is given: a delete removes the one edge named,
    never a guess at it (`dst=a&dst=b` deleted the edge to `b`)."""
    body = EdgeIn(src=src, relationship=relationship, dst=dst)
    given = request.query_params
    repeated = sorted({k for k in given if len(given.getlist(k)) > 1} & EDGE_PARAMETERS)
    unknown = set(given) - EDGE_PARAMETERS

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        if repeated:  # checked after the key, as every refusal is
            raise BadRequest(
                f"give each of src, relationship and dst once ({', '.join(repeated)} repeated)"
            )
        if unknown:
            raise BadRequest("only src, relationship and dst are parameters of this delete")
        await verbs.delete_edge(conn, reader, body)

    await _write(request, credentials, verb)
    return Response(status_code=204)


# --- admin: users ------------------------------------------------------------------------------


@admin.get("/users", response_model=list[UserOut])
async def list_users(request: Request, credentials: Credentials) -> list[UserOut]:
    """Every user of your org."""

    async def verb(conn: AsyncConnection, reader: Reader) -> list[UserOut]:
        return await directory.list_users(conn, reader)

    return await _admin(request, credentials, verb)


@admin.post("/users", status_code=201, response_model=UserOut)
async def create_user(body: UserIn, request: Request, credentials: Credentials) -> UserOut:
    """Add a user to your org (id minted). An org admin cannot create owners."""

    async def verb(conn: AsyncConnection, reader: Reader) -> UserOut:
        return await directory.create_user(conn, reader, body)

    return await _admin(request, credentials, verb)


@admin.patch("/users/{user_id}", response_model=UserOut)
async def update_user(
    user_id: str, body: UserPatch, request: Request, credentials: Credentials
) -> UserOut:
    """Change a user's handle or org role."""

    async def verb(conn: AsyncConnection, reader: Reader) -> UserOut:
        return await directory.update_user(conn, reader, user_id, body)

    return await _admin(request, credentials, verb)


@admin.delete("/users/{user_id}", status_code=204)
async def delete_user(user_id: str, request: Request, credentials: Credentials) -> Response:
    """Delete a user with their keys, memberships and grants (409 while they own memories)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await directory.delete_user(conn, reader, user_id)

    await _admin(request, credentials, verb)
    return Response(status_code=204)


# --- admin: projects and members ---------------------------------------------------------------


@admin.get("/projects", response_model=list[ProjectOut])
async def list_projects(request: Request, credentials: Credentials) -> list[ProjectOut]:
    """Every project of your org."""

    async def verb(conn: AsyncConnection, reader: Reader) -> list[ProjectOut]:
        return await directory.list_projects(conn, reader)

    return await _admin(request, credentials, verb)


@admin.post("/projects", status_code=201, response_model=ProjectOut)
async def create_project(body: ProjectIn, request: Request, credentials: Credentials) -> ProjectOut:
    """Add a project (`private`: members only; `org`: every org member reads it)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> ProjectOut:
        return await directory.create_project(conn, reader, body)

    return await _admin(request, credentials, verb)


@admin.patch("/projects/{project_id}", response_model=ProjectOut)
async def update_project(
    project_id: str, body: ProjectPatch, request: Request, credentials: Credentials
) -> ProjectOut:
    """Rename a project or change its visibility."""

    async def verb(conn: AsyncConnection, reader: Reader) -> ProjectOut:
        return await directory.update_project(conn, reader, project_id, body)

    return await _admin(request, credentials, verb)


@admin.delete("/projects/{project_id}", status_code=204)
async def delete_project(project_id: str, request: Request, credentials: Credentials) -> Response:
    """Delete an empty project (409 while it holds memories)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await directory.delete_project(conn, reader, project_id)

    await _admin(request, credentials, verb)
    return Response(status_code=204)


@admin.get("/projects/{project_id}/members", response_model=list[MemberOut])
async def list_members(
    project_id: str, request: Request, credentials: Credentials
) -> list[MemberOut]:
    """The members of a project and their roles."""

    async def verb(conn: AsyncConnection, reader: Reader) -> list[MemberOut]:
        return await directory.list_members(conn, reader, project_id)

    return await _admin(request, credentials, verb)


@admin.put("/projects/{project_id}/members/{user_id}", response_model=MemberOut)
async def set_member(
    project_id: str, user_id: str, body: MemberIn, request: Request, credentials: Credentials
) -> MemberOut:
    """Add a user to a project, or change their role (viewer < contributor < maintainer <
    owner; contributor and above write)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> MemberOut:
        return await directory.set_member(conn, reader, project_id, user_id, body)

    return await _admin(request, credentials, verb)


@admin.delete("/projects/{project_id}/members/{user_id}", status_code=204)
async def remove_member(
    project_id: str, user_id: str, request: Request, credentials: Credentials
) -> Response:
    """Remove a user from a project."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await directory.remove_member(conn, reader, project_id, user_id)

    await _admin(request, credentials, verb)
    return Response(status_code=204)


# --- admin: grants -----------------------------------------------------------------------------


@admin.get("/entities/{entity_id}/grants", response_model=list[GrantOut])
async def list_grants(entity_id: str, request: Request, credentials: Credentials) -> list[GrantOut]:
    """The users a memory is shared with (the memory must be readable by you)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> list[GrantOut]:
        return await directory.list_grants(conn, reader, entity_id)

    return await _admin(request, credentials, verb)


@admin.put("/entities/{entity_id}/grants/{user_id}", response_model=GrantOut)
async def admin_grant(
    entity_id: str, user_id: str, request: Request, credentials: Credentials
) -> GrantOut:
    """Share a memory you own with a user of your org (403 for a memory you can read but do not
    own: only its owner widens its readers; the same rule as `PUT /api/entities/{id}/grants`)."""

    async def verb(conn: AsyncConnection, reader: Reader) -> GrantOut:
        return await directory.admin_grant(conn, reader, entity_id, user_id, granted=True)

    return await _admin(request, credentials, verb)


@admin.delete("/entities/{entity_id}/grants/{user_id}", status_code=204)
async def admin_ungrant(
    entity_id: str, user_id: str, request: Request, credentials: Credentials
) -> Response:
    """Revoke a grant on a memory you can read."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await directory.admin_grant(conn, reader, entity_id, user_id, granted=False)

    await _admin(request, credentials, verb)
    return Response(status_code=204)


# --- admin: API keys ---------------------------------------------------------------------------


@admin.get("/keys", response_model=list[KeyOut])
async def list_keys(
    request: Request,
    credentials: Credentials,
    user: Annotated[str | None, Query(description="Only this user's keys")] = None,
    include_revoked: Annotated[bool, Query(description="Also list revoked keys")] = False,
) -> list[KeyOut]:
    """The keys of your org: id, user, scopes, projects, label, created, revoked; never the
    secret."""

    async def verb(conn: AsyncConnection, reader: Reader) -> list[KeyOut]:
        return await directory.list_keys(
            conn, reader, user_id=user, include_revoked=include_revoked
        )

    return await _admin(request, credentials, verb)


@admin.post("/keys", status_code=201, response_model=KeyCreated)
async def create_key(body: KeyIn, request: Request, credentials: Credentials) -> KeyCreated:
    """Mint a key for your own user, with no scope your key lacks; `key` is shown in this answer
    only. 403 for another user of your org (a key would read their private memories: the
    operator mints it, `sibyl-pg keys create --user`), 404 for a user outside it."""

    async def verb(conn: AsyncConnection, reader: Reader) -> KeyCreated:
        return await directory.create_key(conn, reader, body)

    return await _admin(request, credentials, verb)


@admin.delete("/keys/{key_id}", status_code=204)
async def revoke_key(key_id: str, request: Request, credentials: Credentials) -> Response:
    """Revoke a key of your org; it is refused from its next request on."""

    async def verb(conn: AsyncConnection, reader: Reader) -> None:
        await directory.revoke_key(conn, reader, key_id)

    await _admin(request, credentials, verb)
    return Response(status_code=204)


router.include_router(entities)
router.include_router(admin)
