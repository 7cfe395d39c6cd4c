"""The MCP server and its tools: thin adapters over the domain verbs (rule:
same-verbs-both-surfaces).

Every tool

- takes the fields of its REST request model as parameters, with the model's own types and
  descriptions. The types are strict, as on REST: a ``depth`` of ``"3"`` or ``3.7`` is refused
  (REST answers 422), ``null`` means the default. Unknown arguments are refused and a JSON array
  sent as a string is not decoded, as on REST (the SDK would otherwise accept both);
- builds that request model and runs the same domain function as REST through
  :func:`app.service.session.run_read`: one authenticated, read-only transaction per call;
- returns the same response model; its JSON schema is the tool's output schema;
- turns a :class:`app.core.errors.DomainError` into a tool error (``isError``) whose text is
  exactly REST's ``detail`` ("Entity not found", "entity_ids must be non-blank strings", ...);
  arguments that do not fit the schema are a tool error naming the fields and reasons, never
  the values (:class:`StrictTool`, REST's 422 message).
  Anything else is a crash: the SDK answers "Error executing tool <name>" and logs the traceback
  on the server, never to the caller.

Tool descriptions are written for a model and built from :mod:`app.core.policy`, so the bounds
they state are the bounds the domain applies. The round budget is stated once, in the server
instructions (:data:`INSTRUCTIONS`); each description says only what is specific to its tool.

The key comes from a *key provider*: the bearer header of the HTTP request carrying the call
(:func:`http_bearer_key`), or one fixed key (:func:`fixed_key`, stdio and tests).
"""

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import StrictBool, StrictInt, StrictStr
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core import policy
from app.core.reader import Reader
from app.core.settings import Settings
from app.domain.context import context_pack as context_verb
from app.domain.schemas import (
    ContextRequest,
    ContextResponse,
    ExpandRequest,
    ExpandResponse,
    SearchRequest,
    SearchResponse,
    SliceRequest,
    SliceResponse,
)
from app.domain.slice import fetch_slice as slice_verb
from app.mcp.toolkit import (
    EngineProvider,
    KeyProvider,
    Surface,
    about,
    bearer_token,
    fixed_key,
    http_bearer_key,
    read_tool,
)
from app.mcp.write_tools import write_tools
from app.service.expand import expand_keyed
from app.service.search import search_for_key

__all__ = [
    "ROUND_BUDGET",
    "EngineProvider",
    "KeyProvider",
    "bearer_token",
    "build_mcp",
    "fixed_key",
    "http_bearer_key",
]

SERVER_NAME = "sibyl-pg"

ROUND_BUDGET = (
    f"Round budget: retrieval is a loop of at most {policy.ROUND_BUDGET} rounds. (1) `search` or "
    "`context` finds a starting set; (2) `expand_neighbors` or `fetch_slice` widens it; (3) one "
    "more widening round, then answer. Two retrieval rounds capture nearly all of the available "
    "gain: another round costs latency and buys noise."
)
"""Stated once, in the server instructions; each tool description only points at it."""

ROUND_NOTE = f"At most {policy.ROUND_BUDGET} retrieval rounds (see instructions)."

INSTRUCTIONS = (
    "Graph memory for agents. For 'what do we know about X', call `context` once and read the "
    "pack. When you hold specific memory ids and need what sits next to them, widen with "
    "`expand_neighbors` (graph neighbors) or `fetch_slice` (the spans of a long memory). "
    f"{ROUND_BUDGET} Cite a memory's id (a span's `parent_id`), never a span id. Absent and "
    "not-visible look the same: do not retry a not-found. Each result's text is a summary; the "
    "whole answer is its structured content."
)

EXPAND_NEIGHBORS = f"""Widen memories you hold into their readable graph neighborhood (what \
blocks, depends on or superseded them; a long memory's passages). {ROUND_NOTE} Clamped and \
echoed: seeds <= {policy.MAX_SEEDS} (more: `unresolved`), depth \
{policy.DEPTH.low}-{policy.DEPTH.high} (default {policy.DEPTH.default}), limit \
{policy.LIMIT.low}-{policy.LIMIT.high} (default {policy.LIMIT.default}), content_max_chars \
{policy.PREVIEW_CHARS.low}-{policy.PREVIEW_CHARS.high} (default {policy.PREVIEW_CHARS.default}). \
Absent and hidden seeds are alike `unresolved`. A passage neighbor: read it with `fetch_slice`, \
cite its `parent_entity_id`."""

