"""``context``: one pack of what the memory holds about a goal (contract §8, issue 4).

How a pack is composed:

1. **Candidates.** The statement of :mod:`app.domain.search` runs twice, fused into three lanes
   by reciprocal rank fusion (k = 60): ``all_words`` (the goal as web-search text: a memory
   holding every word), ``any_word`` (the goal's words joined by ``or``: a goal is prose, and a
   memory need not hold every word of it) and ``exact`` (the goal as an id or the start of a
   name). Same read rule, same lifecycle default (active and superseded, retired never), same
   bounded cost; no folding (the pack handles a memory's spans itself). When a lane hit its cap,
   the notes are ranked again on their own, so the note lane never misses a note because other
   types filled the cap. Each item's ``metadata.match`` gives its lane ranks.
2. **Selection** (:func:`select`), at most ``limit`` items, at most
   :data:`~app.domain.policy.CONTEXT_PER_MEMORY` (3) of them from one memory (itself and its
   passages; three adjacent spans are the measured answer exposure of a whole memory):
   - the **reserved note lane**: the best-ranked notes, up to exactly
     :data:`~app.domain.policy.NOTE_LANE` (3) items (fewer only when fewer notes match, or when
     ``limit`` is smaller), kept even when stronger items of other types would fill the pack,
     and marked ``metadata.note_lane: true``. The lane never grows with ``limit``: further notes
     compete like any other item;
   - the other slots: the best-ranked remaining candidates, whatever their type.
3. **Covered parents.** When the pack holds the complete span set of a memory cut losslessly
   into prose (or declared) spans, the memory itself is left out (its text is all there) and its
   slot goes to the next candidate.
4. **Related.** Each item gets up to ``related_limit`` one-hop neighbors from
   :func:`app.domain.expand.expand_neighbors`, the very walk (and read rule) of that verb; a
   memory's over every §4 relationship but the span links (its own spans are one
   ``fetch_slice`` away and would crowd out its neighbors), a passage's over all of them.
   Cost: one walk per item (about 24 short index-only walks at the default limit).
5. **Facets**, by the memory's type (a passage: its parent's): ``decisions`` (decision),
   ``active_work`` (task whose ``metadata.status`` is not a done status, and not superseded),
   ``artifacts`` (artifact, document), ``notes`` (note), ``other`` (everything else).
6. **Markdown** (:func:`render_markdown`) within ``markdown_token_budget`` × 4 characters.

A named project the reader cannot read answers exactly as a project that does not exist: an
empty pack (the project is echoed as sent, in both cases).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.settings import Settings, get_settings
from app.domain import policy
from app.domain.expand import expand_neighbors
from app.domain.preview import preview
from app.domain.reader import Reader
from app.domain.schemas import (
    ContextItem,
    ContextRequest,
    ContextResponse,
    ContextSections,
    ExpandRequest,
    Neighbor,
)
from app.domain.search import (
    EXACT,
    Ranked,
    find_candidates,
    fuse,
    hit_fields,
    match_metadata,
    normalize_query,
)
from app.domain.validation import normalize_project
from app.repo import search as search_repo

FACETS = ("decisions", "active_work", "artifacts", "notes", "other")
FACET_TITLES = {
    "decisions": "Decisions",
    "active_work": "Active work",
    "artifacts": "Artifacts and documents",
    "notes": "Notes",
    "other": "Other",
}
DONE_STATUSES = frozenset(
    {"done", "complete", "completed", "closed", "resolved", "cancelled", "canceled", "wontfix"}
)
NOTE_TYPE = "note"
ALL_WORDS = "all_words"
ANY_WORD = "any_word"
LANES = (ALL_WORDS, ANY_WORD, EXACT)
# Related memories of a memory item: every relationship of §4 but the span links (a memory's own
# spans are one `fetch_slice` away, and would crowd out its real neighbors).
MEMORY_RELATED_RELATIONSHIPS = sorted(set(policy.RELATIONSHIPS) - {"PART_OF", "DERIVED_FROM"})
_WORD = re.compile(r"\w+")
_GOAL_TITLE_CHARS = 200
_NAME_CHARS = 160
_RELATED_NAME_CHARS = 80
_MIN_PREVIEW_CHARS = 24


def goal_words(goal: str) -> str:
    """The goal's words joined by ``or`` for ``websearch_to_tsquery`` (each word once; the word
    ``or`` itself, an operator there, is dropped). A goal without any word is sent as is."""
    seen: dict[str, str] = {}
    for word in _WORD.findall(goal):
        key = word.casefold()
        if key != "or" and key not in seen:
            seen[key] = word
    return " or ".join(seen.values()) if seen else goal


def facet_of(memory_type: str, lifecycle: str, metadata: dict[str, Any]) -> str:
    """The facet of a memory (see the module docstring)."""
    if memory_type == "decision":
        return "decisions"
    if memory_type == "task":
        status = str(metadata.get("status", "")).strip().casefold()
        if status in DONE_STATUSES or lifecycle != "active":
            return "other"
        return "active_work"
    if memory_type in ("artifact", "document"):
        return "artifacts"
    if memory_type == NOTE_TYPE:
        return "notes"
    return "other"


@dataclass(frozen=True)
class Pick:
    """One selected candidate, and whether it holds a slot of the reserved note lane."""

    ranked: Ranked
    in_note_lane: bool


def select(
    ranked: list[Ranked],
    *,
    limit: int,
    notes: list[Ranked] | None = None,
    left_out: Iterable[str] = (),
) -> list[Pick]:
    """The pack's items, best first (step 2 of the module docstring).

    ``ranked`` is every candidate, best first; ``notes`` the note candidates to fill the lane from
    (default: the notes of ``ranked``); ``left_out`` ids never selected (covered parents). At most
    ``limit`` items, at most ``CONTEXT_PER_MEMORY`` per memory, up to ``min(NOTE_LANE, limit)``
    of them notes held in the lane.
    """
    excluded = set(left_out)
    per_memory: dict[str, int] = {}
    chosen: dict[str, Pick] = {}

    def admit(r: Ranked, lane: bool) -> bool:
        if r.id in chosen or r.id in excluded:
            return False
        if per_memory.get(r.memory_id, 0) >= policy.CONTEXT_PER_MEMORY:
            return False
        per_memory[r.memory_id] = per_memory.get(r.memory_id, 0) + 1
        chosen[r.id] = Pick(r, lane)
        return True

    lane_size = min(policy.NOTE_LANE, limit)
    lane_pool = notes if notes is not None else [r for r in ranked if r.type == NOTE_TYPE]
    in_lane = 0
    for r in lane_pool:
        if in_lane >= lane_size:
            break
        if admit(r, True):
            in_lane += 1
    for r in ranked:
        if len(chosen) >= limit:
            break
        admit(r, False)
    return sorted(chosen.values(), key=lambda p: (-p.ranked.score, p.ranked.id))


def covered_parents(picks: list[Pick], hits: dict[str, search_repo.Hit]) -> set[str]:
    """Memories of the pack whose complete covering span set the pack holds: a lossless prose
    (or declared) cut whose every current span is in ``picks``. Evidence never covers."""
    spans: dict[str, set[str]] = {}
    totals: dict[str, int] = {}
    in_pack = {p.ranked.id for p in picks}
    for p in picks:
        hit = hits.get(p.ranked.id)
        if hit is None or hit.parent_id is None:
            continue
        if hit.passage_kind not in ("prose", "declared") or not hit.passages_lossless:
            continue
        spans.setdefault(hit.parent_id, set()).add(hit.id)
        totals[hit.parent_id] = hit.passage_total
    return {
        parent for parent, ids in spans.items() if len(ids) == totals[parent] and parent in in_pack
    }


def _reason(pick: Pick, covered: set[str], parent_id: str | None) -> str:
    lanes = pick.ranked.lanes
    parts: list[str] = []
    if pick.in_note_lane:
        parts.append(f"reserved note lane ({policy.NOTE_LANE} slots)")
    if ALL_WORDS in lanes:
        parts.append(f"holds all the goal's words (rank {lanes[ALL_WORDS]})")
    if ANY_WORD in lanes:
        parts.append(f"holds some of the goal's words (rank {lanes[ANY_WORD]})")
    if EXACT in lanes:
        parts.append(f"its id or name matches the goal (rank {lanes[EXACT]})")
    if parent_id is not None and parent_id in covered:
        parts.append(f"with the pack's other spans it covers {parent_id}, left out")
    return "; ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, chars: int) -> str:
    return preview(_one_line(text), chars)[0]


@dataclass(frozen=True)
class _Block:
    """One item's Markdown: its head line, preview text, related line; and how much it is worth
    keeping (``keep``: reserved notes above the rest, then by rank; lowest is dropped first)."""

    facet: str
    head: str
    body: str
    related: str | None
    keep: tuple[int, int]


def _compose(title: str, blocks: list[_Block], *, related: bool, share: int, omitted: int) -> str:
    out = [title]
    for facet in FACETS:
        mine = [b for b in blocks if b.facet == facet]
        if not mine:
            continue
        out.append(f"\n## {FACET_TITLES[facet]}\n")
        for b in mine:
            out.append(b.head + "\n")
            budget = share - 6  # two spaces of indent, a newline, and "..." at most
            if b.body and budget >= _MIN_PREVIEW_CHARS:
                out.append("  " + preview(b.body, budget)[0] + "\n")
            if related and b.related:
                out.append(b.related + "\n")
    if omitted:
        out.append(f"\n_{omitted} more item(s) of the pack left out to fit the token budget._\n")
    return "".join(out)


def render_markdown(goal: str, sections: ContextSections, *, budget_tokens: int) -> str:
    """The pack as Markdown of at most ``budget_tokens × 4`` characters.

    A title, then one ``##`` section per non-empty facet (in facet order) with one bullet per item
    (name, id, type, lifecycle when not active), its preview, and its related memories. To fit
    the budget: the previews share what the headings leave; if the headings alone do not fit,
    the related lines go, then the lowest-ranked items (reserved notes last), and a closing line
    says how many were left out.
    """
    max_chars = budget_tokens * policy.CHARS_PER_TOKEN
    title = f"# Context: {_cut(goal, _GOAL_TITLE_CHARS)}\n"
    items: list[ContextItem] = [i for facet in FACETS for i in getattr(sections, facet)]
    rank = {i.id: n for n, i in enumerate(sorted(items, key=lambda i: (-i.score, i.id)))}
    blocks: list[_Block] = []
    for facet in FACETS:
        item: ContextItem
        for item in getattr(sections, facet):
            flags = [item.type] + ([item.lifecycle] if item.lifecycle != "active" else [])
            head = f"- **{_cut(item.name, _NAME_CHARS)}** `{item.id}` ({', '.join(flags)})"
            related = None
            if item.related:
                related = "  - related: " + "; ".join(
                    f"`{n.id}` {_cut(n.name, _RELATED_NAME_CHARS)} ({n.relationship})"
                    for n in item.related
                )
            lane = 1 if item.metadata.get("note_lane") is True else 0
            blocks.append(
                _Block(
                    facet=facet,
                    head=head,
                    body=_one_line(item.preview),
                    related=related,
                    keep=(lane, -rank[item.id]),
                )
            )
    drop_order = sorted(blocks, key=lambda b: b.keep)
    shown = list(blocks)
    omitted = 0
    with_related = True
    while True:
        skeleton = _compose(title, shown, related=with_related, share=0, omitted=omitted)
        if len(skeleton) <= max_chars:
            break
        if with_related and any(b.related for b in shown):
            with_related = False
            continue
        if not shown:
            return _cut(title, max(max_chars - 3, 0))
        drop = drop_order[omitted]
        shown = [b for b in shown if b is not drop]
        omitted += 1
    if not shown:
        return skeleton
    share = (max_chars - len(skeleton)) // len(shown)
    text = _compose(title, shown, related=with_related, share=share, omitted=omitted)
    while len(text) > max_chars and share > 0:  # pragma: no cover - the share is a lower bound
        share -= 1
        text = _compose(title, shown, related=with_related, share=share, omitted=omitted)
    return text


async def _related(
    conn: AsyncConnection,
    reader: Reader,
    hit: search_repo.Hit,
    *,
    limit: int,
    project: str | None,
    settings: Settings,
) -> list[Neighbor]:
    """One hop of ``expand_neighbors`` from ``hit``: a memory's neighbors but its own spans; a
    passage's neighbors (its parent first among them)."""
    response = await expand_neighbors(
        conn,
        reader,
        ExpandRequest(
            entity_ids=[hit.id],
            relationship_types=None if hit.parent_id else MEMORY_RELATED_RELATIONSHIPS,
            depth=1,
            limit=limit,
            content_max_chars=policy.RELATED_PREVIEW_CHARS,
            project=project,
        ),
        settings=settings,
    )
    return response.neighbors


