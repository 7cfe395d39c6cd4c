"""Every number of search's ranking, in one object (:class:`SearchSettings`).

The pipeline (:mod:`app.domain.search.pipeline`) reads nothing else: each stage takes the
settings it runs with, ``filters.settings`` echoes them on every answer, and the evaluation
switches them per run (its ablation table: ``docs/eval.md``). :func:`search_settings` gives the
service's settings: these defaults, with the candidate cap, the semantic lane, the re-ranking
and their model from the environment (``SIBYL_SEARCH_CANDIDATE_CAP``, ``SIBYL_SEARCH_SEMANTIC``,
``SIBYL_SEARCH_RERANK``, ``SIBYL_EMBEDDER``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.core.settings import Settings, get_settings


@dataclass(frozen=True)
class SearchSettings:
    """The settings of one search run. Defaults are the service's."""

    # lanes and their fusion (reciprocal rank fusion: Σ weight / (rrf_k + rank))
    rrf_k: int = 60
    fulltext: bool = True
    exact: bool = True
    semantic: bool = False
    semantic_weight: float = 1.0
    semantic_k: int = 50
    """Candidates the semantic lane returns (nearest chunks' documents, best first)."""
    embedder: str = "minilm"
    """The model of the semantic lane's vectors (:mod:`app.core.embedder`)."""
    semantic_exact_limit: int = 10_000
    """Up to this many readable documents (by the reader's counts) the lane compares every
    readable vector; above it, and when the reader reads at least ``semantic_index_share`` of
    the org's documents, the index's nearest first (exact again when they hold fewer than
    ``semantic_k`` readable documents)."""
    semantic_index_share: float = 0.5
    """The least share of the org's documents a reader reads for the index path: a reader of
    less is always answered exactly."""
    semantic_ef_margin: float = 2.0
    """The index path reads the org's nearest chunks until it expects this many times
    ``semantic_k`` readable documents among them: margin × k × (the reader's chunks per
    document) ÷ (the reader's share of the org's documents) (HNSW ``ef_search``)."""
    semantic_ef: int = 1000
    """The most nearest chunks the index path reads (pgvector's own bound on ``ef_search``)."""

    # the query's words
    max_words: int = 12
    """At most this many words reach the full-text lane: the rarest."""
    min_weight: float = 0.05
    """Words weighing less (the commonest English words, with the fallback weights) are dropped
    while others are left."""

    # BM25
    k1: float = 1.2
    b: float = 0.75
    fallback_avg_length: float = 100.0
    """The mean document length (distinct lexemes) assumed without the reader's counts."""

    # the full-text lane's bounds
    candidate_cap: int = 200
    """Candidates the full-text lane scores exactly (the pool), and the exact lane ranks."""
    word_cap: int = 200
    """Candidates one word brings from its impact lists; also the length of those lists."""
    scan_limit: int = 200
    """Matches of a word without lists kept per table (memories, passages): those of highest
    contribution among the ``scan_read`` read."""
    scan_read: int = 800
    """Matches of a word without lists read per table (in the index's physical order) before
    the best ``scan_limit`` are kept: the cut is by contribution unless a word has more
    readable matches than this."""

    # stages after fusion
    rerank: bool = True
    """The first ``rerank_top`` memories are re-ordered by BM25 blended with their nearest
    chunk's similarity to the query (:mod:`app.domain.search.rerank`)."""
    rerank_top: int = 20
    """Memories of the fused order the re-ranking re-orders."""
    rerank_weight: float = 0.5
    """BM25's share of the re-ranking score (the nearest chunk's similarity has the rest)."""
    promote: bool = True
    """The best result's strongest typed neighbour is listed right after it."""
    promote_min_weight: float = 0.90
    """The least relationship weight (rule: relationship-policy) a promoting edge has."""

    # metadata.focus
    span_limit: int = 64
    """Spans of one memory scored for its focus: those holding a query word."""
    focus_spans: int = 5
    """Spans a result's focus names (its ``id``, then ``next``)."""
    focus_covered: float = 0.5
    """In ``focus.next``'s coverage order, a word's share counts this much less per span
    already named that holds it (1: plain score order)."""
    focus_asked: float = 2.0
    """In that order, a word of the question's ask (its last interrogative clause) counts this
    much more (1: no difference)."""
    focus_by_ask: bool = True
    """A promoted row's focus is chosen by the words of the question's ask."""

    def echo(self) -> dict[str, Any]:
        """Every setting, for ``filters.settings``."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> SearchSettings:
        """A copy with ``changes`` (an ablation, or a request's own bounds)."""
        return dataclasses.replace(self, **changes)


def search_settings(settings: Settings | None = None) -> SearchSettings:
    """The service's search settings: the defaults, with the candidate cap and whether the
    semantic lane is on from the environment."""
    s = settings or get_settings()
    return SearchSettings(
        candidate_cap=s.search_candidate_cap,
        semantic=s.search_semantic,
        rerank=s.search_rerank,
        embedder=s.embedder,
    )
