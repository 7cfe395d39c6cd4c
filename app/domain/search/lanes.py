"""Stage 1: candidates per lane, each already passed through the read rule and the request's
filters (lifecycle, types, project) before it is bounded or ranked.

- **full text** (``sibyl:search.fulltext``): a memory or passage holding **any** of the query's
  words is a candidate; every word is a way in. A word of few documents brings all of its
  readable matches (at most :attr:`SearchSettings.scan_limit` per table); a word held by more
  documents than an impact list keeps brings the :attr:`SearchSettings.word_cap` documents of
  highest BM25 contribution from the lists of the reader's audiences, and its matches among the
  reader's private memories. The :attr:`SearchSettings.candidate_cap` candidates with the
  highest summed weighted contribution are scored with BM25 over every query word.
- **exact** (``sibyl:search.exact``): the memory or passage whose id is the query, then
  memories whose name or title equals it or starts with it.
- **semantic** (``sibyl:search.semantic``, :mod:`app.domain.search.semantic`): the documents
  nearest to the query's vector, exact for every reader; on only where it is switched on and
  can run.

A lane that cut anything says so (``capped``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.reader import Reader
from app.domain.search import semantic
from app.domain.search.fuse import EXACT, FULLTEXT, SEMANTIC, LaneHit
from app.domain.search.query import Filters, Query
from app.domain.search.settings import SearchSettings
from app.repo import search as search_repo


@dataclass
class Lanes:
    """What the lanes found: hits by lane, whether a bound cut anything, and what each lane
    reports about itself (``report``: lane → JSON-able facts, echoed in ``filters.lanes``)."""

    hits: dict[str, list[LaneHit]] = field(default_factory=dict)
    capped: bool = False
    report: dict[str, Any] = field(default_factory=dict)


async def run_lanes(
    conn: AsyncConnection,
    reader: Reader,
    query: Query,
    filters: Filters,
    settings: SearchSettings,
) -> Lanes:
    """Every lane the settings switch on, one statement each (see the module docstring)."""
    out = Lanes()
    params = reader.params()
    if settings.fulltext:
        found, capped = await search_repo.fulltext(
            conn,
            reader_params=params,
            words=query.tokens,
            idfs=query.idfs,
            list_lexemes=[w.list_lexeme for w in query.words],
            truncated=any(w.truncated for w in query.words),
            types=filters.types,
            lifecycles=filters.lifecycles,
            project=filters.project,
            bounds=search_repo.Bounds(
                cap=settings.candidate_cap,
                word_cap=settings.word_cap,
                scan_limit=settings.scan_limit,
                scan_read=settings.scan_read,
            ),
            scoring=query.scoring,
        )
        out.hits[FULLTEXT] = [
            LaneHit(h.id, h.parent_id, h.type, h.lane_rank, h.text_rank) for h in found
        ]
        out.capped |= capped
    out.report[FULLTEXT] = {"ran": settings.fulltext}
    if settings.exact:
        exact, capped = await search_repo.exact(
            conn,
            reader_params=params,
            query=query.text,
            types=filters.types,
            lifecycles=filters.lifecycles,
            project=filters.project,
            cap=settings.candidate_cap,
        )
        out.hits[EXACT] = [LaneHit(h.id, h.parent_id, h.type, h.lane_rank) for h in exact]
        out.capped |= capped
    out.report[EXACT] = {"ran": settings.exact}
    hits, report = await semantic.lane(
        conn,
        reader,
        query,
        filters,
        settings,
        readable_documents=query.documents,
        org_documents=query.org_documents,
    )
    if hits is not None:
        out.hits[SEMANTIC] = hits
    out.report[SEMANTIC] = report
    return out
