"""REST routes of the first round of the loop: ``search`` and ``context`` (rules: search-lanes,
same-verbs-both-surfaces).

Thin translations of HTTP to :func:`app.service.search.search_for_key` (the query's vector
first, then :func:`app.domain.search.search`) and :func:`app.domain.context.context_pack`, each
run through :func:`app.service.session.run_read` like every read verb (one authenticated,
read-only snapshot). ``POST /api/search`` is its own path:
the traversal verbs live under it (``/api/search/expand``, ``/api/search/slice``) and do not
collide with it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.routes import ERRORS, Credentials
from app.core.reader import Reader
from app.domain.context import context_pack
from app.domain.schemas import ContextRequest, ContextResponse, SearchRequest, SearchResponse
from app.service.search import search_for_key
from app.service.session import run_read

_ERRORS = {code: spec for code, spec in ERRORS.items() if code != 404}

router = APIRouter(prefix="/api", tags=["retrieval"], responses=_ERRORS)


def _engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def _key(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials else None


@router.post("/search", response_model=SearchResponse)
async def search(body: SearchRequest, request: Request, credentials: Credentials) -> SearchResponse:
    """``search``: one page of the memories and passages matching ``query`` (rule: search-lanes).

    Full-text search over memory names, bodies (or a lead, for memories cut into passages) and
    passages: any word of the query matches, ranked by BM25 with word rarities counted over what
    the reader reads (fixed English frequencies while those counts are stale;
    ``docs/search.md``); fused by reciprocal rank fusion (k = 60) with an exact lane (the id, or
    the start of a name or of its title after a prefix such as ``PEP 8: ``, case-insensitive).
    One result per memory: its best hit (the memory or a passage), the others listed in
    ``metadata.collapsed``; a passage hit carries ``parent_entity_id``, ``passage_index`` and
    ``widen_with: "fetch_slice"``; ``metadata.focus`` names the memory's best-matching spans
    (up to 5) with an excerpt. The best result's strongest typed neighbour (over a stored edge
    of policy weight ≥ 0.90: outgoing, what it depends on or requires; or SUPERSEDES incoming, its
    successor) comes right after it, ``metadata.match.promoted_by`` naming the hop.

    Bounds are clamped, never rejected: limit 1-50 (default 10), offset 0-10000 (default 0),
    content_max_chars 0-50000 (default 500); ``lifecycle`` defaults to active + superseded and
    never returns retired memories. Response: ``results``, ``total`` (returned on this page),
    ``limit``, ``offset``, ``has_more``, ``filters`` (every applied value). A blank query, an
    unknown lifecycle, a bad type or project name → 400; a field of the wrong JSON type → 422.
    Rows the key cannot read are never candidates: a project it cannot read answers like one
    that does not exist (no results).
    """

    return await search_for_key(
        _engine(request), _key(credentials), body, request.app.state.settings
    )


@router.post("/context/pack", response_model=ContextResponse)
async def pack(body: ContextRequest, request: Request, credentials: Credentials) -> ContextResponse:
    """``context``: a pack of what the memory holds about ``goal`` (rule: context-budget-whole).

    Items by facet (``decisions``, ``active_work`` = tasks not done, ``artifacts`` = artifacts
    and documents, ``notes``, ``other``), each with a short preview, its fused ``score``, the
    ``reason`` it was chosen and up to ``related_limit`` one-hop ``related`` memories (ids and
    hops, as the ``expand_neighbors`` walk finds them); a reserved lane of exactly 3 note slots
    that never grows with ``limit``; a memory whose complete span set is in the pack is left
    out; ``markdown`` carries the items' text within ``markdown_token_budget`` (about 4
    characters a token): the part of each that matches the goal (a memory: its best-matching
    span, named), better-ranked items with more of it (shares 1, 1/2, 1/3, ...). The whole
    response stays within about 1.25 × budget × 4 characters: items that would not fit are
    left out (``filters.left_out_for_budget``).

    Bounds are clamped: limit 1-50 (default 12), related_limit 0-5 (default 3),
    markdown_token_budget 100-32000 (default 4000); ``include_related`` defaults to true. A blank
    goal or a bad project name → 400; a field of the wrong JSON type → 422. A project the key
    cannot read answers exactly like one that does not exist (an empty pack).
    """

    async def verb(conn: AsyncConnection, reader: Reader) -> ContextResponse:
        return await context_pack(conn, reader, body, settings=request.app.state.settings)

    return await run_read(_engine(request), _key(credentials), verb)
