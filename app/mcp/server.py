"""The MCP server and its tools: thin adapters over the domain verbs (contract §10, issue 3).

Every tool

- takes the fields of its REST request model as parameters, with the model's own types and
  descriptions. The types are strict, as on REST: a ``depth`` of ``"3"`` or ``3.7`` is refused
  (REST answers 422), ``null`` means the default. Unknown arguments are refused and a JSON array
  sent as a string is not decoded, as on REST (the SDK would otherwise accept both);
- builds that request model and runs the same domain function as REST through
  :func:`app.domain.session.run_read`: one authenticated, read-only transaction per call;
- returns the same response model; its JSON schema is the tool's output schema;
- turns a :class:`app.core.errors.DomainError` into a tool error (``isError``) whose text is
  exactly REST's ``detail`` ("Entity not found", "entity_ids must be non-blank strings", ...);
  arguments that do not fit the schema are a tool error naming the fields and reasons, never
  the values (:class:`StrictTool`, REST's 422 message).
  Anything else is a crash: the SDK answers "Error executing tool <name>" and logs the traceback
  on the server, never to the caller.

Tool descriptions are written for a model and built from :mod:`app.domain.policy`, so the bounds
they state are the bounds the domain applies. The round budget is stated once, in the server
instructions (:data:`INSTRUCTIONS`); each description says only what is specific to its tool.

The key comes from a *key provider*: the bearer header of the HTTP request carrying the call
(:func:`http_bearer_key`), or one fixed key (:func:`fixed_key`, stdio and tests).
"""

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic.fields import FieldInfo
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core import logs
from app.core.errors import DomainError, shape_errors, shape_message
from app.core.settings import Settings
from app.domain import policy
from app.domain.context import context_pack as context_verb
from app.domain.expand import expand_for_key
from app.domain.reader import Reader
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
from app.domain.search import SearchSettings
from app.domain.search import search as search_verb
from app.domain.session import require_key, run_read, run_snapshot
from app.domain.slice import fetch_slice as slice_verb

EngineProvider = Callable[[], AsyncEngine]
"""Returns the engine at call time (the HTTP app creates its engine in its lifespan)."""

KeyProvider = Callable[[Context], str | None]
"""Returns the API key of the caller of one tool call (None: no key, a 401-style tool error)."""

SERVER_NAME = "sibyl-pg"

ROUND_BUDGET = (
    f"Round budget: retrieval is a loop of at most {policy.ROUND_BUDGET} rounds. (1) `search` or "
    "`context` finds a starting set; (2) `expand_neighbors` or `fetch_slice` widens it; (3) one "
    "more widening round, then answer. Two retrieval rounds capture nearly all of the available "
    "gain: another round costs latency and buys noise."
)
"""Stated once, in the server instructions; each tool description only points at it."""

ROUND_NOTE = f"At most {policy.ROUND_BUDGET} retrieval rounds in all (see the server instructions)."

INSTRUCTIONS = (
    "Graph memory for agents. For 'what do we know about X', call `context` once and read the "
    "pack. When you hold specific memory ids and need what sits next to them, widen with "
    "`expand_neighbors` (graph neighbors) or `fetch_slice` (the spans of a long memory). "
    f"{ROUND_BUDGET} Cite a memory's id (a span's `parent_id`), never a span id. Absent and "
    "not-visible look the same: do not retry a not-found."
)

