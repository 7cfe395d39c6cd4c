"""Admin REST routes for operators (rule: explain-what-is-sent): ``POST /api/admin/explain/{verb}``
and ``GET /api/admin/doctor`` (rule: doctor-on-every-server).

For any key without the ``admin`` scope (and for no key at all) these routes do not exist: they
answer 404 ``{"detail": "Not found"}``, exactly like an unknown verb.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.errors import documented
from app.service.doctor import DoctorReport, doctor_for_key
from app.service.explain import ExplainReport, explain_for_key
from app.service.session import admin_for_key

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


class ExplainOptions(BaseModel):
    """The explain route's query parameters, validated only once the key is an admin's."""

    model_config = ConfigDict(extra="ignore")
    format: Literal["text", "json"] = "text"
    generic: bool = False


_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "description": "The verb's own request body (a JSON object)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


async def _json_body(request: Request) -> Any:
    """The request's JSON body (None when empty); a body that is not JSON is a 422 in the shape
    FastAPI gives (location and message, never the input)."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "input": {}}]
        ) from None


@admin.post("/explain/{verb}", response_model=ExplainReport, openapi_extra=_BODY_DOC)
async def explain(
    verb: str,
    request: Request,
    credentials: Credentials,
    format: Annotated[
        str | None,
        Query(
            description="Plan as EXPLAIN text lines (`text`, default), or FORMAT JSON (`json`)",
            json_schema_extra={"enum": ["text", "json"]},
        ),
    ] = None,
    generic: Annotated[
        str | None,
        Query(
            description="`true`: the generic (parameter-blind) plan instead of the custom one",
            json_schema_extra={"type": "boolean"},
        ),
    ] = None,
) -> ExplainReport:
    """The exact SQL a request of ``verb`` (``expand``, ``slice``, ``search``) sends, the values
    it binds and a psql script per statement, read as the key's user. No plan (`figures:
    "none"`, `plan: null`): PostgreSQL counts, times, estimates and chooses a plan's nodes from
    every org's rows in the database; ``EXPLAIN (ANALYZE, BUFFERS)`` where the operator set
    ``SIBYL_REST_EXPLAIN=measured`` (one org per database), and always from ``sibyl-pg explain``.

    The verb runs for real in a read-only transaction that is rolled back. Only ``admin`` keys
    of org owners and admins may use the route. The key
    is checked first: for anyone else the route answers 404 whatever the query or body (422s
    for them only once the key may use the route).
    """
    engine: AsyncEngine = request.app.state.engine
    key = credentials.credentials if credentials else None
    await admin_for_key(engine, key)
    try:
        given = {"format": format, "generic": generic}
        options = ExplainOptions.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in error.errors()]
        ) from None
    body = await _json_body(request)
    try:
        return await explain_for_key(
            engine,
            key,
            verb,
            body,
            fmt=options.format,
            mode="generic" if options.generic else "custom",
            settings=request.app.state.settings,
        )
    except ValidationError as error:  # the verb's request is the body: located as on its route
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors()]
        ) from None


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
