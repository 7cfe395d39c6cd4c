"""``search``: find a starting set by words, id, name or meaning (rule: search-lanes).

One retrieval pipeline (:mod:`app.domain.search.pipeline`: query → lanes → fuse → fold →
promote → page), every number of it in one settings object
(:class:`~app.domain.search.settings.SearchSettings`). ``docs/search.md`` shows it on one page.
"""

from app.domain.schemas import SearchRequest
from app.domain.search.fuse import EXACT, FULLTEXT, SEMANTIC, Ranked, fold, fuse, fused_order
from app.domain.search.pipeline import Candidates, candidates, hit_fields, search
from app.domain.search.query import (
    Filters,
    Query,
    build_query,
    normalize_lifecycles,
    normalize_query,
)
from app.domain.search.settings import SearchSettings, search_settings

__all__ = [
    "EXACT",
    "FULLTEXT",
    "SEMANTIC",
    "Candidates",
    "Filters",
    "Query",
    "Ranked",
    "SearchRequest",
    "SearchSettings",
    "build_query",
    "candidates",
    "fold",
    "fuse",
    "fused_order",
    "hit_fields",
    "normalize_lifecycles",
    "normalize_query",
    "search",
    "search_settings",
]
