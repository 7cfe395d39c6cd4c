"""Request and response shapes shared by every surface (REST and MCP use these very models).

Shapes follow ``seed/mcp-traverse.md`` with the additions of contract §5 and §6. A field of the
wrong JSON type is a validation error (HTTP 422 / MCP tool error); an out-of-range number is
clamped by the domain and the applied value echoed. Unknown fields are rejected.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from app.domain import policy


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExpandRequest(_Request):
    """Input of ``expand_neighbors`` (contract §5)."""

    entity_ids: list[Any] = Field(
        description=f"Seed ids (memories or passages); the first {policy.MAX_SEEDS} are walked."
    )
    relationship_types: list[StrictStr] | None = Field(
        default=None, description="Restrict hops to these relationships, e.g. ['DEPENDS_ON']."
    )
    types: list[StrictStr] | None = Field(
        default=None,
        description="Return only neighbors of these entity types (the walk still "
        "passes through other types).",
    )
    depth: StrictInt | None = Field(
        default=None,
        description=f"Hops, {policy.DEPTH.low}-{policy.DEPTH.high}, default {policy.DEPTH.default}"
        " (clamped).",
    )
    limit: StrictInt | None = Field(
        default=None,
        description=f"Neighbors returned, {policy.LIMIT.low}-{policy.LIMIT.high}, default "
        f"{policy.LIMIT.default} (clamped).",
    )
    content_max_chars: StrictInt | None = Field(
        default=None,
        description=f"Preview characters per neighbor, {policy.PREVIEW_CHARS.low}-"
        f"{policy.PREVIEW_CHARS.high}, default {policy.PREVIEW_CHARS.default} (clamped).",
    )
    include_incoming: StrictBool | None = Field(
        default=None, description="Also follow edges that point at a node (default true)."
    )
    project: StrictStr | None = Field(
        default=None, description="Confine the walk to this readable project."
    )


class Neighbor(BaseModel):
    """One node reached by the walk, with the best hop that reached it."""

    id: str
    type: str
    name: str
    relationship: str
    direction: Literal["outgoing", "incoming"]
    distance: int
    score: float
    content: str
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    passage_index: int | None = None
    parent_entity_id: str | None = None
    widen_with: Literal["fetch_slice"] | None = None


class ExpandResponse(BaseModel):
    """Output of ``expand_neighbors``; applied bounds echo in ``depth``, ``limit``, ``filters``."""

    origins: list[str]
    unresolved: list[str]
    neighbors: list[Neighbor]
    total: int
    depth: int
    limit: int
    truncated: bool
    filters: dict[str, Any]


class SliceRequest(_Request):
    """Input of ``fetch_slice`` (contract §6)."""

    entity_id: StrictStr = Field(description="A passage id, or the memory it was cut from.")
    window: StrictInt | None = Field(
        default=None,
        description=f"Spans returned, {policy.WINDOW.low}-{policy.WINDOW.high}, default "
        f"{policy.WINDOW.default} (clamped).",
    )
    content_max_chars: StrictInt | None = Field(
        default=None,
        description=f"One character budget for the whole window, {policy.SLICE_CHARS.low}-"
        f"{policy.SLICE_CHARS.high}, default {policy.SLICE_CHARS.default} (clamped).",
    )
    project: StrictStr | None = Field(default=None, description="Scope the read to this project.")


class SlicePassage(BaseModel):
    """One span of the window (or the whole body of a memory that was never cut)."""

    id: str
    name: str
    content: str
    passage_index: int | None
    passage_total: int | None
    breadcrumb: str | None
    truncated: bool


class SliceResponse(BaseModel):
    """Output of ``fetch_slice``. Cite ``parent_id``, not a span id."""

    entity_id: str
    parent_id: str
    parent_name: str
    parent_type: str
    passages: list[SlicePassage]
    window: int
    sliced: bool
    total: int
    window_start: int | None
    passage_total: int | None
    covers_parent: bool
    project_id: str | None
    content_chars: int
