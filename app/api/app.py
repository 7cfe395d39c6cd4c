"""The FastAPI application: REST under ``/api``, MCP at ``/mcp``, the memory explorer at ``/ui``,
health probes, OpenAPI at ``/docs``.

Every error is ``{"detail": "<message>"}`` (plus ``errors`` on a 422; app/api/errors.py): domain
errors carry their status; database faults are 503 with ``Retry-After``; anything else is a 500
with a generic message (never SQL or a stack).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api import admin, retrieval, routes, writes
from app.api.docs import mount_docs
from app.api.errors import NOT_JSON, invalid_payload, refusal
from app.api.fastpath import ExpandFastPath
from app.api.limits import ADMIN_PREFIX, BodyLimit, HeadAsGet, HiddenAdmin
from app.core import logs
from app.core.db import make_engine
from app.core.errors import DomainError, Unauthorized
from app.core.settings import Settings, get_settings
from app.domain.directory import HIDDEN
from app.mcp.http import mount_mcp
from app.service.session import admin_for_key, map_fault, require_key
from app.service.workers import communities as community_refresher
from app.service.workers import embeddings
from app.service.workers import search_stats as refresher
from app.ui import mount_ui


def create_app(
    engine: AsyncEngine | None = None,
    *,
    settings: Settings | None = None,
    extra_lifespans: list[Any] | None = None,
) -> FastAPI:
    """Build the app. Without ``engine``, one is made at start-up from settings (the statement
    timeout of reads applies) and disposed at shutdown. ``extra_lifespans`` are async context
    manager factories taking the app, entered after the MCP session manager (``/mcp``)."""
    s = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = engine is None
        app.state.engine = engine or make_engine(
            statement_timeout_ms=s.statement_timeout_ms, settings=s
        )
        app.state.settings = s
        try:
            async with AsyncExitStack() as stack:
                for factory in [mcp_lifespan, *(extra_lifespans or [])]:
                    await stack.enter_async_context(factory(app))
                # the search word statistics recounted when out of date
                # (app/service/workers/search_stats.py)
                await stack.enter_async_context(
                    refresher.lifespan(app.state.engine, s.stats_refresh_s)
                )
                # vectors of the semantic lane and the re-ranking, when either is on
                # (app/service/workers/embeddings.py)
                await stack.enter_async_context(
                    embeddings.lifespan(
                        app.state.engine,
                        s.embed_interval_s if s.search_semantic or s.search_rerank else 0,
                        s.embedder,
                    )
                )
                if s.search_semantic or s.search_rerank:  # before /readyz says ready
                    await embeddings.warm_query_model(app.state.engine, s.embedder)
                # communities retired by writes rebuilt (app/service/workers/communities.py)
                await stack.enter_async_context(
                    community_refresher.lifespan(
                        app.state.engine, s.communities_refresh_s, s.communities_auto_max_links
                    )
                )
                yield
        finally:  # after every part above has stopped (the refresher's task included)
            if owned:
                await app.state.engine.dispose()

    app = FastAPI(
        title="sibyl-pg",
        version="0.1.0",
        summary="Relational-graph memory for AI agents, on PostgreSQL.",
        lifespan=lifespan,
        # no 307 to the same path without its trailing slash: that redirect is built from the
        # caller's Host header and answered before authentication (rule: hidden-is-absent); a
        # path the service does not serve is a 404
        redirect_slashes=False,
        docs_url=None,  # /docs and /redoc from bundled assets, not a CDN (app/api/docs.py)
        redoc_url=None,
    )
    if engine is not None:
        app.state.engine = engine
        app.state.settings = s

    @app.exception_handler(RequestValidationError)
    async def _shape(request: Request, exc: RequestValidationError) -> JSONResponse:
        # 422 for a payload of the wrong shape, in the one error body (app/api/errors.py). The
        # caller's input is not echoed back (it may be an id, or not even JSON-encodable, e.g.
        # NaN): location, message and type only. Every /api route needs a key: without one the
        # answer is the 401, as it comes before a 400 (and over MCP, before any argument check).
        if request.url.path.startswith(ADMIN_PREFIX) and not await _is_admin(request):
            return JSONResponse({"detail": HIDDEN}, status_code=404)  # the route is not theirs
        if request.url.path.startswith("/api/"):
            try:
                require_key(_bearer(request))
            except Unauthorized as missing:
                return await _domain(request, missing)
            if _not_json(request):
                return JSONResponse({"detail": NOT_JSON}, status_code=415)
        return invalid_payload(exc.errors())

    def _not_json(request: Request) -> bool:
        """Whether the request sent a body without a JSON media type: ``text/plain``, a form
        (what ``curl -d`` sends without ``-H 'Content-Type: application/json'``) or no
        ``Content-Type`` at all. FastAPI reads such a body as bytes (its strict content type)
        and says "Input should be a valid dictionary", which names no cause.
        ``application/json`` and any ``application/*+json`` are JSON."""
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        sent = request.headers.get("content-length", "0") != "0" or (
            "transfer-encoding" in request.headers
        )
        is_json = media == "application/json" or (
            media.startswith("application/") and media.endswith("+json")
        )
        return sent and not is_json

    def _bearer(request: Request) -> str | None:
        """The request's bearer key (None: none sent)."""
        scheme, key = get_authorization_scheme_param(request.headers.get("authorization"))
        return key if scheme.lower() == "bearer" else None

    async def _is_admin(request: Request) -> bool:
        """Whether the request's key may use the /api/admin routes (a database fault: no)."""
        try:
            await admin_for_key(request.app.state.engine, _bearer(request))
        except DomainError:
            return False
        return True

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # An unknown route (404) or method (405): the one body, and a 404 worded exactly as
        # the admin routes answer a key that may not see them, so the two cannot be told apart;
        # a method an admin route does not take is that 404 too, but for an admin key.
        if (
            exc.status_code == 405
            and request.url.path.startswith(ADMIN_PREFIX)
            and not await _is_admin(request)
        ):
            return JSONResponse({"detail": HIDDEN}, status_code=404)
        detail = HIDDEN if exc.status_code == 404 else str(exc.detail)
        return JSONResponse(
            {"detail": detail}, status_code=exc.status_code, headers=exc.headers or None
        )

    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        return refusal(f"{request.method} {request.url.path}", exc)

    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        mapped = map_fault(exc)  # bad text → 400, database fault → 503, as in run_read
        if mapped is not None:
            return await _domain(request, mapped)
        logs.internal(f"{request.method} {request.url.path}", exc)
        return JSONResponse({"detail": "Internal server error"}, status_code=500)

    app.include_router(routes.health)
    app.include_router(routes.search)
    app.include_router(retrieval.router)  # POST /api/search, POST /api/context/pack
    app.include_router(admin.admin)  # /api/admin/explain/{verb}, admin keys only
    app.include_router(writes.router)  # /api/entities, /api/edges, /api/admin/{users,...}
    mcp_lifespan = mount_mcp(app, settings=s)  # MCP over streamable HTTP at /mcp, same keys
    mount_ui(app)  # the memory explorer at /ui: a static page calling the routes above
    mount_docs(app)  # /docs and /redoc, their scripts served from here (app/api/docs.py)
    # innermost: POST /api/search/expand answered without the framework's routing, dependencies
    # and body reader; every other request, and any it cannot take, goes on unchanged
    app.add_middleware(ExpandFastPath)
    app.add_middleware(HiddenAdmin)  # /api/admin/...: a trailing slash is a 404, not a 307
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes)
    app.add_middleware(HeadAsGet)  # HEAD is GET without its body (RFC 9110 §9.3.2)
    # outermost: an exception no handler took is answered here, logged once (Starlette's own
    # server-error handler would answer and raise it again, and the server log it a second time)
    app.add_middleware(Unhandled, answer=_internal)
    return app


class Unhandled:
    """ASGI middleware answering an exception no handler took with ``answer`` (a 400, 503 or
    500 in the one error body, logged once), instead of letting it reach the server."""

    def __init__(
        self, app: Any, answer: Callable[[Request, Exception], Awaitable[JSONResponse]]
    ) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass the request on; answer any exception raised before the response started."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:  # part of the answer is sent: nothing else can be said
                logs.internal(f"{scope.get('method')} {scope.get('path')}", exc)
                return
            response = await self.answer(Request(scope, receive), exc)
            await response(scope, receive, send)