EXPAND_NEIGHBORS = f"""Widen memories you already hold into their authorized graph neighborhood: \
the tasks blocking a task, what depends on a decision, the decision a plan supersedes, the \
spans (passages) a long memory was cut into.

Use it when you hold specific memory ids (from `search`, `context` or an earlier round) and need \
what sits next to them. Do not use it to answer "what do we know about X": one hop answers that, \
so call `context` and read the pack it composed.

{ROUND_NOTE}

Bounds are clamped, never rejected, and the applied values come back in `depth`, `limit` and \
`filters`: at most {policy.MAX_SEEDS} seeds (seeds past {policy.MAX_SEEDS} come back in \
`unresolved`, not walked); depth {policy.DEPTH.low}–{policy.DEPTH.high} hops (default \
{policy.DEPTH.default}); limit up to {policy.LIMIT.high} neighbors ({policy.LIMIT.low}–\
{policy.LIMIT.high}, default {policy.LIMIT.default}); content_max_chars \
{policy.PREVIEW_CHARS.low}–{policy.PREVIEW_CHARS.high} preview characters per neighbor (default \
{policy.PREVIEW_CHARS.default}).

Reading the result: `origins` are the seeds that resolved; `unresolved` seeds are absent or not \
visible to you, and the two look the same. `relationship_types` restricts the hops (e.g. \
["DEPENDS_ON"]); `types` filters the answer, not the walk. `include_incoming` (default true) also \
follows edges that point at a node: dependents and spans are on that side. `direction` describes \
the edge from the node one hop closer, not from your seed. A neighbor with `widen_with: \
"fetch_slice"` is a passage of `parent_entity_id`: call `fetch_slice` on it to read around it, \
and cite the parent, not the passage id. `truncated: true` means more neighbors existed than \
`limit`."""

FETCH_SLICE = f"""Read a long memory as the window of spans (passages) it was cut into, or the \
spans around one passage.

Use it when a search or expand result matched part of a long memory (a neighbor with \
`widen_with: "fetch_slice"`, or a memory you need the text of) and you need the surrounding \
text. Do not use it to find related memories (that is `expand_neighbors`) or to answer a general \
question (call `context`).

{ROUND_NOTE}

Bounds are clamped, never rejected: window {policy.WINDOW.low}–{policy.WINDOW.high} spans \
(default {policy.WINDOW.default}; centred on a named passage, or the first spans of a memory), \
the applied value comes back in `window`; content_max_chars \
{policy.SLICE_CHARS.low}–{policy.SLICE_CHARS.high}, one character budget for the whole window \
(default {policy.SLICE_CHARS.default}): spans past it come back empty with `truncated: true`.

Cite `parent_id`, not a span id: span ids are re-minted whenever the memory is edited, so a \
citation of one goes stale. `covers_parent: false` means some text lives only on the parent (read \
further with a larger window). A memory never cut comes back whole with `sliced: false`: that is \
the answer, not an error to retry. "Entity not found" means absent or not visible to you; do not \
retry it."""

SEARCH = f"""Find memories (and the passages of long ones) by words, id or name: the first \
round of the loop, when you need a starting set of specific memories.

Use it to locate memories you will widen or cite: `query` takes a question or words as \
written (any word matches; rarer words, more words and words in a name weigh more), a memory \
id, or the start of a memory's name or title. For "what do we know \
about X", call `context` instead: it composes the pack for you.

{ROUND_NOTE}

Bounds are clamped, never rejected, and the applied values come back in `limit`, `offset` and \
`filters`: limit {policy.SEARCH_LIMIT.low}–{policy.SEARCH_LIMIT.high} results per page \
(default {policy.SEARCH_LIMIT.default}); offset {policy.SEARCH_OFFSET.low}–\
{policy.SEARCH_OFFSET.high} (default {policy.SEARCH_OFFSET.default}); content_max_chars \
{policy.PREVIEW_CHARS.low}–{policy.PREVIEW_CHARS.high} preview characters per result (default \
{policy.PREVIEW_CHARS.default}). `lifecycle` defaults to active and superseded; retired memories \
are never returned. `types` and `project` narrow the search.

Reading the result: results are best first (full-text rank fused with id/name matches by \
reciprocal rank fusion, k = {SearchSettings().rrf_k}); one result per memory, its other hits \
listed in \
`metadata.collapsed`. A result with `widen_with: "fetch_slice"` is a passage of \
`parent_entity_id`: call `fetch_slice` on it to read around it, and cite the parent. \
`metadata.focus` names where in a memory the query's words are: its best-matching span (`id`, \
an `excerpt`) and the next best (`next`), ready for `fetch_slice`. The best result's strongest \
typed neighbour (what it depends on, or what superseded it) comes right after it, \
`metadata.match.promoted_by` naming the hop. \
`has_more: true` means another page exists (raise `offset`). Memories you cannot see are never \
counted or hinted at: an empty result means nothing visible matched."""

