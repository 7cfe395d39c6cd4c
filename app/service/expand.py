"""``expand_neighbors``: widen known memories into their authorized graph neighborhood (rule:
walk-reference-semantics).

The rules (normalisation, clamping, seed cap, echo of applied values, previews) live here; the
walk itself is the recursive CTE of :mod:`app.repo.walk`, where the read rule gates every step.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core import policy
from app.core.errors import BadRequest
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.domain.passages import passage_name
from app.domain.preview import preview_prefix
from app.domain.schemas import ExpandRequest, ExpandResponse
from app.domain.validation import normalize_names, normalize_project, normalize_seeds
from app.repo import walk as walk_repo
from app.service.session import (
    authenticate,
    check_reader,
    check_scopes,
    require_key,
    run_snapshot,
)


@functools.lru_cache(maxsize=256)
def _policy_params(relationship_types: tuple[str, ...] | None) -> dict[str, object]:
    """The walk's parameters that depend only on the policy and ``relationship_types``: the
    direction rules and a hub's tiers (computed once per distinct filter; without a filter the
    tiers are the statement's own defaults, NULL here)."""
    named = list(relationship_types) if relationship_types is not None else None
    rules = policy.hop_rules(named)
    tiers: dict[str, object] = dict.fromkeys(
        ("out_tier_lo", "out_tier_hi", "out_exact", "in_tier_lo", "in_tier_hi", "in_exact")
    )
    if named is not None:
        for way, outgoing in (("out", True), ("in", False)):
            order = policy.hop_order(rules, outgoing=outgoing)
            tiers[f"{way}_tier_lo"], tiers[f"{way}_tier_hi"] = order.ranges()
            tiers[f"{way}_exact"] = order.exact
    return {
        "rel_filter": rules.rel_filter,
        "out_denied": rules.out_denied,
        "in_denied": rules.in_denied,
        **tiers,
        "max_weight": policy.max_weight(named),
    }


def walk_params(
    reader: Reader | None,
    *,
    origins: list[str],
    depth: int,
    limit: int,
    preview_chars: int,
    include_incoming: bool,
    relationship_types: list[str] | None,
    types: list[str] | None,
    project: str | None,
    settings: Settings,
) -> dict[str, object]:
    """Every bound parameter of the walk statement for one request (also used by ``explain``).

    The caps (rule: bounded-walk) are sized from the answer, not the graph, unless configured:
    ``hop_cap`` (rows one node may enter per hop arm) = ``limit + 1 + len(origins)``,
    ``level_cap`` (nodes a level before the last may keep) = ``4 × (limit + 1)``.

    Without ``reader`` (the keyed walk of :func:`expand_for_key`, which reads the reader and the
    seeds from the key in the same statement) the reader's parameters are left out and
    ``origins`` are the asked seeds: the statement sizes the hop cap from the seeds it resolves
    (``walk_hop_cap``: the configured cap, or None).
    """
    level_cap = settings.walk_level_cap or policy.LEVEL_CAP_FACTOR * (limit + 1)
    if reader is None:
        sized: dict[str, object] = {"walk_hop_cap": settings.walk_hop_cap or None}
    else:
        sized = {**reader.params(), "hop_cap": settings.walk_hop_cap or limit + 1 + len(origins)}
    rels = tuple(relationship_types) if relationship_types is not None else None
    return {
        **sized,
        **_policy_params(rels),
        "seed_ids": origins,
        "depth": depth,
        "limit": limit,
        "preview_chars": preview_chars,
        "include_incoming": include_incoming,
        "types": types,
        "project": project,
        "level_cap": level_cap,
        "hub_degree": settings.walk_hub_degree,
    }


@dataclass(frozen=True)
class _Asked:
    """An expand request after normalisation and clamping (the values echoed in ``filters``)."""

    walked: list[str]  # the first MAX_SEEDS distinct seeds
    overflow: list[str]  # the seeds past MAX_SEEDS (reported unresolved)
    rels: list[str] | None
    types: list[str] | None
    project: str | None
    depth: int
    limit: int
    preview_chars: int
    include_incoming: bool


