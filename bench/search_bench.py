"""``sibyl-pg bench search``: search's own targets beside the walk benchmark (docs/benchmark.md).

1. **The semantic lane at scale** (where the server has pgvector: the embedded PostgreSQL 16):
   every document of the benchmark org gets one vector (a deterministic random unit vector
   per document, written with ``COPY``; the cost of the lane does not depend on what the
   vectors mean), the HNSW index is built, and search's two questions (the common word and the
   six-word question) are asked with the semantic lane on (the ``hashing`` embedder for the
   query): database time and buffers, as ``bench run`` measures the lexical lanes.
2. **Exact for a restricted reader**: a key restricted to one project gets the semantic lane's
   answer as served (the lane alone: no lexical lane, no promotion, which adds a neighbour of a
   result by its edge), compared with the exact statement's (every readable vector compared).
3. **One LoCoMo question end to end over REST** (lexical: the service's defaults with the
   re-ranking off, ``SIBYL_SEARCH_RERANK=false``): the five
   conversations imported into the same database (their own org), ``sibyl-pg serve`` started,
   every question asked once in turn on one keep-alive connection; p50/p95 of the round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.core.db import make_engine, read_tx
from app.core.embedder import DIMENSIONS, HASHING
from app.core.settings import get_settings
from bench.generate import COMMON_TERM
from bench.run import (
    SEARCH_QUESTION,
    Sample,
    _mint_key,
    _revoke_key,
    measure_calls,
    serving,
    summarize,
)

Log = Callable[[str], None]
VECTOR_BATCH = 20_000


def _unit_vector(doc_id: str) -> bytes:
    """pgvector's binary form of a deterministic random unit vector of ``doc_id``."""
    import numpy as np

    seed = int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "big")
    v = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(">f4")
    v /= np.linalg.norm(v)
    return struct.pack(">HH", DIMENSIONS, 0) + v.tobytes()


async def ensure_vectors(url: str, org: str, log: Log) -> bool:
    """Give every current document of ``org`` one vector (model ``hashing``) and build the HNSW
    index; False when the server has no pgvector. Skips what is there already."""
    conn = await asyncpg.connect(url)
    try:
        if not await conn.fetchval("SELECT to_regclass('embeddings') IS NOT NULL"):
            return False
        due = await conn.fetchval(
            """SELECT count(*) FROM entities t
               LEFT JOIN embedding_state s ON s.org_id = t.org_id AND s.memory_id = t.id
               WHERE t.org_id = $1 AND (s.memory_id IS NULL OR s.revision <> t.revision
                                        OR s.model <> $2)""",
            org,
            HASHING,
        )
        if not due:
            log("semantic: every document of the org has its vector")
            return True
        await conn.set_type_codec(
            "vector",
            encoder=lambda b: b,
            decoder=lambda b: b,
            format="binary",
            schema="public",
        )
        started = time.perf_counter()
        await conn.execute("DROP INDEX IF EXISTS ix_embeddings_hnsw")
        await conn.execute("DELETE FROM embeddings WHERE org_id = $1", org)
        await conn.execute("DELETE FROM embedding_state WHERE org_id = $1", org)
        docs = await conn.fetch(
            """SELECT t.id AS memory_id, t.revision, t.id AS doc_id FROM entities t
               WHERE t.org_id = $1
               UNION ALL
               SELECT t.id, t.revision, p.id FROM passages p
               JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
                              AND p.parent_revision = t.revision
               WHERE p.org_id = $1""",
            org,
        )
        log(f"semantic: writing {len(docs):,} vectors (COPY)")
        for at in range(0, len(docs), VECTOR_BATCH):
            batch = docs[at : at + VECTOR_BATCH]
            await conn.copy_records_to_table(
                "embeddings",
                records=[
                    (org, d["memory_id"], d["revision"], d["doc_id"], 0, _unit_vector(d["doc_id"]))
                    for d in batch
                ],
                columns=["org_id", "memory_id", "revision", "doc_id", "chunk", "embedding"],
            )
        await conn.execute(  # a memory's vectors: one per document (itself, its passages)
            """INSERT INTO embedding_state (org_id, memory_id, revision, model, chunks)
               SELECT e.org_id, e.memory_id, min(e.revision), $2, count(*)
               FROM embeddings e WHERE e.org_id = $1
               GROUP BY e.org_id, e.memory_id""",
            org,
            HASHING,
        )
        log(f"semantic: vectors written in {time.perf_counter() - started:.0f} s; building HNSW")
        built = time.perf_counter()
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 2")
        await conn.execute(
            "CREATE INDEX ix_embeddings_hnsw ON embeddings USING hnsw (embedding vector_cosine_ops)"
        )
        await conn.execute("VACUUM (ANALYZE) embeddings, embedding_state")
        log(f"semantic: index built in {time.perf_counter() - built:.0f} s")
        return True
    finally:
        await conn.close()