CONTEXT = f"""Compose a pack of what the memory holds about a goal: the one call that answers \
"what do we know about X".

When one hop answers the question, call `context` once with the goal in plain words and read \
the pack: items grouped by facet \
(`decisions`, `active_work` = tasks not done, `artifacts` = artifacts and documents, `notes`, \
`other`), each with a short preview, the `reason` it was chosen and its one-hop `related` \
memories (ids and hops, no text), plus `markdown`, which carries the items' text: read that \
(each text is the part matching the goal: a memory shows its best-matching span, named for \
`fetch_slice`; better-ranked items show more). The \
whole answer stays within about {policy.CONTEXT_RESPONSE_FACTOR} × markdown_token_budget × \
{policy.CHARS_PER_TOKEN} characters; items that would not fit are left out \
(`filters.left_out_for_budget`). Widen only if the pack falls short: \
`expand_neighbors` on items you need the neighborhood of, `fetch_slice` on an item with \
`widen_with: "fetch_slice"` (a passage: cite its `parent_entity_id`).

{ROUND_NOTE}

Bounds are clamped, never rejected, and the applied values come back in `limit` and `filters`: \
limit {policy.CONTEXT_LIMIT.low}–{policy.CONTEXT_LIMIT.high} items (default \
{policy.CONTEXT_LIMIT.default}), of which up to {policy.NOTE_LANE} are reserved for notes \
(the note lane never grows with `limit`); related_limit {policy.RELATED_LIMIT.low}–\
{policy.RELATED_LIMIT.high} related memories per item (default {policy.RELATED_LIMIT.default}); \
markdown_token_budget {policy.MARKDOWN_TOKENS.low}–{policy.MARKDOWN_TOKENS.high} tokens (default \
{policy.MARKDOWN_TOKENS.default}, about {policy.CHARS_PER_TOKEN} characters each); \
include_related defaults to true. A memory whose every span is in the pack is left out (its text \
is all there). `project` confines the pack to one project: one you cannot see gives an empty \
pack, exactly like one that does not exist."""

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def bearer_token(authorization: str | None) -> str | None:
    """The key in an ``Authorization: Bearer <key>`` header value, else None.

    Parsed as REST parses it (FastAPI's ``HTTPBearer``): scheme case-insensitive, one space, the
    rest verbatim.
    """
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def http_bearer_key(ctx: Context) -> str | None:
    """Key provider for streamable HTTP: the bearer key of the HTTP request carrying the call."""
    try:
        request = ctx.request_context.request
    except ValueError:  # no request context: not called over a transport
        return None
    headers = getattr(request, "headers", None)
    return bearer_token(headers.get("authorization")) if headers is not None else None


def fixed_key(key: str | None) -> KeyProvider:
    """Key provider for one reader whatever the transport (stdio, in-process tests)."""

    def provide(_: Context) -> str | None:
        return key

    return provide


def tool_result(response: BaseModel) -> CallToolResult:
    """A successful call: the response model as structured content, and as JSON text for
    clients that read only text content."""
    return CallToolResult(
        content=[TextContent(type="text", text=response.model_dump_json())],
        structured_content=response.model_dump(mode="json"),
    )


