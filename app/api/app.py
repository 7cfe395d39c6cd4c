"""The FastAPI application: REST under ``/api``, health probes, OpenAPI at ``/docs``.

Errors are ``{"detail": ...}``: domain errors carry their status; database faults are 503 with
``Retry-After``; anything else is a 500 with a generic message (never SQL or a stack).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api import routes
from app.core.db import make_engine
from app.core.errors import DomainError, Unavailable
from app.core.settings import Settings, get_settings
from app.domain.session import as_unavailable

log = logging.getLogger("sibyl_pg")


def create_app(
    engine: AsyncEngine | None = None,
    *,
    settings: Settings | None = None,
    extra_lifespans: list[Any] | None = None,
) -> FastAPI:
    """Build the app. Without ``engine``, one is made at start-up from settings (the statement
    timeout of reads applies) and disposed at shutdown. ``extra_lifespans`` are async context
    manager factories taking the app (the MCP session manager uses one)."""
    s = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = engine is None
        app.state.engine = engine or make_engine(statement_timeout_ms=s.statement_timeout_ms)
        app.state.settings = s
        async with AsyncExitStack() as stack:
            for factory in extra_lifespans or []:
                await stack.enter_async_context(factory(app))
            try:
                yield
            finally:
                if owned:
                    await app.state.engine.dispose()

    app = FastAPI(
        title="sibyl-pg",
        version="0.1.0",
        summary="Relational-graph memory for AI agents, on PostgreSQL.",
        lifespan=lifespan,
    )
    if engine is not None:
        app.state.engine = engine
        app.state.settings = s

    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        headers = {}
        if isinstance(exc, Unavailable):
            headers["Retry-After"] = str(exc.retry_after)
        if exc.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=headers)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        mapped = as_unavailable(exc)
        if mapped is not None:
            return JSONResponse(
                {"detail": mapped.detail},
                status_code=503,
                headers={"Retry-After": str(mapped.retry_after)},
            )
        log.exception("internal error")
        return JSONResponse({"detail": "Internal server error"}, status_code=500)

    app.include_router(routes.health)
    app.include_router(routes.search)
    return app
