"""``search`` for a key, as both adapters call it: the query's vector made before the search's
transaction, the search in one read-only snapshot (:func:`app.service.session.run_read`).

**Why the vector comes first.** The re-ranking stage (:mod:`app.domain.search.rerank`) asks for
the query's vector after the lexical lanes, inside the search's transaction. Encoding it costs
10-40 ms of CPU on a 2-core host; made there, a burst of searches would hold every pooled
connection while they queue for the CPU, and past the pool's wait the rest would be refused
(503). So where the search will likely need it (the re-ranking is on, this process
knows vectors are usable on the database, :func:`app.domain.search.semantic.known_usable`, and
:func:`app.domain.search.rerank.wants_query_vector`), the key is authenticated in a short
snapshot of its own, the vector is made with no connection held, and the search finds it kept
(:func:`app.domain.search.semantic.query_vector`). Only an authenticated key buys that CPU: a
request without a valid key is refused (401/403) before any vector is made, as before. The
search itself authenticates again in its own snapshot and decides, under the read rule, whether
the re-ranking runs; a vector made ahead and not used costs only CPU. Query vectors are made
on a few threads of their own and at most
:data:`~app.domain.search.semantic.QUERY_QUEUE_MAX` are made or wait at once: past that a
search is answered in the fused order, ``filters.rerank`` saying the model was busy. Where
vectors are not usable (no pgvector, no model, the re-ranking off) nothing changes: one
snapshot, no vector.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.errors import DomainError
from app.core.reader import Reader
from app.core.settings import Settings
from app.domain.schemas import SearchRequest, SearchResponse
from app.domain.search import normalize_query, search, search_settings
from app.domain.search import semantic as semantic_lane
from app.domain.search.rerank import wants_query_vector
from app.service.session import authenticate, require_key, run_read, run_snapshot


async def query_vector_ahead(
    engine: AsyncEngine, key: str | None, request: SearchRequest, settings: Settings | None
) -> bool:
    """Make the vector of ``request.query`` before the search's transaction, where the search
    will likely ask for it (see the module docstring). Returns whether one was made. Raises what
    :func:`app.service.session.run_read` raises for the key (``Unauthorized``, ``Forbidden``,
    ``Unavailable``); a query the search will refuse (400) is left to the search."""
    ss = search_settings(settings)
    if (
        not ss.rerank
        or not semantic_lane.known_usable(engine, ss.embedder)
        or semantic_lane.encoder_busy() is not None
    ):
        return False  # known without a statement: no vector, no second snapshot
    require_key(key)
    try:
        text = normalize_query(request.query, field="query")
    except DomainError:
        return False  # the search refuses it, after the key, as without this step

    async def check(conn: AsyncConnection) -> Reader | None:
        reader = await authenticate(conn, key, scope="read")
        if semantic_lane.has_query_vector(ss.embedder, text, reader):
            return None
        return reader if await wants_query_vector(conn, reader, text, ss) else None

    reader = await run_snapshot(engine, check)
    if reader is None:
        return False
    await semantic_lane.query_vector(ss.embedder, text, reader)
    return True


async def search_for_key(
    engine: AsyncEngine, key: str | None, request: SearchRequest, settings: Settings | None
) -> SearchResponse:
    """``search`` (:func:`app.domain.search.search`: shapes, bounds and errors there) for
    ``key``: the query's vector made first where it will likely be needed
    (:func:`query_vector_ahead`), then the search in one authenticated read-only snapshot."""
    await query_vector_ahead(engine, key, request, settings)

    async def verb(conn: AsyncConnection, reader: Reader) -> SearchResponse:
        return await search(conn, reader, request, settings=settings)

    return await run_read(engine, key, verb)
