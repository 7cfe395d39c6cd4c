"""Fusion of the lanes (reciprocal rank fusion) and the fold to one row per memory.

**Fuse.** score(d) = Σ over the lanes d is in of weight(lane) / (k + rank_lane(d)), k =
:attr:`SearchSettings.rrf_k` (60; Cormack, Clarke and Büttcher, SIGIR 2009), weight 1 for the
full-text and exact lanes and :attr:`SearchSettings.semantic_weight` for the semantic lane. Ties
(:func:`fused_order`): a hit of the exact lane first (the query names it), then id (bytewise).

**Fold.** One entry per memory: its best-ranked hit (the memory itself or one of its passages),
with the ids of its other hits, best first (a long memory's spans cannot crowd a page).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.search.settings import SearchSettings

FULLTEXT = "fulltext"
EXACT = "exact"
SEMANTIC = "semantic"
LANES = (FULLTEXT, EXACT, SEMANTIC)


@dataclass(frozen=True)
class Promotion:
    """How a promoted row is linked to the row above it: that row's memory id and the hop from
    it (``relationship``, ``direction`` ``outgoing`` or ``incoming``)."""

    id: str
    relationship: str
    direction: str


@dataclass(frozen=True)
class LaneHit:
    """One candidate of one lane: a memory or passage (``parent_id`` set), the memory's type,
    its rank in the lane (1 = best) and, for the full-text lane, its BM25 score."""

    id: str
    parent_id: str | None
    type: str
    rank: int
    text_rank: float | None = None


@dataclass(frozen=True)
class Ranked:
    """A candidate with its rank in each lane it is in and its fused score."""

    id: str
    parent_id: str | None
    type: str
    lanes: dict[str, int]
    text_rank: float | None
    score: float
    promoted_by: Promotion | None = None
    """Set when the promotion listed it right after the row above (its neighbour)."""
    similarity: float | None = None
    """Its nearest chunk's cosine similarity with the query, where the re-ranking ran."""
    rerank_score: float | None = None
    """Its score in the re-ranking (:mod:`app.domain.search.rerank`), where that ran."""

    @property
    def memory_id(self) -> str:
        """The memory the hit belongs to: itself, or a passage's parent."""
        return self.parent_id or self.id


Folded = list[tuple[Ranked, list[str]]]
"""One entry per memory: its best hit and the ids of its other hits."""


def lane_weight(lane: str, settings: SearchSettings) -> float:
    """The weight of ``lane`` in the fusion."""
    return settings.semantic_weight if lane == SEMANTIC else 1.0


def rrf_score(lanes: dict[str, int], settings: SearchSettings) -> float:
    """Reciprocal rank fusion: Σ weight(lane) / (k + rank) over the lanes a candidate is in."""
    return sum(lane_weight(lane, settings) / (settings.rrf_k + r) for lane, r in lanes.items())


def fused_order(r: Ranked) -> tuple[float, bool, str]:
    """The sort key of fused results: score, best first; of equal scores, a hit of the exact
    lane first (the query names it: its id, its name or title), then id (bytewise, as the
    database orders)."""
    return (-r.score, EXACT not in r.lanes, r.id)


def fuse(lanes: dict[str, list[LaneHit]], settings: SearchSettings) -> list[Ranked]:
    """Every candidate of ``lanes`` (lane name → its hits) once, with its lane ranks and fused
    score, best first (:func:`fused_order`)."""
    info: dict[str, LaneHit] = {}
    ranks: dict[str, dict[str, int]] = {}
    text_rank: dict[str, float] = {}
    for lane, hits in lanes.items():
        for h in hits:
            info.setdefault(h.id, h)
            ranks.setdefault(h.id, {})[lane] = h.rank
            if h.text_rank is not None:
                text_rank[h.id] = h.text_rank
    ranked = [
        Ranked(
            id=i,
            parent_id=info[i].parent_id,
            type=info[i].type,
            lanes=r,
            text_rank=text_rank.get(i),
            score=rrf_score(r, settings),
        )
        for i, r in ranks.items()
    ]
    ranked.sort(key=fused_order)
    return ranked


def fold(ranked: list[Ranked]) -> Folded:
    """One entry per memory: its best-ranked hit, with the ids of its other hits, best first.
    Order is the order of each memory's best hit."""
    best: dict[str, tuple[Ranked, list[str]]] = {}
    for r in ranked:
        entry = best.get(r.memory_id)
        if entry is None:
            best[r.memory_id] = (r, [])
        else:
            entry[1].append(r.id)
    return list(best.values())