def _asked(request: ExpandRequest) -> _Asked:
    """Normalise and clamp ``request``; ``BadRequest`` (400) for a bad seed or name."""
    seeds = normalize_seeds(request.entity_ids)
    return _Asked(
        walked=seeds[: policy.MAX_SEEDS],
        overflow=seeds[policy.MAX_SEEDS :],
        rels=normalize_names(request.relationship_types, field="relationship_types", upper=True),
        types=normalize_names(request.types, field="types", upper=False),
        project=normalize_project(request.project),
        depth=policy.DEPTH.clamp(request.depth),
        limit=policy.LIMIT.clamp(request.limit),
        preview_chars=policy.PREVIEW_CHARS.clamp(request.content_max_chars),
        include_incoming=True if request.include_incoming is None else request.include_incoming,
    )


async def expand_neighbors(
    conn: AsyncConnection,
    reader: Reader,
    request: ExpandRequest,
    *,
    settings: Settings | None = None,
) -> ExpandResponse:
    """Walk up to ``depth`` hops from the request's seeds, as ``reader`` may see them (rule:
    walk-reference-semantics).

    Seeds are stripped and de-duplicated; the first 8 are walked and the rest reported in
    ``unresolved`` (with ``filters.origin_limit = 8``). Bounds are clamped (depth 1..3, limit
    1..24, content_max_chars 0..50000) and echoed. Raises ``BadRequest`` (400) for an empty seed
    list, a blank or non-string seed, or a relationship/type/project name outside its alphabet.
    An absent seed and an unreadable one are reported identically in ``unresolved``.
    """
    asked = _asked(request)
    resolved = await walk_repo.resolve_seeds(
        conn, reader_params=reader.params(), seeds=asked.walked, project=asked.project
    )
    return await _expand(conn, reader, asked, resolved, settings or get_settings())


async def expand_for_key(
    conn: AsyncConnection,
    key: str | None,
    request: ExpandRequest,
    *,
    settings: Settings | None = None,
) -> bytes:
    """:func:`expand_neighbors` for the reader behind API ``key``, as the response's JSON, in
    ONE statement that authenticates the key, resolves the seeds and walks
    (``KEYED_WALK_SQL`` of :mod:`app.repo.walk`: one snapshot without a transaction; REST and
    MCP send this statement). ``conn`` is a connection of
    :func:`app.core.db.statement_engine` (generic plans; any connection gives the same answer).

    Same answers and errors as authenticating with :func:`app.service.session.authenticate`
    (scope ``read``) and then calling :func:`expand_neighbors`: 401 for a missing, unknown or
    revoked key, 403 without the ``read`` scope, and those before any 400 of the request."""
    if not key:
        check_reader(None, key, scope="read")
    try:
        asked = _asked(request)
    except BadRequest:
        await authenticate(conn, key, scope="read")  # a bad key answers 401/403 first
        raise
    assert key is not None
    s = settings or get_settings()
    # the seeds are resolved by the statement itself, under the key's read rule
    params = _asked_params(None, asked, asked.walked, s)
    done = await walk_repo.keyed_walk(conn, key=key, params=params)
    check_scopes(done.scopes, key, scope="read")
    return answer_json(asked, done.seeds, done.rows, done.capped)


async def expand_keyed(
    engine: AsyncEngine,
    key: str | None,
    request: ExpandRequest,
    *,
    settings: Settings | None = None,
) -> bytes:
    """The unit of work of ``expand_neighbors`` on every surface (``POST /api/search/expand``
    and the MCP tool): no key is refused before a connection is taken, then
    :func:`expand_for_key` runs as one statement on its own snapshot
    (:func:`app.service.session.run_snapshot` ``single``), so REST and MCP send the same
    statement."""
    require_key(key)
    assert key is not None
    return await run_snapshot(
        engine, lambda conn: expand_for_key(conn, key, request, settings=settings), single=True
    )


def _asked_params(
    reader: Reader | None, asked: _Asked, origins: list[str], s: Settings
) -> dict[str, object]:
    """:func:`walk_params` of a normalised request ``asked`` from ``origins``."""
    return walk_params(
        reader,
        origins=origins,
        depth=asked.depth,
        limit=asked.limit,
        preview_chars=asked.preview_chars,
        include_incoming=asked.include_incoming,
        relationship_types=asked.rels,
        types=asked.types,
        project=asked.project,
        settings=s,
    )


