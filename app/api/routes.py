"""REST routes: thin translations of HTTP to the domain functions (rule:
same-verbs-both-surfaces)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.errors import documented
from app.core.reader import Reader
from app.domain.schemas import ExpandRequest, ExpandResponse, SliceRequest, SliceResponse
from app.domain.slice import fetch_slice
from app.service.expand import expand_keyed
from app.service.session import (
    NOT_READY_UNREACHABLE,
    readiness,
    run_read,
)

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

ERRORS = documented(
    {
        400: "Malformed input (blank id, bad name)",
        401: "Missing or invalid API key",
        404: "Absent or not readable (indistinguishable)",
        415: "A body sent without `Content-Type: application/json`",
        422: "The body does not fit the schema (missing, unknown or wrong-type field)",
        503: "Database unavailable or statement timeout; see Retry-After",
    }
)

health = APIRouter(tags=["health"])
search = APIRouter(prefix="/api/search", tags=["traversal"], responses=ERRORS)


def _engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def _key(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials else None


@health.get("/healthz")
async def healthz() -> dict[str, str]:
    """Process liveness: always ``{"status": "ok"}`` while the process serves requests."""
    return {"status": "ok"}


@health.get("/readyz", responses={503: {"description": "Not ready"}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the database answers and its schema is at the newest migration."""
    why = await readiness(_engine(request))
    if why is None:
        return JSONResponse({"status": "ready"})
    retry = "2" if why == NOT_READY_UNREACHABLE else "10"
    return JSONResponse(
        {"status": "unavailable", "detail": why}, status_code=503, headers={"Retry-After": retry}
    )


@search.post("/expand", response_model=ExpandResponse)
async def expand(body: ExpandRequest, request: Request, credentials: Credentials) -> Response:
    """``expand_neighbors``: the authorized graph neighborhood of up to 8 seeds (rule:
    walk-reference-semantics).

    Bounds are clamped, never rejected: depth 1-3 (default 1), limit 1-24 (default 8),
    content_max_chars 0-50000 (default 500); the applied values come back in ``depth``,
    ``limit`` and ``filters``. Seeds past 8 are returned in ``unresolved``. A blank seed or an
    empty list is a 400; a field of the wrong JSON type a 422.
    """

    # the response's JSON, encoded once by the service (FastAPI's response_model path would
    # build, validate and serialize the model again)
    body_json = await expand_keyed(
        _engine(request), _key(credentials), body, settings=request.app.state.settings
    )
    return Response(body_json, media_type="application/json")


@search.post("/slice", response_model=SliceResponse)
async def slice_(body: SliceRequest, request: Request, credentials: Credentials) -> SliceResponse:
    """``fetch_slice``: the window of spans of one memory, or around one span (rule: slice-window).

    window 1-64 (default 3) and content_max_chars 0-50000 (default 18000, one budget for the
    window) are clamped. Blank ``entity_id`` → 400; absent, denied, outside ``project`` or a span
    of an older revision → 404 ``{"detail": "Entity not found"}``. Cite ``parent_id``.
    """

    async def verb(conn: AsyncConnection, reader: Reader) -> SliceResponse:
        return await fetch_slice(conn, reader, body)

    return await run_read(_engine(request), _key(credentials), verb)