def json_tool_result(body: bytes) -> CallToolResult:
    """A successful call whose response is already encoded (``body``, a JSON object): the same
    text, and its structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=body.decode())],
        structured_content=json.loads(body),
    )


def tool_error(detail: str) -> CallToolResult:
    """A refused call (``isError``) whose text is exactly REST's ``{"detail": ...}``."""
    return CallToolResult(content=[TextContent(type="text", text=detail)], is_error=True)


@dataclass(frozen=True)
class Surface:
    """What every tool shares: where the engine and the caller's key come from, the settings."""

    engine: EngineProvider
    key: KeyProvider
    settings: Settings | None = None

    async def read(
        self, ctx: Context, verb: Callable[[AsyncConnection, Reader], Awaitable[BaseModel]]
    ) -> CallToolResult:
        """Run ``verb`` through :func:`run_read` as REST does; a domain error is a tool error."""
        try:
            response = await run_read(self.engine(), self.key(ctx), verb)
        except DomainError as exc:
            logs.refused("MCP tool", exc)
            return tool_error(exc.detail)
        return tool_result(response)

    async def keyed(
        self, ctx: Context, verb: Callable[[AsyncConnection, str], Awaitable[bytes]]
    ) -> CallToolResult:
        """Run ``verb``, which authenticates the caller's key in its one statement, as REST does
        (:func:`run_snapshot` ``single``); a domain error is a tool error."""
        key = self.key(ctx)
        try:
            require_key(key)
            assert key is not None
            body = await run_snapshot(self.engine(), lambda conn: verb(conn, key), single=True)
        except DomainError as exc:
            return tool_error(exc.detail)
        return json_tool_result(body)


def _about(model: type[BaseModel], field: str) -> FieldInfo:
    """A parameter's description (and schema extras, e.g. the item type of ``entity_ids``)
    taken from the request model's field, so the two cannot drift."""
    source = model.model_fields[field]
    info: FieldInfo = Field(
        description=source.description, json_schema_extra=source.json_schema_extra
    )
    return info


class StrictTool(Tool):
    """A tool whose argument errors are reported as REST reports a 422: one line naming each
    field and the reason (``Invalid arguments: depth: Input should be a valid integer``), never
    the rejected value. (The SDK's own message is pydantic's text, which echoes the input.)"""

    async def run(
        self,
        arguments: dict[str, Any],
        context: Context[Any, Any],
        convert_result: bool = False,
    ) -> Any:
        """Validate ``arguments`` first; a mismatch is a :class:`ToolError` without input echo."""
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            shaped = shape_errors(exc.errors(include_input=False))
            raise ToolError(shape_message(shaped, what="arguments")) from None
        return await super().run(arguments, context, convert_result)


