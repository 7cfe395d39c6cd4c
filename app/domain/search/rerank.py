"""Re-ranking of the fused head by meaning: the first :attr:`SearchSettings.rerank_top`
memories of the folded order, re-ordered by a blend of their BM25 and their nearest chunk's
cosine similarity with the query.

score(m) = w × bm25(m) / (the head's greatest bm25) + (1 − w) × similarity(m), w =
:attr:`SearchSettings.rerank_weight`; bm25 is the memory's best hit's text rank (0 without a
full-text match); similarity is the greatest cosine of the query's vector with a chunk vector of
the memory's current revision (its own document or a passage: ``sibyl:search.rerank``).

- A hit of the exact lane keeps its place (the query names it); the others fill the remaining
  places of the head, best score first (ties: the fused order). Rows past the head keep theirs.
- Only the head's own vectors are read, under the read rule: no index, no other memory's
  vector, so what a reader may not read changes nothing in their order.
- It runs where the model and pgvector are there and every memory of the head has vectors of its
  current revision by the model in use (``sibyl:search.rerank_ready``, before any query vector
  is made), and the query's vector is made or can be (under a burst, at most
  :data:`~app.domain.search.semantic.QUERY_QUEUE_MAX` wait for the model); otherwise the fused
  order stands and ``filters.rerank`` says why.

On by default (:attr:`SearchSettings.rerank`, ``SIBYL_SEARCH_RERANK``): it pays on the PEPs and
on LoCoMo and costs nothing on the clean PEP set (``docs/eval.md``, the ablation table).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import embedder as models
from app.core.reader import Reader
from app.domain import terms
from app.domain.search import semantic
from app.domain.search.fuse import EXACT, Folded
from app.domain.search.query import Query
from app.domain.search.settings import SearchSettings
from app.repo import search as search_repo
from app.repo.search import semantic as semantic_repo

SHORT_OF_VECTORS_S = 30.0
"""How long an org whose head lacked vectors for half its memories or more is not worth a query
vector made ahead."""
_short_of_vectors: dict[tuple[str, str], float] = {}


async def wants_query_vector(
    conn: AsyncConnection, reader: Reader, text: str, settings: SearchSettings
) -> bool:
    """Whether a search of ``text`` (normalised) by ``reader`` will likely ask for the query's
    vector, so that :func:`app.service.search.search_for_key` may make it before the search's
    transaction (a pooled connection is then not held while the model runs). The caller has
    checked, without a statement, that the re-ranking is on and vectors are usable here
    (:func:`app.domain.search.semantic.known_usable`). Likely when, besides: the query model is
    still not busy (:func:`app.domain.search.semantic.encoder_busy`); the org's last head in the
    past :data:`SHORT_OF_VECTORS_S` seconds did not lack vectors for half its memories or more
    (as while the worker writes an import's first vectors); and, by the reader's own word counts
    (``sibyl:search.words``), some word of the query is in a document the reader reads, or the
    counts are not current (a query no readable document holds a word of needs no vector). Only
    a guess: the stage decides, under the read rule, and makes the vector itself when it was not
    made ahead."""
    if semantic.encoder_busy() is not None:
        return False
    since = _short_of_vectors.get((reader.org_id, settings.embedder))
    if since is not None and time.monotonic() - since < SHORT_OF_VECTORS_S:
        return False
    parsed, counts = await search_repo.lookup_words(
        conn, reader_params=reader.params(), query=terms.word_text(text)
    )
    if counts.stale or not counts.documents:
        return True  # the counts cannot tell: a vector may be needed
    return any(x.df > 0 for p in parsed for x in p.lexemes)


def blend(text_rank: float | None, top_text: float, similarity: float, weight: float) -> float:
    """The re-ranking score of one memory (see the module docstring)."""
    lexical = (text_rank or 0.0) / top_text if top_text > 0 else 0.0
    return weight * lexical + (1.0 - weight) * similarity


async def rerank(
    conn: AsyncConnection,
    reader: Reader,
    folded: Folded,
    query: Query,
    settings: SearchSettings,
) -> tuple[Folded, dict[str, Any]]:
    """``folded`` with its head re-ordered (see the module docstring), and the stage's report
    for ``filters.rerank``: ``{"ran": bool, "reason"?: str, "top"?: int}``. Statements:
    ``sibyl:search.rerank_ready``, then ``sibyl:search.rerank`` when every head memory has
    vectors."""
    if not settings.rerank:
        return folded, {"ran": False, "reason": "off"}
    head = folded[: settings.rerank_top]
    if len(head) < 2:
        return folded, {"ran": False, "reason": "fewer than two candidates"}
    reason = await semantic.unavailable(conn, settings.embedder)
    if reason is not None:
        return folded, {"ran": False, "reason": reason}
    model = settings.embedder
    name = models.embedder(model).name
    ids = [r.memory_id for r, _ in head]
    ready = await semantic_repo.with_vectors(
        conn, reader_params=reader.params(), memory_ids=ids, model=name
    )
    missing = len(ids) - ready.ready
    similarity: dict[str, float] = {}
    if not missing:
        kept = semantic.has_query_vector(model, query.text, reader)
        # here a pooled connection is held: make the vector only if a thread is free now
        busy = None if kept else semantic.encoder_busy(queue=False)
        if busy is not None:  # a burst: answer now, in the fused order, rather than queue
            return folded, {"ran": False, "reason": busy}
        vector = await semantic.query_vector(model, query.text, reader)
        similarity = await semantic_repo.similarities(
            conn, reader_params=reader.params(), vector=vector, memory_ids=ids, model=name
        )
        missing = sum(1 for i in ids if i not in similarity)  # one snapshot: none
    if missing:
        if 2 * missing >= len(ids):  # most of the head: vectors are still being written
            if len(_short_of_vectors) > 4096:
                _short_of_vectors.clear()
            _short_of_vectors[(reader.org_id, model)] = time.monotonic()
        reason = f"{missing} of the first {len(head)} memories have no vectors by {name}"
        if ready.other:  # the worker leaves those alone: say what would bring them
            reason += (
                f": {ready.other} have vectors by {ready.other_model}, which no serving process"
                f" replaces (sibyl-pg embed --model {model})"
            )
        else:
            reason += " yet"
        return folded, {"ran": False, "reason": reason}
    _short_of_vectors.pop((reader.org_id, model), None)
    top_text = max((r.text_rank or 0.0) for r, _ in head)
    scored = [
        (
            dataclasses.replace(
                r,
                similarity=similarity[r.memory_id],
                rerank_score=blend(
                    r.text_rank, top_text, similarity[r.memory_id], settings.rerank_weight
                ),
            ),
            collapsed,
        )
        for r, collapsed in head
    ]
    movable = sorted(
        (entry for entry in scored if EXACT not in entry[0].lanes),
        key=lambda entry: -(entry[0].rerank_score or 0.0),  # stable: ties keep the fused order
    )
    it = iter(movable)
    ordered = [entry if EXACT in entry[0].lanes else next(it) for entry in scored]
    return ordered + folded[len(head) :], {"ran": True, "top": len(head)}
