"""The embedding worker's statements: which memories need vectors, their texts, and storing the
vectors (the semantic lane's tables: :mod:`app.repo.semantic_schema`).

A memory is *due* when it is not retired and its ``embedding_state`` row is missing, names an
older revision, or another model. Its documents are its current passages and its own document
(its name; its body too when it was never cut). Vectors are stored per memory in one
transaction: the memory's old vectors deleted, the new ones inserted only if the memory is still
at the revision they were made from (an edit meanwhile leaves it due), its state row written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.search.semantic import vector_literal

DUE_SQL = text(
    """/* sibyl:embed.due */
SELECT t.org_id, t.id, t.revision
FROM entities t
LEFT JOIN embedding_state s ON s.org_id = t.org_id AND s.memory_id = t.id
WHERE t.lifecycle <> 'retired'
  AND (s.memory_id IS NULL OR s.revision <> t.revision OR s.model <> :model)
  AND (CAST(:orgs AS text[]) IS NULL OR t.org_id = ANY(CAST(:orgs AS text[])))
  AND NOT t.org_id = ANY(CAST(:skip_orgs AS text[]))
ORDER BY t.org_id, t.id
LIMIT :batch"""
)

DUE_COUNT_SQL = text(
    """/* sibyl:embed.due_count */
SELECT count(*) FILTER (WHERE s.memory_id IS NULL OR s.revision <> t.revision
                               OR s.model <> :model) AS due,
       count(*) AS memories
FROM entities t
LEFT JOIN embedding_state s ON s.org_id = t.org_id AND s.memory_id = t.id
WHERE t.lifecycle <> 'retired'
  AND (CAST(:orgs AS text[]) IS NULL OR t.org_id = ANY(CAST(:orgs AS text[])))"""
)

OTHER_MODELS_SQL = text(
    """/* sibyl:embed.other_models */
SELECT s.org_id, s.model, count(*) AS memories
FROM embedding_state s
JOIN entities t ON t.org_id = s.org_id AND t.id = s.memory_id AND t.revision = s.revision
WHERE s.model <> :model AND t.lifecycle <> 'retired'
  AND (CAST(:orgs AS text[]) IS NULL OR s.org_id = ANY(CAST(:orgs AS text[])))
GROUP BY s.org_id, s.model
ORDER BY s.org_id, s.model"""
)

KNOWN_ORGS_SQL = text(
    """/* sibyl:embed.known_orgs */
SELECT o.id FROM orgs o WHERE o.id = ANY(CAST(:orgs AS text[]))"""
)

DOCUMENTS_SQL = text(
    """/* sibyl:embed.documents */
SELECT t.org_id, t.id AS memory_id, t.revision, t.id AS doc_id, t.name,
       CASE WHEN t.passage_total = 0 THEN t.content ELSE '' END AS body, -1 AS passage_index
FROM unnest(CAST(:orgs AS text[]), CAST(:ids AS text[])) AS m(org_id, id)
JOIN entities t ON t.org_id = m.org_id AND t.id = m.id
UNION ALL
SELECT t.org_id, t.id, t.revision, p.id, NULL, p.content, p.passage_index
FROM unnest(CAST(:orgs AS text[]), CAST(:ids AS text[])) AS m(org_id, id)
JOIN entities t ON t.org_id = m.org_id AND t.id = m.id
JOIN passages p ON p.org_id = t.org_id AND p.parent_id = t.id AND p.parent_revision = t.revision
ORDER BY 1, 2, 7"""
)

CLEAR_SQL = text(
    """/* sibyl:embed.clear */
DELETE FROM embeddings WHERE org_id = :org_id AND memory_id = :memory_id"""
)

STORE_SQL = text(
    """/* sibyl:embed.store */
INSERT INTO embeddings (org_id, memory_id, revision, doc_id, chunk, embedding)
SELECT t.org_id, t.id, t.revision, x.doc_id, x.chunk, CAST(x.vector AS vector)
FROM entities t
CROSS JOIN unnest(CAST(:doc_ids AS text[]), CAST(:chunks AS int[]), CAST(:vectors AS text[]))
     AS x(doc_id, chunk, vector)
WHERE t.org_id = :org_id AND t.id = :memory_id AND t.revision = :revision"""
)

STATE_SQL = text(
    """/* sibyl:embed.state */
