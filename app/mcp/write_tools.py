"""The MCP write tools (rule: one-write-path): ``remember`` (create or edit a memory) and ``link``
(write an edge). Thin adapters over :mod:`app.domain.entities`, the verbs REST's ``POST``/``PATCH
/api/entities`` and ``POST /api/edges`` call, through :func:`app.service.session.run_write`: one
transaction per call, and the key must hold the ``write`` scope (a read-only key gets the tool
error "This key lacks the 'write' scope" and nothing changes). A domain error is a tool error
whose text is exactly REST's ``detail``. Arguments are validated as strictly as the read tools'
(:func:`app.mcp.toolkit.read_tool`); only the annotations differ.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field, StrictInt, StrictStr, ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import logs
from app.core.errors import BadRequest, DomainError, shape_errors, shape_message
from app.core.reader import Reader
from app.core.settings import get_settings
from app.domain import entities as verbs
from app.domain.validation import require_id
from app.domain.write_schemas import (
    EdgeIn,
    EdgeOut,
    EntityCreate,
    EntityOut,
    EntityPatch,
    Lifecycle,
    Scope,
    SpanIn,
)
from app.mcp.toolkit import Surface, about, read_tool, tool_error, tool_result
from app.service.session import run_write

REMEMBER_ANNOTATIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
LINK_ANNOTATIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

REMEMBER = """Save a memory, or edit one by `entity_id` (a `write` key). Create: `type` and \
`name` (its id comes back); `project` puts it in a project you contribute to (`scope` project, \
else private; `org`: all the org). Edit: the fields to change, `if_match_revision` to refuse a \
stale edit. `[[id]]` in `content` links a memory. Not found: absent or hidden."""

LINK = """Write an edge `src -relationship-> dst` (a `write` key; write access to `src`): \
dependent -> dependency (DEPENDS_ON), newer -> older (SUPERSEDES), blocker -> blocked (BLOCKS). \
An existing edge changes nothing; a SUPERSEDES cycle is refused."""


async def run_tool_write(
    surface: Surface, ctx: Context, verb: Callable[[AsyncConnection, Reader], Awaitable[BaseModel]]
) -> CallToolResult:
    """Run ``verb`` through :func:`run_write` as REST does; a domain error is a tool error."""
    try:
        response = await run_write(surface.engine(), surface.key(ctx), verb)
    except DomainError as exc:
        logs.refused("MCP tool", exc)
        return tool_error(exc.detail)
    except ValidationError as exc:  # the request model's own rules, as REST's 422: no input echo
        return tool_error(shape_message(shape_errors(exc.errors()), what="arguments"))
    return tool_result(response)


def write_tools(surface: Surface) -> list[Tool]:
    """The ``remember`` and ``link`` tools on ``surface`` (engine, key provider, settings)."""
    evidence_lines = (surface.settings or get_settings()).evidence_lines

    async def remember(
        ctx: Context,
        entity_id: Annotated[
            StrictStr | None,
            Field(description="The memory to edit; omit to create a new one."),
        ] = None,
        id: Annotated[
            StrictStr | None,
            Field(description="On create only: the new memory's id (else one is minted)."),
        ] = None,
        type: Annotated[StrictStr | None, about(EntityCreate, "type")] = None,
        name: Annotated[StrictStr | None, about(EntityCreate, "name")] = None,
        content: Annotated[StrictStr | None, about(EntityCreate, "content")] = None,
        scope: Annotated[Scope | None, about(EntityCreate, "scope")] = None,
        project: Annotated[StrictStr | None, about(EntityCreate, "project")] = None,
        lifecycle: Annotated[Lifecycle | None, about(EntityCreate, "lifecycle")] = None,
        metadata: Annotated[dict[str, Any] | None, about(EntityCreate, "metadata")] = None,
        spans: Annotated[
            list[SpanIn] | None, Field(description="Declared spans tiling the body, in order.")
        ] = None,
        if_match_revision: Annotated[
            StrictInt | None,
            Field(description="Edit only if the memory is still at this revision."),
        ] = None,
    ) -> Annotated[CallToolResult, EntityOut]:
        """Adapter of ``POST /api/entities`` (no ``entity_id``) and ``PATCH
        /api/entities/{id}``."""
        given = {
            k: v
            for k, v in {
                "type": type,
                "name": name,
                "content": content,
                "scope": scope,
                "project": project,
                "lifecycle": lifecycle,
                "metadata": metadata,
                "spans": spans,
            }.items()
            if v is not None
        }

        async def verb(conn: AsyncConnection, reader: Reader) -> EntityOut:
            if entity_id is None:
                if type is None or name is None:
                    raise BadRequest("type and name are required to create a memory")
                return await verbs.create_entity(
                    conn, reader, EntityCreate(id=id, **given), evidence_lines=evidence_lines
                )
            if id is not None:
                raise BadRequest("id names a new memory; to edit one, pass entity_id only")
            return await verbs.update_entity(
                conn,
                reader,
                require_id(entity_id, field="entity_id"),  # an argument: stripped as body ids are
                EntityPatch(**given),
                if_match=[if_match_revision] if if_match_revision is not None else None,
                evidence_lines=evidence_lines,
            )

        return await run_tool_write(surface, ctx, verb)

    async def link(
        ctx: Context,
        src: Annotated[StrictStr, about(EdgeIn, "src")],
        relationship: Annotated[StrictStr, about(EdgeIn, "relationship")],
        dst: Annotated[StrictStr, about(EdgeIn, "dst")],
    ) -> Annotated[CallToolResult, EdgeOut]:
        """Adapter of ``POST /api/edges``."""
        body = EdgeIn(src=src, relationship=relationship, dst=dst)

        async def verb(conn: AsyncConnection, reader: Reader) -> EdgeOut:
            return await verbs.create_edge(conn, reader, body)

        return await run_tool_write(surface, ctx, verb)

    tools = [
        read_tool(remember, name="remember", title="Remember", description=REMEMBER),
        read_tool(link, name="link", title="Link memories", description=LINK),
    ]
    tools[0].annotations = REMEMBER_ANNOTATIONS
    tools[1].annotations = LINK_ANNOTATIONS
    return tools