async def _expand(
    conn: AsyncConnection,
    reader: Reader,
    asked: _Asked,
    resolved_seeds: list[str],
    s: Settings,
) -> ExpandResponse:
    """The walk from the readable seeds ``resolved_seeds`` of ``asked``, and the answer."""
    resolved = set(resolved_seeds)
    origins = [seed for seed in asked.walked if seed in resolved]
    rows: list[walk_repo.WalkRow] = []
    capped = False
    if origins:
        answer = await walk_repo.walk(conn, params=_asked_params(reader, asked, origins, s))
        rows, capped = answer.rows, answer.capped
    return _answer(asked, origins, rows, capped)


def _fields(
    asked: _Asked, origins: list[str], rows: list[walk_repo.WalkRow], capped: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response to ``asked`` walked from ``origins`` (its readable seeds, request order), as
    :class:`ExpandResponse`'s fields in order, and its neighbours (each one's ``metadata`` still
    the row's JSON text)."""
    resolved = set(origins)
    unresolved = [seed for seed in asked.walked if seed not in resolved] + asked.overflow
    limit, preview_chars = asked.limit, asked.preview_chars
    filters: dict[str, Any] = {
        "relationship_types": asked.rels,
        "types": asked.types,
        "include_incoming": asked.include_incoming,
        "project": asked.project,
        "depth": asked.depth,
        "limit": limit,
        "content_max_chars": preview_chars,
        "round_budget": policy.ROUND_BUDGET,
        "frontier_capped": capped,
    }
    if asked.overflow:
        filters["origin_limit"] = policy.MAX_SEEDS
    neighbors = [_neighbor(row, preview_chars) for row in rows[:limit]]
    fields = {
        "origins": origins,
        "unresolved": unresolved,
        "neighbors": neighbors,
        "total": len(neighbors),
        "depth": asked.depth,
        "limit": limit,
        "truncated": len(rows) > limit,
        "filters": filters,
    }
    return fields, neighbors


def _answer(
    asked: _Asked, origins: list[str], rows: list[walk_repo.WalkRow], capped: bool
) -> ExpandResponse:
    """The response to ``asked`` walked from ``origins``, as the model."""
    fields, neighbors = _fields(asked, origins, rows, capped)
    for n in neighbors:
        n["metadata"] = json.loads(n["metadata"])
    return ExpandResponse.model_validate(fields)


def answer_json(
    asked: _Asked, origins: list[str], rows: list[walk_repo.WalkRow], capped: bool
) -> bytes:
    """The response to ``asked`` walked from ``origins``, as the JSON of
    :class:`ExpandResponse` (same fields, same order), encoded once: each neighbour's metadata
    is the statement's JSON text, embedded as it is (never decoded and encoded again)."""
    fields, neighbors = _fields(asked, origins, rows, capped)
    for n in neighbors:
        n["metadata"] = orjson.Fragment(n["metadata"])
    return orjson.dumps(fields)


def _neighbor(row: walk_repo.WalkRow, preview_chars: int) -> dict[str, Any]:
    """The fields of :class:`Neighbor` for ``row``, in order (``metadata``: its JSON text)."""
    content, _ = preview_prefix(row.content_prefix, row.content_length, preview_chars)
    is_passage = row.parent_id is not None
    name = (
        passage_name(row.name, row.passage_index or 0, row.passage_total, row.breadcrumb)
        if is_passage
        else row.name
    )
    return {
        "id": row.id,
        "type": row.type,
        "name": name,
        "relationship": row.relationship,
        "direction": "outgoing" if row.outgoing else "incoming",
        "distance": row.distance,
        "score": round(row.score, 6),
        "content": content,
        "project_id": row.project_id,
        "lifecycle": row.lifecycle,
        "metadata": row.metadata,
        "passage_index": row.passage_index,
        "parent_entity_id": row.parent_id,
        "widen_with": "fetch_slice" if is_passage else None,
    }