async def measure_semantic(
    url: str, org: str, reader_user: str, restricted_project: str, samples: int, log: Log
) -> dict[str, Any]:
    """Search's two questions with the semantic lane on, and the restricted reader's check."""
    from app.domain.schemas import SearchRequest
    from app.domain.search import SearchSettings, search
    from app.domain.search import semantic as semantic_lane
    from app.repo.readers import reader_by_user
    from app.repo.search import semantic as semantic_repo

    settings = get_settings()
    pipeline = SearchSettings(semantic=True, embedder=HASHING)
    engine = make_engine(url, statement_timeout_ms=settings.statement_timeout_ms)
    out: dict[str, Any] = {}
    try:
        async with engine.connect() as conn:
            reader = await reader_by_user(conn, user_id=reader_user)
            restricted = await reader_by_user(
                conn, user_id=reader_user, key_projects=[restricted_project]
            )
        assert reader is not None and restricted is not None
        for label, query in (("common", COMMON_TERM), ("question", SEARCH_QUESTION)):

            async def verb(conn: Any, query: str = query) -> Any:
                return await search(conn, reader, SearchRequest(query=query), pipeline=pipeline)

            found: list[Sample] = await measure_calls(
                engine,
                [verb] * (samples + 3),
                timeout_ms=settings.statement_timeout_ms,
                auto_explain=False,
                budget_s=30.0,
            )
            async with read_tx(engine) as conn:
                answer = await verb(conn)
            out[label] = {
                "query": query,
                "lane": answer.filters["lanes"]["semantic"],
                **summarize(found, settings.statement_timeout_ms),
            }
            log(
                f"search {query!r} with the semantic lane: db p50 {out[label]['db_ms']['p50']} ms,"
                f" {out[label]['lane']}"
            )
        # the restricted reader: the lane as served against the exact statement (the lane's
        # own rows: without promotion, which would add a neighbour of a result by its edge)
        async with read_tx(engine) as conn:
            served = await search(
                conn,
                restricted,
                SearchRequest(query=SEARCH_QUESTION, limit=50),
                pipeline=pipeline.replace(fulltext=False, exact=False, promote=False),
            )
            vector = (
                await asyncio.to_thread(
                    semantic_lane.models.embedder(HASHING).encode, [SEARCH_QUESTION]
                )
            )[0]
            exact = await semantic_repo.nearest(
                conn,
                reader_params=restricted.params(),
                vector=vector,
                k=pipeline.semantic_k,
                types=None,
                lifecycles=["active", "superseded"],
                project=None,
                model=HASHING,
            )
        served_ids = [r.id for r in served.results]
        exact_memories = list(dict.fromkeys(n.memory_id for n in exact))
        out["restricted"] = {
            "project": restricted_project,
            "path": served.filters["lanes"]["semantic"].get("path"),
            "rows": len(served_ids),
            "equal_to_exact": [r.parent_entity_id or r.id for r in served.results]
            == exact_memories[: len(served_ids)],
        }
        log(f"semantic lane, reader restricted to {restricted_project}: {out['restricted']}")
        return out
    finally:
        await engine.dispose()


def measure_locomo_rest(url: str, folder: Path, log: Log, out_dir: Path) -> dict[str, Any]:
    """Import the LoCoMo conversations (once), serve, ask every question over REST."""
    from app.importers import ndjson
    from app.repo import term_stats
    from evaluation import locomo

    sessions, questions = locomo.load(folder)

    async def load() -> None:
        engine = make_engine(url)
        try:
            async with engine.connect() as conn:
                from sqlalchemy import text

                n = (
                    await conn.execute(
                        text("SELECT count(*) FROM entities WHERE org_id = :o"), {"o": locomo.ORG}
                    )
                ).scalar_one()
            if not n:
                records = list(locomo.records(sessions))
                await ndjson.import_records(engine, ndjson.from_dicts(records), total=len(records))
                await term_stats.refresh_orgs(engine, [locomo.ORG])
        finally:
            await engine.dispose()

    asyncio.run(load())
    key_id, key = _mint_key(url, locomo.READER)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        lexical = {"SIBYL_SEARCH_RERANK": "false"}  # the figure is the lexical one
        with serving(url, out_dir / "server-locomo.log", lexical) as (base, _):
            load_one = os.getloadavg()
            times: list[float] = []
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
                for q in questions[:5]:  # warm-up
                    http.post("/api/search", json={"query": q.question, "limit": 10})
                for q in questions:
                    started = time.perf_counter()
                    r = http.post("/api/search", json={"query": q.question, "limit": 10})
                    times.append((time.perf_counter() - started) * 1000)
                    r.raise_for_status()
            times.sort()
            result = {
                "questions": len(times),
                "p50_ms": round(times[len(times) // 2], 2),
                "p95_ms": round(times[int(len(times) * 0.95)], 2),
                "load_average": [round(x, 2) for x in (load_one[0], os.getloadavg()[0])],
            }
            log(f"LoCoMo over REST: {result}")
            return result
    finally:
        _revoke_key(url, key_id)


def write(results: dict[str, Any], out_dir: Path) -> Path:
    """Write ``results`` as ``search.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "search.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path
