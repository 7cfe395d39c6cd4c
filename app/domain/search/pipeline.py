"""The search verb and the candidates of a context pack: one pipeline.

Stages, each in its own module, each sending the statements its docstring names:

1. **query** (:mod:`~app.domain.search.query`): the text normalised, its words split and
   weighed once (``sibyl:search.words``);
2. **lanes** (:mod:`~app.domain.search.lanes`): candidates of the full-text, exact and semantic
   lanes (``sibyl:search.fulltext``, ``sibyl:search.exact``, ``sibyl:search.semantic``);
3. **fuse** and **fold** (:mod:`~app.domain.search.fuse`): reciprocal rank fusion, then one row
   per memory (its best hit: every span a query word finds competes for its memory);
4. **rerank** (:mod:`~app.domain.search.rerank`, where vectors can be used): the first
   memories re-ordered by BM25 blended with their nearest chunk's similarity to the query
   (``sibyl:search.rerank``);
5. **promote** (:mod:`~app.domain.search.promote`): the best result's strongest typed neighbour
   right after it (``sibyl:search.promote``);
6. **page**: the rows of ``offset``..``offset + limit`` (``sibyl:search.hits``), each with its
   focus (:mod:`~app.domain.search.focus`, ``sibyl:search.spans``).

Every number the stages use is in one :class:`~app.domain.search.settings.SearchSettings`,
echoed in ``filters.settings``. ``context`` takes stages 1-3 (:func:`candidates`, without the
fold: a pack handles a memory's spans itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.reader import Reader
from app.core.settings import Settings
from app.domain import terms
from app.domain.passages import passage_name
from app.domain.preview import ELLIPSIS, preview_prefix
from app.domain.schemas import SearchRequest, SearchResponse, SearchResult
from app.domain.search.focus import best_spans, focus_metadata, ordered
from app.domain.search.fuse import EXACT, FULLTEXT, LANES, SEMANTIC, Ranked, fold, fuse
from app.domain.search.lanes import Filters, run_lanes
from app.domain.search.promote import promote_first
from app.domain.search.query import Query, build_query, normalize_lifecycles, normalize_query
from app.domain.search.rerank import rerank
from app.domain.search.settings import SearchSettings, search_settings
from app.domain.validation import normalize_names, normalize_project
from app.repo import search as search_repo


@dataclass(frozen=True)
class Candidates:
    """Stages 1-3 of the pipeline: the fused hits (best first, not folded), whether a bound cut
    anything, the query, and each lane's report."""

    ranked: list[Ranked]
    capped: bool
    query: Query
    lanes: dict[str, Any]


async def candidates(
    conn: AsyncConnection,
    reader: Reader,
    text: str,
    filters: Filters,
    settings: SearchSettings,
) -> Candidates:
    """The fused candidates of ``text`` (normalised already) for ``reader``: the query, every
    lane, fusion (one ``sibyl:search.words`` statement and one per lane)."""
    query = await build_query(conn, reader, text, settings)
    lanes = await run_lanes(conn, reader, query, filters, settings)
    return Candidates(fuse(lanes.hits, settings), lanes.capped, query, lanes.report)


def hit_fields(hit: search_repo.Hit, preview_chars: int) -> dict[str, Any]:
    """The presentation fields every surface shows of one hit: id, type, name, content preview,
    project, lifecycle, metadata (with ``content_truncated``) and, for a passage,
    ``passage_index``, ``parent_entity_id`` and ``widen_with``."""
    content, cut = preview_prefix(hit.content_prefix, hit.content_length, preview_chars)
    is_passage = hit.parent_id is not None
    metadata: dict[str, Any]
    if is_passage:
        metadata = {
            "breadcrumb": hit.breadcrumb,
            "passage_total": hit.passage_total,
            "parent_type": hit.memory_type,
        }
    else:
        metadata = dict(hit.metadata)
    metadata["content_truncated"] = cut
    return {
        "id": hit.id,
        "type": "passage" if is_passage else hit.memory_type,
        "name": (
            passage_name(hit.name, hit.passage_index or 0, hit.passage_total, hit.breadcrumb)
            if is_passage
            else hit.name
        ),
        "content": content,
        "project_id": hit.project_id,
        "lifecycle": hit.lifecycle,
        "metadata": metadata,
        "passage_index": hit.passage_index,
        "parent_entity_id": hit.parent_id,
        "widen_with": "fetch_slice" if is_passage else None,
    }


def match_metadata(ranked: Ranked) -> dict[str, Any]:
    """``metadata.match``: the hit's rank in each lane (null: not in it), its text rank (BM25;
    null: no full-text match) and, on a promoted row, ``promoted_by``."""
    out: dict[str, Any] = {f"{lane}_rank": ranked.lanes.get(lane) for lane in LANES}
    out["text_rank"] = None if ranked.text_rank is None else round(ranked.text_rank, 6)
    if ranked.rerank_score is not None:
        out["similarity"] = round(ranked.similarity or 0.0, 6)
        out["rerank_score"] = round(ranked.rerank_score, 6)
    if ranked.promoted_by is not None:
        p = ranked.promoted_by
        out["promoted_by"] = {"id": p.id, "relationship": p.relationship, "direction": p.direction}
    return out


