"""Request and response shapes of the write surface (rule: one-write-path), shared by REST and
MCP: entities, edges, grants, and the admin directory (users, projects, members, API keys).

A field of the wrong JSON type, an unknown field or a value outside a closed set (``scope``,
``lifecycle``, roles) is a validation error (HTTP 422 / MCP tool error); everything else that is
wrong with a value (a blank name, a bad id or type alphabet, spans that do not tile the body) is
a 400 raised by the domain with the reason.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
)

Scope = Literal["project", "private", "org"]
Lifecycle = Literal["active", "superseded", "retired"]
OrgRole = Literal["owner", "admin", "member", "viewer"]
ProjectRole = Literal["viewer", "contributor", "maintainer", "owner"]
Visibility = Literal["private", "org"]
KeyScope = Literal["read", "write", "admin"]


METADATA_MAX_DEPTH = 64
"""The deepest nesting of objects and arrays a memory's ``metadata`` may hold (the object
itself is level 1). Deeper JSON would be stored and then fail every read of the memory with a
500 (its serializer recurses too deep)."""


METADATA_MAX_CHARS = 65_536
"""The largest ``metadata`` a memory may hold, in characters of compact JSON. Unbounded, one
memory with 400,000 keys slows every read that returns it by most of a second, for everyone;
bodies belong in ``content``."""


def _json_fault(value: Any) -> str | None:
    """Why ``value`` cannot be stored as a memory's metadata (None: it can): a NaN or infinite
    number (jsonb cannot store them), nesting deeper than :data:`METADATA_MAX_DEPTH`, or more
    than :data:`METADATA_MAX_CHARS` characters of compact JSON. Iterative, so no input can
    exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite (no NaN or Infinity)"
        if isinstance(item, dict | list):
            if depth > METADATA_MAX_DEPTH:
                return f"nesting deeper than {METADATA_MAX_DEPTH} levels of objects and arrays"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    if len(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) > METADATA_MAX_CHARS:
        return f"larger than {METADATA_MAX_CHARS} characters of JSON"
    return None


