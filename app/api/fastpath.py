"""The served path of ``POST /api/search/expand`` without the framework's per-request machinery
(rules: one-round-trip-expand, same-verbs-both-surfaces).

``expand`` is the verb agents call most, and a walk's database statement is short: FastAPI's
routing (a pattern match per route), its dependency solving, its body reader and Starlette's
request objects cost about as much Python as the verb itself (docs/benchmark.md).
:class:`ExpandFastPath` answers the ordinary request itself and hands every other one, byte for
byte, to the application, so the two cannot answer differently:

- taken here: ``POST`` to exactly ``/api/search/expand``, one ``Bearer`` key, one JSON media
  type and one declared ``Content-Length`` (the size limit, :class:`app.api.limits.BodyLimit`, wraps
  this middleware), a body that parses and fits :class:`ExpandRequest`. The verb is the very
  function the route calls (:func:`app.service.expand.expand_keyed`: one statement that
  authenticates, resolves the seeds and walks, the same for MCP); its refusals (401, 403, 400,
  503) are answered by :func:`app.api.errors.refusal`, the function of the application's own
  ``DomainError`` handler; any other exception goes up to the outermost handler as a route's
  would.
- handed on (the body replayed as it came): anything else, a body that does not parse or fit
  the schema included, so a 415, 422 or 401-before-422 comes from the route and its handlers
  exactly as before.

The route stays declared (``app.api.routes.expand``): it is what OpenAPI documents and what
answers the requests handed on.
"""

from __future__ import annotations

import orjson
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import refusal
from app.core.errors import DomainError
from app.domain.schemas import ExpandRequest
from app.service.expand import expand_keyed

PATH = "/api/search/expand"


class ExpandFastPath:
    """ASGI middleware: ``POST /api/search/expand`` answered without the framework (module
    docstring). Install it inside the size limit; it reads ``app.state.engine`` and
    ``app.state.settings`` of the application in the request's scope, as the route does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        key = _eligible(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:  # the client went away before its body was whole: nothing to answer
            return
        try:
            request = ExpandRequest.model_validate(orjson.loads(body))
        except (orjson.JSONDecodeError, ValidationError, TypeError):
            await self.app(scope, _replay(body, receive), send)
            return
        app = scope["app"]
        try:
            answer = await expand_keyed(app.state.engine, key, request, settings=app.state.settings)
        except DomainError as refused:
            await refusal(f"POST {PATH}", refused)(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-length", str(len(answer)).encode()),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def _eligible(scope: Scope) -> str | None:
    """The bearer key of a request this path may answer (one ``Authorization``, one JSON
    ``Content-Type``, one declared ``Content-Length``), else None: the application answers it.

    Where the application reads the first of several headers of a name (Starlette's
    ``headers.get``), a request with several is handed on, so the two can never read different
    keys or media types. The key is read by the route's own parser (FastAPI's ``HTTPBearer``); a
    media type is JSON as FastAPI's body reader decides (``email``'s parser: exactly one ``/``,
    ``application/json`` or ``application/*+json``)."""
    key: str | None = None
    media: bytes | None = None
    seen: set[bytes] = set()
    for name, value in scope["headers"]:
        if name in seen and name in _ONCE:
            return None
        seen.add(name)
        if name == b"authorization":
            scheme, credentials = get_authorization_scheme_param(value.decode("latin-1"))
            if scheme.lower() == "bearer" and credentials:
                key = credentials
        elif name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
        elif name == b"transfer-encoding":
            return None
    if key is None or media is None or b"content-length" not in seen or media.count(b"/") != 1:
        return None
    kind, subtype = media.split(b"/")
    is_json = kind == b"application" and (subtype == b"json" or subtype.endswith(b"+json"))
    return key if is_json else None


_ONCE = frozenset((b"authorization", b"content-type", b"content-length"))


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (None: the client disconnected first)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then whatever the connection says next."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
