"""MCP over streamable HTTP at ``/mcp``, inside the REST app, with the same keys (rule:
same-verbs-both-surfaces).

- **Auth.** :class:`BearerGate` wraps the transport: a request without a valid
  ``Authorization: Bearer <key>`` is refused with REST's own 401 (``{"detail": ...}``,
  ``WWW-Authenticate: Bearer``) before the MCP transport or any tool sees it; a database fault is
  REST's 503 with ``Retry-After``. Each tool call then authenticates the key again inside its own
  transaction (:func:`app.service.session.run_read`), exactly as a REST request does, so a key
  revoked mid-session is refused from its next call.
- **Mounting.** The route is exactly ``/mcp`` (a plain route, not a ``Mount``, so there is no
  ``/mcp`` → ``/mcp/`` redirect; ``/mcp/`` redirects to ``/mcp``, by a relative ``Location``).
  The SDK's session manager runs stateless with JSON responses: the verbs are stateless, so no
  session is kept between calls.
  Its task group must be started by the host's lifespan: :func:`mount_mcp` returns that lifespan.
- **DNS rebinding.** The transport checks ``Host`` (and ``Origin`` when a browser sends one):
  loopback names on any port are allowed, plus the hosts listed in ``SIBYL_MCP_ALLOWED_HOSTS``
  (comma separated; ``*`` turns the check off, e.g. behind a proxy that checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core import logs
from app.core.errors import DomainError, Forbidden, Unavailable
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.mcp.server import build_mcp
from app.mcp.toolkit import EngineProvider, bearer_token, http_bearer_key
from app.service.session import run_read

MCP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The transport's Host/Origin allow-list: loopback names plus ``SIBYL_MCP_ALLOWED_HOSTS``."""
    extra = [h.strip() for h in settings.mcp_allowed_hosts.split(",") if h.strip()]
    if "*" in extra:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = [*LOOPBACK_HOSTS, *extra]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for n in names for pattern in (n, f"{n}:*")],
        allowed_origins=[
            pattern
            for n in names
            for scheme in ("http", "https")
            for pattern in (f"{scheme}://{n}", f"{scheme}://{n}:*")
        ],
    )


def refusal(error: DomainError) -> JSONResponse:
    """The HTTP answer REST gives for ``error``: ``{"detail": ...}`` with its status and headers."""
    headers: dict[str, str] = {}
    if isinstance(error, Unavailable):
        headers["Retry-After"] = str(error.retry_after)
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"detail": error.detail}, status_code=error.status, headers=headers)


async def _key_is_valid(conn: AsyncConnection, reader: Reader) -> None:
    """Nothing to do: :func:`run_read` has authenticated the key before calling this."""


class BearerGate:
    """ASGI wrapper refusing an HTTP request whose bearer key is missing or invalid (401).

    A valid key lacking the ``read`` scope passes the gate: each tool states what it needs.
    """

    def __init__(self, app: ASGIApp, engine: EngineProvider) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the key of an HTTP request, then hand it to the transport."""
        if scope["type"] == "http":
            key = bearer_token(Headers(scope=scope).get("authorization"))
            try:
                await run_read(self.engine(), key, _key_is_valid)
            except Forbidden:
                pass
            except DomainError as error:
                logs.refused("MCP over HTTP", error)
                await refusal(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mount_mcp(
    app: Starlette, *, settings: Settings | None = None
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """Serve MCP over streamable HTTP at ``/mcp`` on ``app`` (engine: ``app.state.engine``).

    Returns the lifespan factory that runs the SDK's session manager; the host must enter it in
    its own lifespan, after ``app.state.engine`` is set (``create_app`` does).
    """
    s = settings or get_settings()

    def engine() -> AsyncEngine:
        current: AsyncEngine = app.state.engine
        return current

    server = build_mcp(engine, http_bearer_key, settings=s)
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(s),
    )
    manager = server.session_manager
    gate = BearerGate(manager.handle_request, engine)
    app.router.routes.append(Route(MCP_PATH, endpoint=gate, include_in_schema=False))
    # clients configured with "/mcp/" are sent to "/mcp" by a relative Location (the app's
    # redirect_slashes is off: it built the Location from the caller's Host header)
    app.router.routes.append(
        Route(
            MCP_PATH + "/",
            endpoint=lambda _request: RedirectResponse(MCP_PATH, status_code=307),
            methods=["GET", "POST", "DELETE"],
            include_in_schema=False,
        )
    )
    return lambda _app: manager.run()
