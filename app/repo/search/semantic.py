"""``sibyl:search.semantic``: the semantic lane's statements (pgvector).

**Exact** (``sibyl:search.semantic``): every chunk vector of every memory the reader may read
that passes the request's filters (the read rule on the memory, its current revision only, by
the model in use) is
compared with the query's vector by cosine distance; each document (a passage, or a memory's own
document) keeps its nearest chunk; the ``:k`` nearest documents, then id. Rows the reader cannot
read are never compared, so they change nothing the reader sees.

**Index** (``sibyl:search.semantic_index``), for readers whose readable set is too large to
compare whole: the HNSW index's ``:ef`` nearest chunks of the org, then the read rule and the
filters on their memories. When fewer than ``:k`` readable documents come back, the caller runs
the exact statement instead (never a short page for a reader who sees little).

**Ready** (``sibyl:search.rerank_ready``), for the re-ranking stage: how many of the named
memories the reader may read have vectors of their current revision by the model in use (the
stage makes a query vector only when all have), and how many by another model (which no
serving process replaces: the stage's reason names it).

**Similarity** (``sibyl:search.rerank``), for the re-ranking stage: of each named memory the
reader may read, the greatest cosine similarity between the query's vector and a chunk vector of
its current revision by the model in use (its own document and its passages); a memory without
such vectors is left out. Only the named memories' vectors are read: no index, no other row.

**Coverage** (``sibyl:search.semantic_coverage``): of the reader's readable memories (not
retired), how many have vectors of their current revision by the model in use, and how many
vectors those are (what sizes the index path's ``:ef``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

# The request's filters on a chunk's memory row `t` (a passage document: `passage` in the types
# admits it whatever its memory's type).
_DOC_FILTER = """t.lifecycle = ANY(CAST(:lifecycles AS text[]))
      AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
      AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[]))
           OR (e.doc_id <> e.memory_id AND 'passage' = ANY(CAST(:types AS text[]))))"""

SEMANTIC_SQL = text(
    f"""/* sibyl:search.semantic */
WITH nearest AS (  -- per readable document, its nearest chunk
    SELECT e.doc_id, e.memory_id, t.type, min(e.embedding <=> CAST(:vector AS vector)) AS distance
    FROM entities t
    JOIN embedding_state s  -- vectors of the current revision, by the model in use
      ON s.org_id = t.org_id AND s.memory_id = t.id AND s.revision = t.revision
     AND s.model = :model
    JOIN embeddings e ON e.org_id = t.org_id AND e.memory_id = t.id AND e.revision = t.revision
    WHERE t.org_id = :r_org AND {readable("t")} AND {_DOC_FILTER}
    GROUP BY e.doc_id, e.memory_id, t.type
)
SELECT n.doc_id, n.memory_id, n.type, n.distance
FROM nearest n
ORDER BY n.distance, n.doc_id
LIMIT :k"""
)

TABLES_SQL = text(
    """/* sibyl:search.semantic_tables */
SELECT to_regclass('embeddings') IS NOT NULL AS tables"""
)

EF_SEARCH_SQL = text(
    """/* sibyl:search.semantic_ef */ SELECT set_config('hnsw.ef_search', :ef, true)"""
)

SEMANTIC_INDEX_SQL = text(
    f"""/* sibyl:search.semantic_index */
WITH near AS MATERIALIZED (  -- the index's nearest chunks of the org
    SELECT e.doc_id, e.memory_id, e.revision, e.embedding <=> CAST(:vector AS vector) AS distance
    FROM embeddings e
    WHERE e.org_id = :r_org
    ORDER BY e.embedding <=> CAST(:vector AS vector)
    LIMIT :ef
),
nearest AS (  -- those of readable memories passing the filters, per document its nearest
    SELECT e.doc_id, e.memory_id, t.type, min(e.distance) AS distance
    FROM near e
    JOIN entities t ON t.org_id = :r_org AND t.id = e.memory_id AND t.revision = e.revision
    JOIN embedding_state s
      ON s.org_id = t.org_id AND s.memory_id = t.id AND s.revision = t.revision
     AND s.model = :model
    WHERE {readable("t")} AND {_DOC_FILTER}
    GROUP BY e.doc_id, e.memory_id, t.type
)
SELECT n.doc_id, n.memory_id, n.type, n.distance
FROM nearest n
ORDER BY n.distance, n.doc_id
LIMIT :k"""
)

RERANK_SQL = text(
    f"""/* sibyl:search.rerank */
SELECT t.id AS memory_id, max(1 - (e.embedding <=> CAST(:vector AS vector))) AS similarity
FROM entities t
JOIN embedding_state s
  ON s.org_id = t.org_id AND s.memory_id = t.id AND s.revision = t.revision AND s.model = :model
