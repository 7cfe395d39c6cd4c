"""ASGI middlewares of the REST surface: the request-body size limit (larger bodies get 413 before
any parsing), hidden admin paths, HEAD answered as GET."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.domain.permissions import ADMIN_HIDDEN


class BodyTooLarge(Exception):
    """Raised from ``receive`` when a streamed body passes the limit."""


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with ``413 {"detail": ...}``.

    A declared ``Content-Length`` over the limit is refused at once; a streamed body is counted
    as it arrives and refused when it passes the limit. The framework's body reader may catch
    the exception raised then and answer 400 for a body it could not parse: that answer is
    replaced by the 413.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False
        too_large = False

        async def counted() -> Message:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_large = True
                    raise BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if too_large:  # the app answered a body cut short: the answer is the 413
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"detail": f"Request body is larger than {self.max_bytes} bytes"},
            separators=(",", ":"),  # byte for byte as every other error body (JSONResponse)
        ).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


ADMIN_PREFIX = "/api/admin/"
"""Paths of the admin routes, which answer every non-admin caller as if they did not exist."""


class HiddenAdmin:
    """A path under ``/api/admin`` that ends in ``/`` answers ``404 {"detail": "Not found"}``,
    like an unknown admin route, instead of the router's 307 redirect to the route without it
    (a breaker told the explain and doctor routes apart this way). The other ways to tell them
    apart are closed in :mod:`app.api.app` (405 and 422 there are 404 for non-admins) and in
    the routes (the key is checked before the rest of a request is read)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith(ADMIN_PREFIX) and path.endswith("/"):
            await JSONResponse({"detail": ADMIN_HIDDEN}, status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


HEAD_PATHS = ("/api/", "/healthz", "/readyz")
"""Where ``HEAD`` is answered as ``GET`` (:class:`HeadAsGet`): every REST route and the probes,
not ``/mcp``, whose ``GET`` opens a server-sent event stream."""


class HeadAsGet:
    """``HEAD`` answers as ``GET`` would, with the same status and headers (``ETag``,
    ``Content-Length`` of the body it would send) and no body (RFC 9110 §9.3.2: a server that
    answers ``GET`` answers ``HEAD``). FastAPI routes take only the methods they declare, so
    ``HEAD /api/entities/{id}`` was a 405. The route, its key check and its read rule are the
    ``GET`` route's own: a memory the reader cannot read is the same 404 as one that does not
    exist. A path whose route takes no ``GET`` stays a 405 (or, under ``/api/admin``, the
    admin routes' 404)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if (
            scope["type"] != "http"
            or scope["method"] != "HEAD"
            or not scope.get("path", "").startswith(HEAD_PATHS)
        ):
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
