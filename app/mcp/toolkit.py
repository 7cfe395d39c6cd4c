"""What every MCP tool of sibyl-pg shares: where the engine and the caller's key come from,
how a call runs (one authenticated transaction, as REST), how arguments are validated (strictly,
as REST validates a request body) and how a result is shaped.

**One copy of the answer.** A result's structured content is the verb's JSON response (the same
model as REST's); its text part is a short summary of it (:func:`summary`: what was found, by id
and name, and where to look next), never a second copy of the JSON.

**A small tool list.** Each tool's input schema keeps its parameters, types and the first
sentence of each description; its output schema names the response's fields and their JSON
types (:func:`shallow_schema`): the whole list stays near 10 KB of an agent's context, the bounds
and the round budget stated in each tool's description.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core import logs
from app.core.errors import DomainError, shape_errors, shape_message
from app.core.reader import Reader
from app.core.settings import Settings
from app.service.session import run_read

EngineProvider = Callable[[], AsyncEngine]
"""Returns the engine at call time (the HTTP app creates its engine in its lifespan)."""

KeyProvider = Callable[[Context], str | None]
"""Returns the API key of the caller of one tool call (None: no key, a 401-style tool error)."""


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


def _line(item: dict[str, Any], *extra: str) -> str:
    parts = [f"- {item.get('id')}", f"[{item.get('type')}]"]
    parts += [e for e in extra if e]
    name = str(item.get("name") or "")
    return " ".join(parts) + (f" {name[:120]}" if name else "")


def summary(data: dict[str, Any]) -> str:
    """The text part of a result: what the answer holds, one line per item (id, type, name and
    what links it), and that the whole answer is the structured content."""
    lines: list[str]
    if "results" in data:  # search
        lines = [f"{data.get('total')} results (has_more: {str(data.get('has_more')).lower()})"]
        for r in data["results"]:
            parent = r.get("parent_entity_id")
            lines.append(_line(r, f"passage of {parent}" if parent else ""))
    elif "neighbors" in data:  # expand_neighbors
        lines = [
            f"{data.get('total')} neighbors of {', '.join(data.get('origins') or []) or 'nothing'}"
            f" (truncated: {str(data.get('truncated')).lower()})"
        ]
        for n in data["neighbors"]:
            hop = f"{n.get('relationship')} {n.get('direction')} at {n.get('distance')}"
            lines.append(_line(n, hop))
        if data.get("unresolved"):
            lines.append(f"unresolved: {', '.join(data['unresolved'])}")
    elif "passages" in data:  # fetch_slice
        lines = [
            f"{data.get('parent_name')} ({data.get('parent_id')}): {data.get('total')} spans"
            f" of {data.get('passage_total') or 1}, covers_parent:"
            f" {str(data.get('covers_parent')).lower()}"
        ]
        for p in data["passages"]:
            cut = ", truncated" if p.get("truncated") else ""
            crumb = p.get("breadcrumb") or ""
            lines.append(f"- {p.get('id')} {crumb} ({len(p.get('content') or '')} chars{cut})")
    elif "sections" in data:  # context
        lines = [f"{data.get('total_items')} items for the goal; the text is in `markdown`"]
        for facet, items in (data.get("sections") or {}).items():
            lines += [_line(i, facet) for i in items]
    else:  # a write's answer
        scalars = {
            k: v for k, v in data.items() if isinstance(v, (str, int, bool)) and k != "content"
        }
        lines = [", ".join(f"{k}: {v}" for k, v in list(scalars.items())[:8])]
    lines.append("(the whole answer is the structured content)")
    return "\n".join(lines)


def tool_result(response: BaseModel) -> CallToolResult:
    """A successful call: the response model as structured content, and its :func:`summary`
    as text."""
    data = response.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=summary(data))], structured_content=data
    )


def json_tool_result(body: bytes) -> CallToolResult:
    """A successful call whose response is already encoded (``body``, a JSON object): its
    structured content, and its :func:`summary` as text."""
    data = json.loads(body)
    return CallToolResult(
        content=[TextContent(type="text", text=summary(data))], structured_content=data
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

        async def unit(engine: AsyncEngine, key: str | None) -> BaseModel:
            return await run_read(engine, key, verb)

        return await self.for_key(ctx, unit)

    async def for_key(
        self, ctx: Context, verb: Callable[[AsyncEngine, str | None], Awaitable[BaseModel]]
    ) -> CallToolResult:
        """Run a service verb that takes the engine and the caller's key and runs its own
        snapshots (:func:`app.service.search.search_for_key`), as REST calls it; a domain error
        is a tool error."""
        try:
            response = await verb(self.engine(), self.key(ctx))
        except DomainError as exc:
            logs.refused("MCP tool", exc)
            return tool_error(exc.detail)
        return tool_result(response)

    async def keyed(
        self, ctx: Context, verb: Callable[[str | None], Awaitable[bytes]]
    ) -> CallToolResult:
        """Run ``verb`` for the caller's key: a service verb that refuses a missing key and
        authenticates it in its one statement, as REST does; a domain error is a tool error."""
        try:
            body = await verb(self.key(ctx))
        except DomainError as exc:
            return tool_error(exc.detail)
        return json_tool_result(body)


PARAMETERS = {
    "query": "A question or words as written, an id, or a name's start.",
    "goal": "What the pack is about, in plain words.",
    "entity_ids": "Seed ids (memories or passages).",
    "entity_id": "A memory or passage id.",
    "relationship_types": "Hop only over these relationships.",
    "types": "Only memories of these types.",
    "lifecycle": "active and/or superseded.",
    "project": "Only inside this project.",
    "depth": "Hops from the seeds.",
    "limit": "How many to return.",
    "offset": "How many to skip.",
    "window": "Spans to return.",
    "content_max_chars": "Characters of text returned.",
    "include_incoming": "Also follow edges pointing in.",
    "include_related": "List each item's neighbours.",
    "related_limit": "Neighbours listed per item.",
    "markdown_token_budget": "Tokens of Markdown.",
    "type": "A lower-case word: note, task, decision...",
    "name": "A short title.",
    "content": "The body; [[id]] links a memory.",
    "scope": "project, private or org.",
    "metadata": "Any JSON object.",
    "src": "The edge's source memory.",
    "dst": "The edge's target memory.",
    "relationship": "An upper-case name (DEPENDS_ON...).",
}
"""Each tool parameter's description, short (the bounds are in the tool's description): the
list of tools is read into an agent's context at every session."""


