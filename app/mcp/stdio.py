"""MCP over stdio (``sibyl-pg mcp``): one agent, one reader, the key in ``SIBYL_PG_API_KEY``.

Standard output carries the protocol and nothing else: anything a dependency prints while the
database is located (the embedded server's start-up) is sent to standard error instead.
"""

from __future__ import annotations

import contextlib
import sys

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.db import database_url, make_engine
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.mcp.server import build_mcp, fixed_key
from app.service.session import run_read
from app.service.workers import communities as community_refresher
from app.service.workers import search_stats as refresher

KEY_VARIABLE = "SIBYL_PG_API_KEY"


async def _nothing(conn: AsyncConnection, reader: Reader) -> None:
    """Nothing to do: :func:`run_read` has authenticated the key before calling this."""


async def serve_stdio(key: str, *, settings: Settings | None = None) -> None:
    """Serve the MCP tools over stdin/stdout as the reader of ``key`` until stdin closes.

    The key is checked once before serving, so a wrong key fails fast: raises ``Unauthorized``
    (unknown or revoked key), ``Forbidden`` (no ``read`` scope) or ``Unavailable`` (database).
    Every tool call authenticates it again, as REST does per request.
    """
    s = settings or get_settings()
    with contextlib.redirect_stdout(sys.stderr):
        url = database_url(s)
    engine = make_engine(url, statement_timeout_ms=s.statement_timeout_ms, settings=s)
    try:
        await run_read(engine, key, _nothing)
        server = build_mcp(lambda: engine, fixed_key(key), settings=s)
        # the search word statistics recounted when out of date
        # (app/service/workers/search_stats.py), and communities retired by writes rebuilt
        # (app/service/workers/communities.py)
        async with (
            refresher.lifespan(engine, s.stats_refresh_s),
            community_refresher.lifespan(
                engine, s.communities_refresh_s, s.communities_auto_max_links
            ),
        ):
            await server.run_stdio_async()
    finally:
        await engine.dispose()
