"""Admin REST routes for operators (contract §10): ``POST /api/admin/explain/{verb}`` and
``GET /api/admin/doctor`` (issue 14).

For any key without the ``admin`` scope (and for no key at all) these routes do not exist: they
answer 404 ``{"detail": "Not found"}``, exactly like an unknown verb.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.errors import documented
from app.domain.doctor import DoctorReport, doctor_for_key
from app.domain.explain import ExplainReport, explain_for_key

_bearer = HTTPBearer(auto_error=False, description="An API key with the `admin` scope")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

admin = APIRouter(
    prefix="/api/admin",
    tags=["admin"],
    responses=documented(
        {
            404: "Not an admin key, or an unknown verb (indistinguishable)",
            422: "The body is not a valid request of the verb",
            503: "Database unavailable or statement timeout; see Retry-After",
        }
    ),
)


@admin.post("/explain/{verb}", response_model=ExplainReport)
async def explain(
    verb: str,
    request: Request,
    credentials: Credentials,
    body: Annotated[Any, Body(description="The verb's own request body (a JSON object)")] = None,
    format: Annotated[
        Literal["text", "json"], Query(description="Plan as EXPLAIN text lines, or FORMAT JSON")
    ] = "text",
    generic: Annotated[
        bool, Query(description="Show the generic (parameter-blind) plan instead of the custom one")
    ] = False,
) -> ExplainReport:
    """The exact SQL a request of ``verb`` (``expand``, ``slice``, ``search``) sends, the values
    it binds, and ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement, read as the key's user.

    The verb runs for real in a read-only transaction that is rolled back. Plans count rows
    before the read rule filters them, which is why only ``admin`` keys may see them.
    """
    engine: AsyncEngine = request.app.state.engine
    try:
        return await explain_for_key(
            engine,
            credentials.credentials if credentials else None,
            verb,
            body,
            fmt=format,
            mode="generic" if generic else "custom",
            settings=request.app.state.settings,
        )
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None


@admin.get("/doctor", response_model=DoctorReport)
async def doctor(request: Request, credentials: Credentials) -> DoctorReport:
    """The health of the PostgreSQL server the service uses (``sibyl-pg doctor``'s checks):
    settings, extensions, index validity, visibility-map coverage and statistics freshness of
    the walk's tables, migrations, each with what to change and why (docs/doctor.md).

    Org admin view: server-wide settings and the health of the shared tables, but no size, page
    or row count (those would count other orgs' rows).
    """
    engine: AsyncEngine = request.app.state.engine
    return await doctor_for_key(engine, credentials.credentials if credentials else None)
