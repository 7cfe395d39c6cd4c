"""The semantic lane: documents whose meaning is nearest the query's (opt-in).

Vectors come from an offline model (:mod:`app.core.embedder`), one per chunk of a search
document (:mod:`app.domain.chunks`), written by the embedding worker after writes and imports
(:mod:`app.service.workers.embeddings`), never inside a read or a write. The lane (one
``sibyl:search.semantic`` statement, and ``sibyl:search.semantic_coverage`` at most every
:data:`COVERAGE_TTL_S` seconds per reader):

- runs only when :attr:`SearchSettings.semantic` is on, the model can run here and the database
  holds the lane's tables (pgvector); otherwise search is lexical and ``filters.lanes.semantic``
  says why;
- compares the query's vector with every readable chunk vector (exact under the read rule) when
  the reader's readable documents number at most :attr:`SearchSettings.semantic_exact_limit`,
  or are less than :attr:`SearchSettings.semantic_index_share` of the org's; otherwise the HNSW
  index's nearest first (as many as :func:`index_ef` expects to hold ``semantic_k`` readable
  documents with a margin), exactly again when they hold fewer;
- returns the ``semantic_k`` nearest documents as ranks; reports the share of the reader's
  memories whose vectors are current (``coverage``), the path taken and, on the index path,
  its ``ef``.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from array import array
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core import embedder as models
from app.core.reader import Reader
from app.domain.search.fuse import LaneHit
from app.domain.search.query import Filters, Query
from app.domain.search.settings import SearchSettings
from app.repo.search import semantic as semantic_repo

COVERAGE_TTL_S = 30.0
_coverage: dict[tuple[object, ...], tuple[float, tuple[int, int, int]]] = {}
_tables: dict[str, tuple[float, bool]] = {}


def _database(engine: AsyncEngine) -> str:
    return engine.url.render_as_string(hide_password=True)


async def _tables_present(conn: AsyncConnection, *, fresh: bool = False) -> bool:
    """Whether the database holds the lane's tables, asked once per database and process while
    they are there; a database without them is asked again after :data:`COVERAGE_TTL_S`
    seconds (``sibyl-pg semantic setup`` may have created them), not at every search.
    ``fresh``: ask now (the answer is kept)."""
    key = _database(conn.engine)
    now = time.monotonic()
    known = _tables.get(key)
    if fresh or known is None or (not known[1] and now - known[0] >= COVERAGE_TTL_S):
        known = (now, await semantic_repo.tables_present(conn))
        _tables[key] = known
    return known[1]


def known_usable(engine: AsyncEngine, embedder: str) -> bool:
    """Whether vectors of ``embedder`` are known, without a statement, to be usable on
    ``engine``'s database: the model runs here and this process has seen the lane's tables
    there (at start, or at a search). False when not known yet."""
    known = _tables.get(_database(engine))
    return models.available(embedder) is None and known is not None and known[1]


async def unavailable(conn: AsyncConnection, embedder: str, *, fresh: bool = False) -> str | None:
    """None when vectors of the model ``embedder`` can be used here (the model runs, the
    database holds the lane's tables), else why not, as ``filters`` and ``doctor`` say it.
    ``fresh``: ask the database now, not the per-process answer a search uses."""
    reason = models.available(embedder)
    if reason is not None:
        return reason
    present = await _tables_present(conn, fresh=fresh)
    return None if present else semantic_repo.NO_PGVECTOR


QUERY_ENCODERS = max(1, (os.cpu_count() or 2) // 2)
"""Threads that make query vectors (half the cores, at least one): a burst of searches queues
for them instead of running a model call per request at once, so the event loop and the
database keep the other cores (a model call per request starves the loop, and requests waiting
for a pooled connection time out)."""
QUERY_QUEUE_MAX = 16 * QUERY_ENCODERS
"""The most query vectors made or waiting at once (about half a second of a 2-core host's
work); a search that would need one more is answered without the re-ranking
(:func:`encoder_busy`: ``filters.rerank`` says so) rather than queue ever longer."""
_encoders = ThreadPoolExecutor(max_workers=QUERY_ENCODERS, thread_name_prefix="query-vector")
_encoding = 0  # query vectors being made or waiting for a thread


def encoder_busy(*, queue: bool = True) -> str | None:
    """Why no more query vectors are taken now, else None: :data:`QUERY_QUEUE_MAX` are being
    made or wait; with ``queue`` False (a search inside its transaction, holding a pooled
    connection), as soon as every :data:`QUERY_ENCODERS` thread is taken, so a connection never
    waits in the queue."""
    limit = QUERY_QUEUE_MAX if queue else QUERY_ENCODERS
    if _encoding >= limit:
        return f"the query model is busy ({_encoding} query vectors wait for it)"
    return None


QUERY_VECTORS_KEPT = 1024
"""Query vectors kept per process (about 3 KB each at 384 dimensions), most recent first."""
_query_vectors: OrderedDict[tuple[str, str, str, str], array[float]] = OrderedDict()


def _cache_key(model: str, text: str, reader: Reader) -> tuple[str, str, str, str]:
    # per reader (org and user): whether a text's vector is kept, which a faster answer would
    # tell, never says what another user searched
    return (reader.org_id, reader.user_id, model, text)


def has_query_vector(model: str, text: str, reader: Reader) -> bool:
    """Whether ``reader``'s vector of ``text`` by ``model`` is kept (:func:`query_vector` would
    not encode it again)."""
    return _cache_key(model, text, reader) in _query_vectors


async def query_vector(model: str, text: str, reader: Reader) -> list[float]:
    """The vector of a query's ``text`` by ``model``: encoded on one of the
    :data:`QUERY_ENCODERS` threads, the last
    :data:`QUERY_VECTORS_KEPT` kept per process, each for the ``reader`` who asked (org and
    user: a vector kept for one user answers faster, which must not tell another what was
    searched), so the semantic lane and the re-ranking of one search, and the search after
    :func:`app.service.search.search_for_key` made it ahead of its transaction, encode once."""
    global _encoding
    key = _cache_key(model, text, reader)
    kept = _query_vectors.get(key)
    if kept is None:
        encoder = models.embedder(model)
        loop = asyncio.get_running_loop()
        _encoding += 1
        try:
            encoded = await loop.run_in_executor(_encoders, encoder.encode, [text])
        finally:
            _encoding -= 1
        kept = array("d", encoded[0])
        _query_vectors[key] = kept
        while len(_query_vectors) > QUERY_VECTORS_KEPT:
            _query_vectors.popitem(last=False)
    _query_vectors.move_to_end(key)
    return list(kept)


async def _coverage_of(conn: AsyncConnection, reader: Reader, model: str) -> tuple[int, int, int]:
    key = (reader.org_id, reader.user_id, reader.readable_projects, reader.restricted, model)
    now = time.monotonic()
    hit = _coverage.get(key)
    if hit is not None and now - hit[0] < COVERAGE_TTL_S:
        return hit[1]
    found = await semantic_repo.coverage(conn, reader_params=reader.params(), model=model)
    if len(_coverage) > 4096:
        _coverage.clear()
    _coverage[key] = (now, found)
    return found


def index_ef(
    settings: SearchSettings,
    *,
    readable_documents: int,
    org_documents: int,
    memories: int,
    embedded: int,
    chunks: int,
) -> int:
    """How many of the org's nearest chunks the index path reads (HNSW ``ef_search``): enough
    that ``semantic_k`` readable documents are expected ``semantic_ef_margin`` times over, i.e.
    margin × k × (chunks per document) ÷ (the reader's share of the org's documents), between
    ``semantic_k`` and ``semantic_ef``. Chunks per document: the reader's vectors (``chunks``,
    of ``embedded`` of its ``memories``) over its documents with vectors (its
    ``readable_documents`` in the same proportion), at least 1. A reader of half the org whose
    documents have two chunks each reads 400; one of the whole org with one chunk each, 100.
    Fewer readable documents than ``semantic_k`` among them send the lane to the exact path,
    so the bound costs time, never rows."""
    k = settings.semantic_k
    share = readable_documents / org_documents if org_documents else 1.0
    with_vectors = readable_documents * (embedded / memories) if memories else 0.0
    per_document = max(chunks / with_vectors, 1.0) if with_vectors else 1.0
    wanted = math.ceil(settings.semantic_ef_margin * k * per_document / max(share, 1e-9))
    return max(k, min(wanted, settings.semantic_ef))


async def lane(
    conn: AsyncConnection,
    reader: Reader,
    query: Query,
    filters: Filters,
    settings: SearchSettings,
    *,
    readable_documents: int | None = None,
    org_documents: int | None = None,
) -> tuple[list[LaneHit] | None, dict[str, Any]]:
    """The lane's hits (None: it did not run) and its report for ``filters.lanes.semantic``.
    ``readable_documents`` and ``org_documents``: the reader's readable documents and the org's,
    by the counts (None: unknown, the exact path)."""
    if not settings.semantic:
        return None, {"ran": False, "reason": "off"}
    reason = await unavailable(conn, settings.embedder)
    if reason is not None:
        return None, {"ran": False, "reason": reason}
    model = models.embedder(settings.embedder)
    vector = await query_vector(settings.embedder, query.text, reader)
    memories, embedded, chunks = await _coverage_of(conn, reader, model.name)
    indexed = (
        readable_documents is not None
        and org_documents is not None
        and readable_documents > settings.semantic_exact_limit
        and readable_documents >= settings.semantic_index_share * org_documents
    )
    ask = {
        "reader_params": reader.params(),
        "vector": vector,
        "k": settings.semantic_k,
        "types": filters.types,
        "lifecycles": filters.lifecycles,
        "project": filters.project,
        "model": model.name,
    }
    ef = None
    if indexed:
        assert readable_documents is not None and org_documents is not None
        ef = index_ef(
            settings,
            readable_documents=readable_documents,
            org_documents=org_documents,
            memories=memories,
            embedded=embedded,
            chunks=chunks,
        )
    near = await semantic_repo.nearest(conn, **ask, ef=ef)  # type: ignore[arg-type]
    path = "index" if indexed else "exact"
    if indexed and len(near) < settings.semantic_k:
        near = await semantic_repo.nearest(conn, **ask)  # type: ignore[arg-type]
        path = "exact"
    hits = [
        LaneHit(n.doc_id, None if n.doc_id == n.memory_id else n.memory_id, n.type, rank)
        for rank, n in enumerate(near, start=1)
    ]
    return hits, {
        "ran": True,
        "model": model.name,
        "path": path,
        **({"ef": ef} if ef is not None else {}),
        "coverage": round(embedded / memories, 4) if memories else 1.0,
    }