class _ArgumentsAsSent(FuncMetadata):
    """Tool arguments validated as sent: no decoding of JSON inside a string (REST has none)."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """Return ``data`` unchanged."""
        return data


def read_tool(fn: Callable[..., Any], *, name: str, title: str, description: str) -> Tool:
    """Register ``fn`` as a read-only tool whose arguments are validated exactly as REST
    validates a request body: strict types, unknown fields refused, nothing decoded."""
    tool = StrictTool.from_function(
        fn,
        name=name,
        title=title,
        description=description,
        annotations=READ_ONLY,
        structured_output=True,
    )
    meta = tool.fn_metadata
    strict = cast(
        type[ArgModelBase],
        type(
            meta.arg_model.__name__,
            (meta.arg_model,),
            {
                "__module__": __name__,
                "model_config": ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            },
        ),
    )
    tool.fn_metadata = _ArgumentsAsSent(
        arg_model=strict,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
    )
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


def build_mcp(
    engine_provider: EngineProvider,
    key_provider: KeyProvider,
    *,
    settings: Settings | None = None,
) -> MCPServer:
    """The MCP server exposing the read verbs for the caller ``key_provider`` names.

    Tools: ``search`` and ``context`` (contract §8), ``expand_neighbors`` (§5) and
    ``fetch_slice`` (§6), all read-only.
    """
    surface = Surface(engine_provider, key_provider, settings)

    async def expand_neighbors(
        ctx: Context,
        entity_ids: Annotated[list[Any], _about(ExpandRequest, "entity_ids")],
        relationship_types: Annotated[
            list[StrictStr] | None, _about(ExpandRequest, "relationship_types")
        ] = None,
        types: Annotated[list[StrictStr] | None, _about(ExpandRequest, "types")] = None,
        depth: Annotated[StrictInt | None, _about(ExpandRequest, "depth")] = None,
        limit: Annotated[StrictInt | None, _about(ExpandRequest, "limit")] = None,
        content_max_chars: Annotated[
            StrictInt | None, _about(ExpandRequest, "content_max_chars")
        ] = None,
        include_incoming: Annotated[
            StrictBool | None, _about(ExpandRequest, "include_incoming")
        ] = None,
        project: Annotated[StrictStr | None, _about(ExpandRequest, "project")] = None,
    ) -> Annotated[CallToolResult, ExpandResponse]:
        """Adapter of :func:`app.domain.expand.expand_for_key` (``POST /api/search/expand``): the
        same one statement as REST."""
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

        async def verb(conn: AsyncConnection, key: str) -> bytes:
            return await expand_for_key(conn, key, request, settings=surface.settings)

        return await surface.keyed(ctx, verb)

    async def fetch_slice(
        ctx: Context,
        entity_id: Annotated[StrictStr, _about(SliceRequest, "entity_id")],
        window: Annotated[StrictInt | None, _about(SliceRequest, "window")] = None,
        content_max_chars: Annotated[
            StrictInt | None, _about(SliceRequest, "content_max_chars")
        ] = None,
        project: Annotated[StrictStr | None, _about(SliceRequest, "project")] = None,
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
        query: Annotated[StrictStr, _about(SearchRequest, "query")],
        types: Annotated[list[StrictStr] | None, _about(SearchRequest, "types")] = None,
        project: Annotated[StrictStr | None, _about(SearchRequest, "project")] = None,
        lifecycle: Annotated[list[StrictStr] | None, _about(SearchRequest, "lifecycle")] = None,
        limit: Annotated[StrictInt | None, _about(SearchRequest, "limit")] = None,
        offset: Annotated[StrictInt | None, _about(SearchRequest, "offset")] = None,
        content_max_chars: Annotated[
            StrictInt | None, _about(SearchRequest, "content_max_chars")
        ] = None,
    ) -> Annotated[CallToolResult, SearchResponse]:
        """Adapter of :func:`app.domain.search.search` (``POST /api/search``)."""
        request = SearchRequest(
            query=query,
            types=types,
            project=project,
            lifecycle=lifecycle,
            limit=limit,
            offset=offset,
            content_max_chars=content_max_chars,
        )

        async def verb(conn: AsyncConnection, reader: Reader) -> SearchResponse:
            return await search_verb(conn, reader, request, settings=surface.settings)

        return await surface.read(ctx, verb)

    async def context(
        ctx: Context,
        goal: Annotated[StrictStr, _about(ContextRequest, "goal")],
        project: Annotated[StrictStr | None, _about(ContextRequest, "project")] = None,
        limit: Annotated[StrictInt | None, _about(ContextRequest, "limit")] = None,
        include_related: Annotated[
            StrictBool | None, _about(ContextRequest, "include_related")
        ] = None,
        related_limit: Annotated[StrictInt | None, _about(ContextRequest, "related_limit")] = None,
        markdown_token_budget: Annotated[
            StrictInt | None, _about(ContextRequest, "markdown_token_budget")
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
    from app.mcp.write_tools import write_tools  # imported here: it imports this module

    tools += write_tools(surface)  # remember, link: need the `write` scope (issue 5)
    return MCPServer(
        SERVER_NAME,
        title="sibyl-pg memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        tools=tools,
        log_level="WARNING",
    )
