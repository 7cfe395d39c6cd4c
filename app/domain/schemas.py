"""Request and response shapes shared by every surface (REST and MCP use these very models).

Shapes follow ``seed/mcp-traverse.md`` with the additions of docs/api.md. A field of the
wrong JSON type is a validation error (HTTP 422 / MCP tool error); an out-of-range number is
clamped by the domain and the applied value echoed. Unknown fields are rejected.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from app.core import policy


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExpandRequest(_Request):
    """Input of ``expand_neighbors`` (rule: walk-reference-semantics)."""

    entity_ids: list[Any] = Field(
        description=f"Seed ids (memories or passages); the first {policy.MAX_SEEDS} are walked, "
        f"the rest returned in `unresolved` (at most {policy.MAX_NAMES}).",
        # Strings; anything else is refused by the domain as malformed (400, rule:
        # seeds-normalised), not as a wrong JSON type (422): the schema still says what to send.
        json_schema_extra={"items": {"type": "string"}},
    )
    relationship_types: list[StrictStr] | None = Field(
        default=None,
        description="Restrict hops to these relationships, e.g. ['DEPENDS_ON'] (1 to "
        f"{policy.MAX_NAMES} names; omit for every relationship).",
    )
    types: list[StrictStr] | None = Field(
        default=None,
        description="Return only neighbors of these entity types (the walk still "
        f"passes through other types; 1 to {policy.MAX_NAMES} names; omit for every type).",
    )
    depth: StrictInt | None = Field(
        default=None,
        description=policy.DEPTH.describe("Hops"),
    )
    limit: StrictInt | None = Field(
        default=None,
        description=policy.LIMIT.describe("Neighbors returned"),
    )
    content_max_chars: StrictInt | None = Field(
        default=None,
        description=policy.PREVIEW_CHARS.describe("Preview characters per neighbor"),
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
    """Input of ``fetch_slice`` (rule: slice-window)."""

    entity_id: StrictStr = Field(description="A passage id, or the memory it was cut from.")
    window: StrictInt | None = Field(
        default=None,
        description=policy.WINDOW.describe("Spans returned"),
    )
    content_max_chars: StrictInt | None = Field(
        default=None,
        description=policy.SLICE_CHARS.describe("One character budget for the whole window"),
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
    content_max_chars: int = Field(
        description="The character budget applied to the window (the request's, clamped to "
        f"{policy.SLICE_CHARS.low}..{policy.SLICE_CHARS.high}; default "
        f"{policy.SLICE_CHARS.default})"
    )


class SearchRequest(_Request):
    """Input of ``search`` (rule: search-lanes)."""

    query: StrictStr = Field(
        description="What to look for: a question or words as written (a memory holding any "
        "of them matches; ranked by BM25), a memory id, or the start of a memory's name or title "
        f"(after a prefix such as 'PEP 8: '). Non-blank, at most "
        f"{policy.MAX_QUERY_CHARS} characters."
    )
    types: list[StrictStr] | None = Field(
        default=None,
        description="Return only memories of these types (a passage counts as its memory's type;"
        f" 'passage' selects every passage hit; 1 to {policy.MAX_NAMES} names; omit for every"
        " type).",
    )
    project: StrictStr | None = Field(
        default=None, description="Search only this readable project."
    )
    lifecycle: list[StrictStr] | None = Field(
        default=None,
        description="Lifecycles returned: 'active' and/or 'superseded' (default both); 'retired' "
        "memories are never returned.",
    )
    limit: StrictInt | None = Field(
        default=None,
        description=policy.SEARCH_LIMIT.describe("Results per page"),
    )
    offset: StrictInt | None = Field(
        default=None,
        description=policy.SEARCH_OFFSET.describe("Results to skip"),
    )
    content_max_chars: StrictInt | None = Field(
        default=None,
        description=policy.PREVIEW_CHARS.describe("Preview characters per result"),
    )


class SearchResult(BaseModel):
    """One hit: a memory, or a passage of one (then ``widen_with`` names the next move)."""

    id: str
    type: str
    name: str
    content: str
    score: float
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    passage_index: int | None = None
    parent_entity_id: str | None = None
    widen_with: Literal["fetch_slice"] | None = None


class SearchResponse(BaseModel):
    """Output of ``search``: one page of results; applied bounds echo in ``limit``, ``offset``
    and ``filters``. ``total`` is the number of results returned on this page."""

    results: list[SearchResult]
    total: int
    limit: int
    offset: int
    has_more: bool = Field(
        description=(
            "Whether the next page (offset + limit) holds results. With "
            "filters.candidates_capped true, the ranked list is that of the best candidates the "
            "cap kept (SIBYL_SEARCH_CANDIDATE_CAP, default 200 rows: about 50-100 memories for a "
            "common word), so false means no more within them, not no more matches: add rarer "
            "words, or filter by types or project, to reach the others."
        )
    )
    filters: dict[str, Any]


class ContextRequest(_Request):
    """Input of ``context`` (rule: context-budget-whole)."""

    goal: StrictStr = Field(
        description="What the pack is for, in plain words (e.g. 'how do we type generics'). "
        f"Non-blank, at most {policy.MAX_QUERY_CHARS} characters."
    )
    project: StrictStr | None = Field(
        default=None, description="Compose the pack from this readable project only."
    )
    limit: StrictInt | None = Field(
        default=None,
        description=policy.CONTEXT_LIMIT.describe(
            "Items in the pack", f"; up to {policy.NOTE_LANE} of them are reserved for notes"
        ),
    )
    include_related: StrictBool | None = Field(
        default=None, description="Attach one-hop related memories to each item (default true)."
    )
    related_limit: StrictInt | None = Field(
        default=None,
        description=policy.RELATED_LIMIT.describe("Related memories per item"),
    )
    markdown_token_budget: StrictInt | None = Field(
        default=None,
        description=policy.MARKDOWN_TOKENS.describe(
            f"Size of the Markdown rendering in tokens (about {policy.CHARS_PER_TOKEN} "
            "characters each)"
        ),
    )


class RelatedItem(BaseModel):
    """A one-hop neighbor of a pack item: who it is and how it is linked (no text; widen it with
    ``expand_neighbors`` or ``fetch_slice``)."""

    id: str
    type: str
    name: str
    relationship: str
    direction: Literal["outgoing", "incoming"]
    distance: int = Field(description="Always 1: related memories are one hop away.")
    score: float
    lifecycle: str
    parent_entity_id: str | None = None


class ContextItem(BaseModel):
    """One memory (or passage) of a pack, why it was chosen, and its one-hop neighbors."""

    id: str
    type: str
    name: str
    preview: str
    score: float
    reason: str
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    passage_index: int | None = None
    parent_entity_id: str | None = None
    widen_with: Literal["fetch_slice"] | None = None
    related: list[RelatedItem]


class ContextSections(BaseModel):
    """The pack's items by facet, each in rank order."""

    decisions: list[ContextItem]
    active_work: list[ContextItem] = Field(description="Tasks that are not done.")
    artifacts: list[ContextItem] = Field(description="Artifacts and documents.")
    notes: list[ContextItem]
    other: list[ContextItem]


class ContextResponse(BaseModel):
    """Output of ``context``: the pack by facet, and its Markdown rendering within the budget."""

    goal: str
    sections: ContextSections
    total_items: int
    limit: int
    truncated: bool = Field(description="More matching memories existed than the pack holds.")
    markdown: str
    markdown_tokens: int = Field(description="Estimated tokens of `markdown` (characters / 4).")
    filters: dict[str, Any]