INSERT INTO embedding_state (org_id, memory_id, revision, model, chunks, embedded_at)
SELECT t.org_id, t.id, t.revision, :model, :count, now()
FROM entities t
WHERE t.org_id = :org_id AND t.id = :memory_id AND t.revision = :revision
ON CONFLICT (org_id, memory_id) DO UPDATE
SET revision = EXCLUDED.revision, model = EXCLUDED.model, chunks = EXCLUDED.chunks,
    embedded_at = EXCLUDED.embedded_at"""
)


@dataclass(frozen=True)
class Due:
    """A memory whose vectors are missing or stale."""

    org_id: str
    memory_id: str
    revision: int


@dataclass(frozen=True)
class Document:
    """One search document of a due memory: its memory's own (``name`` set) or a passage's."""

    org_id: str
    memory_id: str
    revision: int
    doc_id: str
    name: str | None
    body: str


async def due(
    conn: AsyncConnection,
    *,
    model: str,
    batch: int,
    orgs: list[str] | None = None,
    skip_orgs: Sequence[str] = (),
) -> list[Due]:
    """At most ``batch`` due memories of ``orgs`` (None: every org) but ``skip_orgs``, by org,
    then id."""
    rows = await conn.execute(
        DUE_SQL,
        {"model": model, "batch": batch, "orgs": orgs, "skip_orgs": list(skip_orgs)},
    )
    return [Due(r.org_id, r.id, int(r.revision)) for r in rows]


async def due_count(
    conn: AsyncConnection, *, model: str, orgs: list[str] | None = None
) -> tuple[int, int]:
    """(due memories, memories not retired) of ``orgs`` (None: every org)."""
    row = (await conn.execute(DUE_COUNT_SQL, {"model": model, "orgs": orgs})).one()
    return int(row.due), int(row.memories)


async def other_models(
    conn: AsyncConnection, *, model: str, orgs: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """Org → model name → how many of the org's memories (not retired) hold current vectors (of
    their revision) by that model, for every model but ``model``, over ``orgs`` (None: every
    org). Stale vectors count for no model: they are due whatever the model."""
    rows = await conn.execute(OTHER_MODELS_SQL, {"model": model, "orgs": orgs})
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        out.setdefault(r.org_id, {})[r.model] = int(r.memories)
    return out


async def known_orgs(conn: AsyncConnection, orgs: Sequence[str]) -> set[str]:
    """Which of ``orgs`` exist."""
    rows = await conn.execute(KNOWN_ORGS_SQL, {"orgs": list(orgs)})
    return set(rows.scalars())


async def documents(conn: AsyncConnection, memories: Sequence[Due]) -> list[Document]:
    """The documents of ``memories`` at their current revision, memory by memory."""
    if not memories:
        return []
    rows = await conn.execute(
        DOCUMENTS_SQL,
        {"orgs": [m.org_id for m in memories], "ids": [m.memory_id for m in memories]},
    )
    return [
        Document(r.org_id, r.memory_id, int(r.revision), r.doc_id, r.name, r.body or "")
        for r in rows
    ]


# A background write of one memory's vectors (a long PEP: a few hundred rows, each entering the
# HNSW index where there is one): bounded by the memory's size, not by a reader's timeout.
STORE_SETTINGS_SQL = text(
    """/* sibyl:embed.store_settings */ SET LOCAL statement_timeout = '120s'"""
)


async def store(
    conn: AsyncConnection,
    *,
    memory: Due,
    model: str,
    vectors: Sequence[tuple[str, int, list[float]]],
) -> None:
    """Replace ``memory``'s vectors with ``vectors`` (``(doc_id, chunk, vector)``) and record
    its state, both only if it is still at ``memory.revision``; in the caller's transaction."""
    p = {"org_id": memory.org_id, "memory_id": memory.memory_id, "revision": memory.revision}
    await conn.execute(STORE_SETTINGS_SQL)
    await conn.execute(CLEAR_SQL, p)
    if vectors:
        await conn.execute(
            STORE_SQL,
            {
                **p,
                "doc_ids": [d for d, _, _ in vectors],
                "chunks": [c for _, c, _ in vectors],
                "vectors": [vector_literal(v) for _, _, v in vectors],
            },
        )
    await conn.execute(STATE_SQL, {**p, "model": model, "count": len(vectors)})
