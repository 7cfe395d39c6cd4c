"""``metadata.focus``: where in a memory the query's words are.

**Best spans** (``sibyl:search.spans``): for a memory, its current spans that hold a query word
(at most :attr:`SearchSettings.span_limit` of them, the index's way in), each scored with the
full-text lane's BM25; a memory never cut is its own single span.

**Focus** (:func:`cover_order`, :func:`focus_metadata`): a result's best span first; then, up
to :attr:`SearchSettings.focus_spans` in all, each next span the one whose query words add the
most, a word's share counting :attr:`SearchSettings.focus_covered` times less for each span
already named that holds it, and :attr:`SearchSettings.focus_asked` times more for a word of
the question's ask: a memory's best spans repeat its topic's words, and the span with the
question's other words is let in (coverage of query aspects, after xQuAD).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.reader import Reader
from app.domain.excerpt import excerpt
from app.domain.search.query import Query
from app.domain.search.settings import SearchSettings
from app.repo import search as search_repo


async def best_spans(
    conn: AsyncConnection,
    reader: Reader,
    memories: list[str],
    query: Query,
    settings: SearchSettings,
    *,
    per_memory: int,
) -> dict[str, search_repo.Focus]:
    """Each of ``memories`` that holds a word of ``query``: its ``per_memory`` best spans, best
    first (one ``sibyl:search.spans`` statement). By memory id."""
    return await search_repo.spans(
        conn,
        reader_params=reader.params(),
        memories=memories,
        words=query.tokens,
        idfs=query.idfs,
        scoring=query.scoring,
        per_memory=per_memory,
        span_limit=settings.span_limit,
    )


def cover_order(
    spans: Sequence[search_repo.Span],
    take: int,
    covered: float,
    asked: Mapping[int, float] | None = None,
) -> list[search_repo.Span]:
    """At most ``take`` (≥ 1) of ``spans`` (one memory's, best BM25 first) in the order
    ``metadata.focus`` names them (see the module docstring): ``covered`` (0..1) is what a
    word's share still counts per chosen span holding it, ``asked[w]`` the factor of the word at
    1-based position ``w`` of the query's words (absent: 1). Ties: the better BM25 rank."""
    boost = asked or {}
    pool = list(spans)
    if not pool:
        return []
    chosen = [pool.pop(0)]
    seen: dict[int, int] = {}
    for word, _ in chosen[0].words:
        seen[word] = seen.get(word, 0) + 1
    while pool and len(chosen) < max(1, take):
        gains = [
            sum(share * boost.get(w, 1.0) * covered ** seen.get(w, 0) for w, share in sp.words)
            for sp in pool
        ]
        best = max(range(len(pool)), key=lambda i: (gains[i], -i))
        span = pool.pop(best)
        chosen.append(span)
        for word, _ in span.words:
            seen[word] = seen.get(word, 0) + 1
    return chosen


def ordered(
    found: Mapping[str, search_repo.Focus], query: Query, settings: SearchSettings
) -> dict[str, search_repo.Focus]:
    """``found`` with each memory's spans in :func:`cover_order`, the ask's words weighed
    :attr:`SearchSettings.focus_asked`."""
    asked = {n: settings.focus_asked for n, w in enumerate(query.words, start=1) if w.asked}
    return {
        m: dataclasses.replace(
            f, spans=cover_order(f.spans, settings.focus_spans, settings.focus_covered, asked)
        )
        for m, f in found.items()
    }


def focus_metadata(
    best: search_repo.Focus, weighted: list[tuple[str, float]], preview_chars: int
) -> dict[str, Any]:
    """``metadata.focus``: the memory's span that best matches the query (``id``: a passage id
    to widen with ``fetch_slice``, or the memory's own id when it was never cut;
    ``passage_index``: null then), ``excerpt``, the query-focused stretch of that span's text
    (:func:`app.domain.excerpt.excerpt`, at most ``content_max_chars`` characters), and
    ``next``: the ids of the memory's next spans in :func:`cover_order`."""
    first = best.spans[0]
    return {
        "id": first.id,
        "passage_index": first.passage_index,
        "excerpt": excerpt(best.content, weighted, preview_chars),
        "next": [s.id for s in best.spans[1:]],
    }