def _holds(content: str, excerpt: str) -> bool:
    """Whether ``content`` (a preview) already holds the text of ``excerpt`` (its ``...``
    markers aside), so sending both would say the same words twice."""
    core = excerpt.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS).strip()
    return not core or core in content


async def search(
    conn: AsyncConnection,
    reader: Reader,
    request: SearchRequest,
    *,
    settings: Settings | None = None,
    pipeline: SearchSettings | None = None,
) -> SearchResponse:
    """One page of the memories and passages matching ``request.query`` that ``reader`` may read.

    Bounds are clamped and echoed: limit 1..50 (default 10), offset 0..10000 (default 0),
    content_max_chars 0..50000 (default 500); ``lifecycle`` defaults to active + superseded
    (retired never). ``total`` is the number of results on this page, ``has_more`` whether a
    next page exists. Each result's ``metadata.match`` gives its lane ranks,
    ``metadata.collapsed`` (when present) the ids of the same memory's lower-ranked hits, and
    ``metadata.focus`` (when the memory holds a query word) its best-matching spans with a
    query-centred excerpt; ``content`` stays the preview (the hit's opening). ``filters`` echoes
    every applied value, which lanes ran (``lanes``), whether a bound cut anything
    (``candidates_capped``, on an empty page too) and every ranking setting (``settings``).
    ``pipeline``: the ranking settings (default: the service's, :func:`search_settings`).
    Raises ``BadRequest`` (400) for a blank or too long query, an unknown lifecycle, a type or
    project name outside its alphabet. A named project the reader cannot read answers exactly as
    a project that does not exist: no results.
    """
    ss = pipeline or search_settings(settings)
    text = normalize_query(request.query, field="query")
    filters = Filters(
        types=normalize_names(request.types, field="types", upper=False),
        lifecycles=normalize_lifecycles(request.lifecycle),
        project=normalize_project(request.project),
    )
    limit = policy.SEARCH_LIMIT.clamp(request.limit)
    offset = policy.SEARCH_OFFSET.clamp(request.offset)
    preview_chars = policy.PREVIEW_CHARS.clamp(request.content_max_chars)

    found = await candidates(conn, reader, text, filters, ss)
    query = found.query
    reranked, rerank_report = await rerank(conn, reader, fold(found.ranked), query, ss)
    folded = await promote_first(
        conn,
        reader,
        reranked,
        ss,
        types=filters.types,
        lifecycles=filters.lifecycles,
        project=filters.project,
    )
    page = folded[offset : offset + limit]
    rows = await search_repo.hits(
        conn,
        reader_params=reader.params(),
        ids=[r.id for r, _ in page],
        preview_chars=preview_chars,
    )
    memories = [r.memory_id for r, _ in page]
    focused = ordered(
        await best_spans(conn, reader, memories, query, ss, per_memory=ss.span_limit), query, ss
    )
    by_ask: dict[str, search_repo.Focus] = {}
    ask = query.asked()
    promoted = [r.memory_id for r, _ in page if r.promoted_by is not None]
    if ss.focus_by_ask and promoted and ask.words:
        # a promoted row is listed for its edge to the row above: its focus follows the ask
        scored = await best_spans(conn, reader, promoted, ask, ss, per_memory=ss.span_limit)
        by_ask = ordered(scored, ask, ss)
        focused = {**focused, **by_ask}

    results: list[SearchResult] = []
    for r, collapsed in page:
        hit = rows.get(r.id)
        if hit is None:  # pragma: no cover - one snapshot: a candidate's row is still there
            continue
        fields = hit_fields(hit, preview_chars)
        fields["metadata"]["match"] = match_metadata(r)
        if collapsed:
            fields["metadata"]["collapsed"] = collapsed
        best = focused.get(r.memory_id)
        if best is not None:
            weighted = (ask if r.memory_id in by_ask else query).weighted
            focus = focus_metadata(best, weighted, preview_chars)
            if focus["id"] == r.id and _holds(fields["content"], focus["excerpt"]):
                focus["excerpt"] = ""  # the row is that span and its preview already says it
            fields["metadata"]["focus"] = focus
        results.append(SearchResult(score=round(r.score, 6), **fields))

    echoed: dict[str, Any] = {
        "query": text,
        "types": filters.types,
        "project": filters.project,
        "lifecycle": filters.lifecycles,
        "limit": limit,
        "offset": offset,
        "content_max_chars": preview_chars,
        "rrf_k": ss.rrf_k,
        "candidate_cap": ss.candidate_cap,
        "candidates_capped": found.capped,
        # the reader's audience counts, or the fixed English frequencies (never counted, or an
        # audience stale since a write: docs/search.md)
        "word_weights": "counts" if query.counted else "fallback",
        # the words the full-text lane used, heaviest first, as the index lower-cases them
        "words": list(dict.fromkeys(terms.lowered(w) for w in query.tokens)),
        "lanes": found.lanes,
        "rerank": rerank_report,
        "settings": ss.echo(),
        "round_budget": policy.ROUND_BUDGET,
    }
    return SearchResponse(
        results=results,
        total=len(results),
        limit=limit,
        offset=offset,
        has_more=len(folded) > offset + limit,
        filters=echoed,
    )


__all__ = [
    "EXACT",
    "FULLTEXT",
    "SEMANTIC",
    "Candidates",
    "candidates",
    "hit_fields",
    "match_metadata",
    "search",
]
