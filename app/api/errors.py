"""The one error body of every REST route (README, "Errors").

Every error answer, whatever the route and the status, is ``{"detail": "<message>"}``: one
string written for the caller. A 422 (the body or query does not fit the published schema) adds
``errors``, one ``{"loc", "msg", "type"}`` per reason, never the rejected value. Statuses:
400 a value the schema allows but a rule refuses, 401 no valid key, 403 readable but not
writable, 404 absent or not readable (the same answer), 409 conflict, 412 stale ``If-Match``,
413 body too large, 415 a body sent as another media type than JSON, 422 wrong shape,
503 database unavailable (``Retry-After``), 500 a bug (generic message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.core import logs
from app.core.errors import DomainError, Unavailable, shape_errors, shape_message

NOT_JSON = "The request body must be JSON, sent with Content-Type: application/json"
"""The 415 of a body sent under another media type (``text/plain``, a form)."""


class ShapeErrorOut(BaseModel):
    """One reason a request does not fit its schema."""

    loc: list[str | int] = Field(description='Where: e.g. ["body", "depth"] or ["query", "src"]')
    msg: str = Field(description="Why, in words")
    type: str = Field(description="pydantic's error type, e.g. int_type, missing, extra_forbidden")


class ErrorBody(BaseModel):
    """The body of every error answer."""

    detail: str = Field(description="What went wrong, for a person or a model to read")
    errors: list[ShapeErrorOut] | None = Field(
        default=None, description="422 only: each reason the payload does not fit its schema"
    )


def documented(errors: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for statuses → descriptions, each with the :class:`ErrorBody` body."""
    return {status: {"model": ErrorBody, "description": text} for status, text in errors.items()}


def invalid_payload(errors: Sequence[Mapping[str, Any]]) -> JSONResponse:
    """The 422 answer for pydantic's ``errors``: a one-line ``detail`` and the ``errors`` list,
    without the rejected values."""
    shaped = shape_errors(errors)
    return JSONResponse({"detail": shape_message(shaped), "errors": shaped}, status_code=422)


def refusal(where: str, exc: DomainError) -> JSONResponse:
    """The answer to a refused request (``exc``: 400, 401, 403, 404, 409, 412, 503, ...): its
    status and ``{"detail"}``, ``WWW-Authenticate: Bearer`` on a 401, ``Retry-After`` on a 503;
    logged once as refused at ``where`` (``"POST /api/..."``). The application's handler of
    ``DomainError`` and the expand path without the framework (:mod:`app.api.fastpath`) both
    answer with it."""
    logs.refused(where, exc)
    headers = {}
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(exc.retry_after)
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=headers)