def about(model: type[BaseModel], field: str) -> FieldInfo:
    """A parameter's description (:data:`PARAMETERS`, else the request model's field's) and
    schema extras (e.g. the item type of ``entity_ids``), from the request model's field."""
    source = model.model_fields[field]
    info: FieldInfo = Field(
        description=PARAMETERS.get(field, source.description),
        json_schema_extra=source.json_schema_extra,
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
    tool.parameters = compact_schema(strict.model_json_schema(by_alias=True))
    if tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = shallow_schema(tool.fn_metadata.output_schema)
    return tool


_FIRST_SENTENCE = re.compile(r"^(.+?\.)(\s|$)", re.S)
DESCRIPTION_CHARS = 40
"""The longest parameter description of a tool's input schema (cut at a word)."""


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an input schema) without titles and null defaults, a union of plain types as
    one ``type`` list, each description cut to its first sentence (:func:`_short`)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k != "title"}
            if "default" in out and out["default"] is None:
                del out["default"]
            if (
                out.get("additionalProperties") is False
                and "properties" in out
                and node is not schema
            ):
                del out["additionalProperties"]  # nested: the server validates strictly anyway
            union = out.get("anyOf")
            if isinstance(union, list) and all(set(u) <= {"type", "items"} for u in union):
                out.pop("anyOf")  # a union of plain types (an array's items kept): a type list
                out["type"] = [u["type"] for u in union]
                for u in union:
                    if "items" in u:
                        out["items"] = u["items"]
            if isinstance(out.get("description"), str):
                out["description"] = _short(out["description"])
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return cast(dict[str, Any], walk(schema))


def _short(text: str) -> str:
    """``text``'s first sentence, at most :data:`DESCRIPTION_CHARS` characters (cut at a word,
    marked ``...``)."""
    found = _FIRST_SENTENCE.match(text)
    first = found.group(1) if found else text
    if len(first) <= DESCRIPTION_CHARS:
        return first
    return first[: first.rfind(" ", 0, DESCRIPTION_CHARS - 3)] + "..."


def shallow_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema reduced to its top-level fields and their JSON types (an array's items:
    objects): what the structured content is, without a nested field's description."""
    defs = schema.get("$defs", {})

    def kind(prop: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in prop:
            return {"type": "object"}
        if "anyOf" in prop:
            types = sorted({t for p in prop["anyOf"] for t in _types(p, defs)})
            return {"type": types if len(types) > 1 else types[0]}
        if prop.get("type") == "array":
            return {"type": "array"}
        return {"type": prop.get("type", "object")}

    props = schema.get("properties", {})
    return {"type": "object", "properties": {name: kind(p) for name, p in props.items()}}


def _types(prop: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    if "$ref" in prop:
        return ["object"]
    t = prop.get("type", "object")
    return t if isinstance(t, list) else [t]