JOIN embeddings e ON e.org_id = t.org_id AND e.memory_id = t.id AND e.revision = t.revision
WHERE t.org_id = :r_org AND t.id = ANY(CAST(:ids AS text[])) AND {readable("t")}
GROUP BY t.id"""
)

RERANK_READY_SQL = text(
    f"""/* sibyl:search.rerank_ready */
SELECT count(*) FILTER (WHERE s.model = :model) AS ready,
       count(*) FILTER (WHERE s.model <> :model) AS other,
       min(s.model) FILTER (WHERE s.model <> :model) AS other_model
FROM entities t
JOIN embedding_state s
  ON s.org_id = t.org_id AND s.memory_id = t.id AND s.revision = t.revision
WHERE t.org_id = :r_org AND t.id = ANY(CAST(:ids AS text[])) AND {readable("t")}"""
)

COVERAGE_SQL = text(
    f"""/* sibyl:search.semantic_coverage */
SELECT count(*) AS memories,
       count(*) FILTER (WHERE s.revision = t.revision AND s.model = :model) AS embedded,
       coalesce(sum(s.chunks) FILTER (WHERE s.revision = t.revision AND s.model = :model), 0)
           AS chunks
FROM entities t
LEFT JOIN embedding_state s ON s.org_id = t.org_id AND s.memory_id = t.id
WHERE t.org_id = :r_org AND t.lifecycle <> 'retired' AND {readable("t")}"""
)


@dataclass(frozen=True)
class Near:
    """One document the semantic lane found: its id, memory, memory type, cosine distance."""

    doc_id: str
    memory_id: str
    type: str
    distance: float


def vector_literal(vector: list[float]) -> str:
    """``vector`` as pgvector's text form (bound as a parameter, cast in the statement)."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


NO_PGVECTOR = "the database server has no pgvector"
"""Why vectors cannot be used where :func:`tables_present` is false (as answers and errors say
it)."""


async def tables_present(conn: AsyncConnection) -> bool:
    """Whether this database holds the semantic lane's tables."""
    return bool((await conn.execute(TABLES_SQL)).scalar())


async def nearest(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    vector: list[float],
    k: int,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    model: str,
    ef: int | None = None,
) -> list[Near]:
    """The ``k`` nearest readable documents: exactly (``ef`` None), or through the index's
    ``ef`` nearest chunks (:data:`SEMANTIC_INDEX_SQL`)."""
    params = {
        **reader_params,
        "vector": vector_literal(vector),
        "k": k,
        "types": types,
        "lifecycles": lifecycles,
        "project": project,
        "model": model,
    }
    if ef is None:
        rows = await conn.execute(SEMANTIC_SQL, params)
    else:
        await conn.execute(EF_SEARCH_SQL, {"ef": str(ef)})
        rows = await conn.execute(SEMANTIC_INDEX_SQL, {**params, "ef": ef})
    return [Near(r.doc_id, r.memory_id, r.type, float(r.distance)) for r in rows]


async def similarities(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    vector: list[float],
    memory_ids: list[str],
    model: str,
) -> dict[str, float]:
    """Memory id → the greatest cosine similarity (-1..1) of the query's ``vector`` with a chunk
    vector of that memory (:data:`RERANK_SQL`), for the ``memory_ids`` the reader may read that
    have vectors of their current revision by ``model``."""
    params = {
        **reader_params,
        "vector": vector_literal(vector),
        "ids": memory_ids,
        "model": model,
    }
    rows = await conn.execute(RERANK_SQL, params)
    return {r.memory_id: float(r.similarity) for r in rows}


@dataclass(frozen=True)
class Ready:
    """Of the memories asked about (that the reader may read): how many have current vectors by
    the model in use (``ready``), how many by another model (``other``, the first such model's
    name in ``other_model``)."""

    ready: int
    other: int
    other_model: str | None


async def with_vectors(
    conn: AsyncConnection, *, reader_params: dict[str, object], memory_ids: list[str], model: str
) -> Ready:
    """Which of ``memory_ids`` (the reader may read) have vectors of their current revision by
    ``model``, and by another model (:data:`RERANK_READY_SQL`)."""
    params = {**reader_params, "ids": memory_ids, "model": model}
    row = (await conn.execute(RERANK_READY_SQL, params)).one()
    return Ready(int(row.ready), int(row.other), row.other_model)


async def coverage(
    conn: AsyncConnection, *, reader_params: dict[str, object], model: str
) -> tuple[int, int, int]:
    """(readable memories, those with vectors of their current revision by ``model``, and the
    number of those vectors: chunks of every document of those memories)."""
    row = (await conn.execute(COVERAGE_SQL, {**reader_params, "model": model})).one()
    return int(row.memories), int(row.embedded), int(row.chunks)