FETCH_SLICE = f"""Read a long memory's spans (passages), or those around one passage. \
{ROUND_NOTE} Clamped and echoed: window {policy.WINDOW.low}-{policy.WINDOW.high} (default \
{policy.WINDOW.default}), content_max_chars {policy.SLICE_CHARS.low}-{policy.SLICE_CHARS.high} \
for the whole window (default {policy.SLICE_CHARS.default}; spans past it come back empty, \
`truncated`). Cite `parent_id`, never a span id. A memory never cut comes back whole. Not found: \
absent or hidden; do not retry."""

SEARCH = f"""Find memories and passages by a question or words as written, an id or a name's \
start: the first round. For "what do we know about X" call `context`. {ROUND_NOTE} Clamped \
and echoed: limit {policy.SEARCH_LIMIT.low}-{policy.SEARCH_LIMIT.high} (default \
{policy.SEARCH_LIMIT.default}), offset {policy.SEARCH_OFFSET.low}-{policy.SEARCH_OFFSET.high}, \
content_max_chars {policy.PREVIEW_CHARS.low}-{policy.PREVIEW_CHARS.high} (default \
{policy.PREVIEW_CHARS.default}). One row per memory; `metadata.focus` names the span to \
`fetch_slice`; cite a passage's `parent_entity_id`. `filters.candidates_capped`: a bound cut \
candidates; `filters.rerank`: whether the first 20 were re-ranked by meaning."""

CONTEXT = f"""The pack of what the memory holds about a goal: the one call for "what do we \
know about X". Items by facet with a reason and `related` ids; read `markdown` for their text. \
{ROUND_NOTE} Clamped and echoed: limit {policy.CONTEXT_LIMIT.low}-{policy.CONTEXT_LIMIT.high} \
(default {policy.CONTEXT_LIMIT.default}; {policy.NOTE_LANE} reserved for notes), related_limit \
{policy.RELATED_LIMIT.low}-{policy.RELATED_LIMIT.high} (default {policy.RELATED_LIMIT.default}), \
markdown_token_budget {policy.MARKDOWN_TOKENS.low}-{policy.MARKDOWN_TOKENS.high} (default \
{policy.MARKDOWN_TOKENS.default}; the answer stays within about \
{policy.CONTEXT_RESPONSE_FACTOR} x budget x {policy.CHARS_PER_TOKEN} characters)."""