async def _ranked(
    conn: AsyncConnection,
    reader: Reader,
    *,
    goal: str,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    cap: int,
) -> tuple[list[Ranked], bool]:
    """The goal's candidates in three lanes (all its words, any of its words, exact), fused."""
    runs = []
    capped = False
    for lane, words in ((ALL_WORDS, goal), (ANY_WORD, goal_words(goal))):
        found, was_capped = await find_candidates(
            conn,
            reader,
            query=goal,
            words=words,
            types=types,
            lifecycles=lifecycles,
            project=project,
            cap=cap,
        )
        runs.append((lane, found))
        capped = capped or was_capped
    return fuse(runs), capped


async def context_pack(
    conn: AsyncConnection,
    reader: Reader,
    request: ContextRequest,
    *,
    settings: Settings | None = None,
) -> ContextResponse:
    """Compose the pack of ``request.goal`` as ``reader`` may see it (see the module docstring).

    Bounds are clamped and echoed: limit 1..50 (default 24), related_limit 0..5 (default 3),
    markdown_token_budget 100..32000 (default 4000; ``markdown`` holds at most 4 characters per
    token); the note lane is 3 slots whatever ``limit`` is. ``total_items`` counts the items of
    all sections; ``truncated`` says more matching memories existed. Raises ``BadRequest``
    (400) for a blank or too long goal, or a project name outside the id alphabet.
    """
    s = settings or get_settings()
    goal = normalize_query(request.goal, field="goal")
    project = normalize_project(request.project)
    limit = policy.CONTEXT_LIMIT.clamp(request.limit)
    include_related = True if request.include_related is None else request.include_related
    related_limit = policy.RELATED_LIMIT.clamp(request.related_limit)
    budget = policy.MARKDOWN_TOKENS.clamp(request.markdown_token_budget)
    lifecycles = list(policy.SEARCH_LIFECYCLES)
    cap = s.search_candidate_cap

    async def rank(types: list[str] | None) -> tuple[list[Ranked], bool]:
        return await _ranked(
            conn, reader, goal=goal, types=types, lifecycles=lifecycles, project=project, cap=cap
        )

    ranked, capped = await rank(None)
    notes: list[Ranked] | None = None
    if capped:  # the cap may have cut notes out: rank the notes on their own for the lane
        notes, _ = await rank([NOTE_TYPE])

    hits: dict[str, search_repo.Hit] = {}
    left_out: set[str] = set()
    while True:
        picks = select(ranked, limit=limit, notes=notes, left_out=left_out)
        missing = [p.ranked.id for p in picks if p.ranked.id not in hits]
        hits.update(
            await search_repo.hits(
                conn,
                reader_params=reader.params(),
                ids=missing,
                preview_chars=policy.CONTEXT_PREVIEW_CHARS,
            )
        )
        newly = covered_parents(picks, hits) - left_out
        if not newly:
            break
        left_out |= newly

    sections: dict[str, list[ContextItem]] = {facet: [] for facet in FACETS}
    for pick in picks:
        hit = hits.get(pick.ranked.id)
        if hit is None:  # pragma: no cover - one snapshot: a candidate's row is still there
            continue
        fields = hit_fields(hit, policy.CONTEXT_PREVIEW_CHARS)
        fields["metadata"]["match"] = match_metadata(pick.ranked, LANES)
        if pick.in_note_lane:
            fields["metadata"]["note_lane"] = True
        related: list[Neighbor] = []
        if include_related and related_limit > 0:
            related = await _related(
                conn, reader, hit, limit=related_limit, project=project, settings=s
            )
        item = ContextItem(
            id=fields["id"],
            type=fields["type"],
            name=fields["name"],
            preview=fields["content"],
            score=round(pick.ranked.score, 6),
            reason=_reason(pick, left_out, hit.parent_id),
            project_id=fields["project_id"],
            lifecycle=fields["lifecycle"],
            metadata=fields["metadata"],
            passage_index=fields["passage_index"],
            parent_entity_id=fields["parent_entity_id"],
            widen_with=fields["widen_with"],
            related=related,
        )
        sections[facet_of(hit.memory_type, hit.lifecycle, hit.metadata)].append(item)

    packed = ContextSections(**sections)
    total = sum(len(v) for v in sections.values())
    eligible = {r.id for r in ranked} - left_out
    markdown = render_markdown(goal, packed, budget_tokens=budget)
    filters: dict[str, Any] = {
        "project": project,
        "limit": limit,
        "include_related": include_related,
        "related_limit": related_limit,
        "markdown_token_budget": budget,
        "lifecycle": lifecycles,
        "note_lane": policy.NOTE_LANE,
        "per_memory": policy.CONTEXT_PER_MEMORY,
        "candidate_cap": cap,
        "candidates_capped": capped,
        "left_out_parents": sorted(left_out),
        "round_budget": policy.ROUND_BUDGET,
    }
    return ContextResponse(
        goal=goal,
        sections=packed,
        total_items=total,
        limit=limit,
        truncated=len(eligible) > total,
        markdown=markdown,
        markdown_tokens=math.ceil(len(markdown) / policy.CHARS_PER_TOKEN),
        filters=filters,
    )