def _json_numbers(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` unchanged; a validation error (422) for what :func:`_json_fault` refuses: NaN
    or an infinity, which Python's JSON reader accepts (``NaN``, ``Infinity``, ``1e400``) but
    JSON and jsonb do not, nesting deeper than :data:`METADATA_MAX_DEPTH` levels, or more than
    :data:`METADATA_MAX_CHARS` characters."""
    fault = _json_fault(value)
    if fault:
        raise ValueError(fault)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_json_numbers)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpanIn(_Request):
    """A declared span (rule: declared-spans): ``[start, end)`` character offsets into the body."""

    start: StrictInt = Field(description="First character of the span (0-based).")
    end: StrictInt = Field(description="One past the last character of the span.")
    label: StrictStr = Field(description="Shown as the span's breadcrumb.")


SPANS_DESCRIPTION = (
    "Declared spans that tile the body exactly, in order (no gap, no overlap, at most 64); "
    "otherwise the memory is cut by its type (prose over 2000 characters, or 40-line evidence "
    "windows for an `observation`)."
)


class EntityCreate(_Request):
    """``POST /api/entities``: a new memory. The writer becomes its owner."""

    id: StrictStr | None = Field(
        default=None,
        description="A stable id `[A-Za-z0-9_.:-]{1,128}` (default: minted as `<type>_<12 hex>`)."
        " An id already taken in the org is a 409.",
    )
    type: StrictStr = Field(description="A lower-case word: note, decision, task, observation...")
    name: StrictStr = Field(description="A short title, 1-1000 characters.")
    content: StrictStr = Field(default="", description="The body (at most 1,000,000 characters).")
    scope: Scope | None = Field(
        default=None,
        description="project (readable by the project's readers), private (owner and grantees), "
        "or org (every org member). Default: project when a project is given, else private.",
    )
    project: StrictStr | None = Field(
        default=None, description="The project it lives in (needs contributor there)."
    )
    lifecycle: Lifecycle = Field(default="active", description="active, superseded or retired.")
    metadata: JsonObject = Field(default_factory=dict, description="Any JSON object.")
    spans: list[SpanIn] | None = Field(default=None, description=SPANS_DESCRIPTION)


def _not_nullable(schema: dict[str, Any]) -> None:
    """The JSON schema of an :func:`_absent` field: no default, and null not among its values."""
    schema.pop("default", None)
    arms = [a for a in schema.pop("anyOf", ()) if a != {"type": "null"}]
    if len(arms) == 1:
        schema.update(arms[0])
    elif arms:
        schema["anyOf"] = arms


def _absent() -> Any:
    """A field whose absence keeps the stored value: ``None`` inside, no default and no null in
    the JSON schema (null is refused by the model's validator). Typed ``X | None`` (pydantic's
    nullable schema), not a union with a hidden ``None`` arm, so a wrong type gets one reason
    ("Input should be a valid string"), not a second one saying it should be None."""
    return Field(default=None, json_schema_extra=_not_nullable)


class EntityPatch(_Request):
    """``PATCH /api/entities/{id}``: the fields to change; an absent field keeps its value.

    ``project: null`` takes the memory out of its project (with ``scope`` ``org`` or
    ``private`` in the same request: a project-scoped memory needs one, 400 otherwise);
    ``metadata`` replaces the whole object. Changing ``scope`` to ``org`` drops the project (an
    org memory has none).
    """

    # Absent is the default, but null is no value (``_not_null``), so the OpenAPI schema offers
    # neither null nor a null default (a schema-driven client sent null and got a 422):
    # ``_absent`` takes both out of the schema.
    type: StrictStr | None = _absent()
    name: StrictStr | None = _absent()
    content: StrictStr | None = _absent()
    scope: Scope | None = _absent()
    project: StrictStr | None = None
    lifecycle: Lifecycle | None = _absent()
    metadata: JsonObject | None = _absent()
    spans: list[SpanIn] | None = Field(default=None, description=SPANS_DESCRIPTION)

    @field_validator("type", "name", "content", "scope", "lifecycle", "metadata", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        """``null`` is no value of these fields (422): taken as "absent", ``{"content": null}``
        would answer 200 and clear nothing. Leave a
        field out to keep it; ``""`` empties ``content``, ``{}`` ``metadata``. (``project: null``
        means "no project", and ``spans: null`` "cut by the service".)"""
        if value is None:
            raise ValueError(NOT_NULL)
        return value


NOT_NULL = "null is not a value of this field: leave the field out to keep its value"


class EntityOut(BaseModel):
    """One memory as its reader sees it. ``revision`` is the value to send in ``If-Match``."""

    id: str
    type: str
    name: str
    content: str
    scope: str
    project_id: str | None
    owner_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    revision: int
    passage_kind: str | None = Field(description="prose, evidence, declared, or null (not cut).")
    passage_total: int = Field(description="Number of current spans (0: not cut).")
    created_at: datetime
    updated_at: datetime


class EdgeIn(_Request):
    """``POST /api/edges``: ``src -relationship-> dst`` (dependent → dependency, newer → older)."""

    src: StrictStr = Field(description="The memory the edge starts from (you must write it).")
    relationship: StrictStr = Field(
        description="Upper-case name `[A-Za-z0-9_]{1,64}`, e.g. DEPENDS_ON, SUPERSEDES."
    )
    dst: StrictStr = Field(
        description="The memory it points at (you must read it; for SUPERSEDES and CONTRADICTS, "
        "write it)."
    )


class EdgeOut(BaseModel):
    """A stored edge; ``created`` is false when it already existed (nothing was written)."""

    src: str
    relationship: str
    dst: str
    created: bool
    superseded: str | None = Field(
        default=None, description="The memory this SUPERSEDES edge marked `superseded`, if any."
    )


class GrantOut(BaseModel):
    """An explicit read grant of one private memory to one user."""

    entity_id: str
    user_id: str
    in_effect: bool = Field(
        description="Whether the grant widens who reads the memory now: true for a private "
        "memory and a user other than its owner; false for a project or org memory (its "
        "readers read it already; the grant is kept and applies if it becomes private) or its "
        "owner"
    )


class UserIn(_Request):
    """``POST /api/admin/users``: a user of the admin's org (the id is minted)."""

    handle: StrictStr = Field(description="A display handle, 1-200 characters.")
    role: OrgRole = "member"


class UserPatch(_Request):
    """``PATCH /api/admin/users/{id}``."""

    handle: StrictStr | None = None
    role: OrgRole | None = None


class UserOut(BaseModel):
    """A user of the org."""

    id: str
    handle: str
    role: str
    created_at: datetime


class ProjectIn(_Request):
    """``POST /api/admin/projects``."""

    id: StrictStr | None = Field(
        default=None, description="A project id `[A-Za-z0-9_.:-]{1,128}` (default: minted)."
    )
    name: StrictStr
    visibility: Visibility = "private"


class ProjectPatch(_Request):
    """``PATCH /api/admin/projects/{id}``."""

    name: StrictStr | None = None
    visibility: Visibility | None = None


class ProjectOut(BaseModel):
    """A project of the org."""

    id: str
    name: str
    visibility: str
    created_at: datetime


class MemberIn(_Request):
    """``PUT /api/admin/projects/{project}/members/{user}``."""

    role: ProjectRole


class MemberOut(BaseModel):
    """A user's role in a project."""

    project_id: str
    user_id: str
    role: str


def _read_scope() -> list[KeyScope]:
    return ["read"]


class KeyIn(_Request):
    """``POST /api/admin/keys``."""

    user_id: StrictStr
    scopes: list[KeyScope] = Field(default_factory=_read_scope, min_length=1)
    projects: list[StrictStr] | None = Field(
        default=None, description="Restrict the key to these projects (default: unrestricted)."
    )
    label: StrictStr | None = None


class KeyOut(BaseModel):
    """An API key's record; the secret itself is never stored nor listed."""

    id: str
    user_id: str
    scopes: list[str]
    projects: list[str] | None
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    """A freshly minted key: ``key`` is shown this once."""

    key: str