def build_mcp(
    engine_provider: EngineProvider,
    key_provider: KeyProvider,
    *,
    settings: Settings | None = None,
) -> MCPServer:
    """The MCP server exposing the read verbs for the caller ``key_provider`` names.

    Tools: ``search`` and ``context`` (rule: search-lanes), ``expand_neighbors`` (rule:
    walk-reference-semantics) and ``fetch_slice`` (rule: slice-window), all read-only.
    """
    surface = Surface(engine_provider, key_provider, settings)

    async def expand_neighbors(
        ctx: Context,
        entity_ids: Annotated[list[Any], about(ExpandRequest, "entity_ids")],
        relationship_types: Annotated[
            list[StrictStr] | None, about(ExpandRequest, "relationship_types")
        ] = None,
        types: Annotated[list[StrictStr] | None, about(ExpandRequest, "types")] = None,
        depth: Annotated[StrictInt | None, about(ExpandRequest, "depth")] = None,
        limit: Annotated[StrictInt | None, about(ExpandRequest, "limit")] = None,
        content_max_chars: Annotated[
            StrictInt | None, about(ExpandRequest, "content_max_chars")
        ] = None,
        include_incoming: Annotated[
            StrictBool | None, about(ExpandRequest, "include_incoming")
        ] = None,
        project: Annotated[StrictStr | None, about(ExpandRequest, "project")] = None,
    ) -> Annotated[CallToolResult, ExpandResponse]:
        """Adapter of :func:`app.service.expand.expand_keyed`, as ``POST /api/search/expand``:
        the same one statement as REST."""
        request = ExpandRequest(
            entity_ids=entity_ids,
            relationship_types=relationship_types,
            types=types,
            depth=depth,
            limit=limit,
            content_max_chars=content_max_chars,
            include_incoming=include_incoming,
            project=project,
        )

        return await surface.keyed(
            ctx, lambda key: expand_keyed(surface.engine(), key, request, settings=surface.settings)
        )

    async def fetch_slice(
        ctx: Context,
        entity_id: Annotated[StrictStr, about(SliceRequest, "entity_id")],
        window: Annotated[StrictInt | None, about(SliceRequest, "window")] = None,
        content_max_chars: Annotated[
            StrictInt | None, about(SliceRequest, "content_max_chars")
        ] = None,
        project: Annotated[StrictStr | None, about(SliceRequest, "project")] = None,
    ) -> Annotated[CallToolResult, SliceResponse]:
        """Adapter of :func:`app.domain.slice.fetch_slice` (``POST /api/search/slice``)."""
        request = SliceRequest(
            entity_id=entity_id, window=window, content_max_chars=content_max_chars, project=project
        )

        async def verb(conn: AsyncConnection, reader: Reader) -> SliceResponse:
            return await slice_verb(conn, reader, request)

        return await surface.read(ctx, verb)

    async def search(
        ctx: Context,
        query: Annotated[StrictStr, about(SearchRequest, "query")],
        types: Annotated[list[StrictStr] | None, about(SearchRequest, "types")] = None,
        project: Annotated[StrictStr | None, about(SearchRequest, "project")] = None,
        lifecycle: Annotated[list[StrictStr] | None, about(SearchRequest, "lifecycle")] = None,
        limit: Annotated[StrictInt | None, about(SearchRequest, "limit")] = None,
        offset: Annotated[StrictInt | None, about(SearchRequest, "offset")] = None,
        content_max_chars: Annotated[
            StrictInt | None, about(SearchRequest, "content_max_chars")
        ] = None,
    ) -> Annotated[CallToolResult, SearchResponse]:
        """Adapter of :func:`app.service.search.search_for_key` (``POST /api/search``)."""
        request = SearchRequest(
            query=query,
            types=types,
            project=project,
            lifecycle=lifecycle,
            limit=limit,
            offset=offset,
            content_max_chars=content_max_chars,
        )

        async def verb(engine: AsyncEngine, key: str | None) -> SearchResponse:
            return await search_for_key(engine, key, request, surface.settings)

        return await surface.for_key(ctx, verb)

    async def context(
        ctx: Context,
        goal: Annotated[StrictStr, about(ContextRequest, "goal")],
        project: Annotated[StrictStr | None, about(ContextRequest, "project")] = None,
        limit: Annotated[StrictInt | None, about(ContextRequest, "limit")] = None,
        include_related: Annotated[
            StrictBool | None, about(ContextRequest, "include_related")
        ] = None,
        related_limit: Annotated[StrictInt | None, about(ContextRequest, "related_limit")] = None,
        markdown_token_budget: Annotated[
            StrictInt | None, about(ContextRequest, "markdown_token_budget")
        ] = None,
    ) -> Annotated[CallToolResult, ContextResponse]:
        """Adapter of :func:`app.domain.context.context_pack` (``POST /api/context/pack``)."""
        request = ContextRequest(
            goal=goal,
            project=project,
            limit=limit,
            include_related=include_related,
            related_limit=related_limit,
            markdown_token_budget=markdown_token_budget,
        )

        async def verb(conn: AsyncConnection, reader: Reader) -> ContextResponse:
            return await context_verb(conn, reader, request, settings=surface.settings)

        return await surface.read(ctx, verb)

    # A read verb is one adapter above (parameters = its request model's fields, typed and
    # described as there; body = build the request, `surface.read` the domain call) and one
    # `read_tool` entry here, described for the model with its policy bounds (the round
    # budget is stated once, in INSTRUCTIONS).
    tools = [
        read_tool(search, name="search", title="Search", description=SEARCH),
        read_tool(context, name="context", title="Context pack", description=CONTEXT),
        read_tool(
            expand_neighbors,
            name="expand_neighbors",
            title="Expand neighbors",
            description=EXPAND_NEIGHBORS,
        ),
        read_tool(fetch_slice, name="fetch_slice", title="Fetch slice", description=FETCH_SLICE),
    ]
    tools += write_tools(surface)  # remember, link: need the `write` scope
    return MCPServer(
        SERVER_NAME,
        title="sibyl-pg memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        tools=tools,
        log_level="WARNING",
    )
