"""``context``: one pack of what the memory holds about a goal (rule: context-budget-whole).

How a pack is composed:

1. **Candidates.** Search's pipeline, asked once (:func:`app.domain.search.candidates`: the
   goal's words, the full-text, exact and semantic lanes, fused by reciprocal rank fusion), with
   the same read rule, lifecycle default (active and superseded, retired never) and bounded
   cost; no folding (the pack handles a memory's spans itself). When a bound cut candidates,
   the notes are ranked again on their own, so the note lane never misses a note because other
   types filled the cap. Each item's ``reason`` gives its lane ranks.
2. **Selection** (:func:`select`), at most ``limit`` items, at most
   :data:`~app.core.policy.CONTEXT_PER_MEMORY` (3) of them from one memory (itself and its
   passages; three adjacent spans are the measured answer exposure of a whole memory):
   - the **reserved note lane**: the best-ranked notes, up to exactly
     :data:`~app.core.policy.NOTE_LANE` (3) items (fewer only when fewer notes match, or when
     ``limit`` is smaller), kept even when stronger items of other types would fill the pack,
     and marked ``metadata.note_lane: true``. The lane never grows with ``limit``: further notes
     compete like any other item;
   - the other slots: the best-ranked remaining candidates, whatever their type.
3. **Covered parents.** When the pack holds the complete span set of a memory cut losslessly
   into prose (or declared) spans, the memory itself is left out (its text is all there) and its
   slot goes to the next candidate.
4. **Related.** Each item gets up to ``related_limit`` one-hop neighbors, all items at once in
   one statement (:mod:`app.repo.related`): the hops, read rule, weights and order of a depth-1
   :func:`app.service.expand.expand_neighbors` walk from that item alone; a memory's over every
   policy relationship but the span links (its own spans are one ``fetch_slice`` away and would
   crowd out its neighbors), a passage's to its parent. A related entry names the neighbor and
   the hop, and carries no text.
5. **Facets**, by the memory's type (a passage: its parent's): ``decisions`` (decision),
   ``active_work`` (task whose ``metadata.status`` is not a done status, and not superseded),
   ``artifacts`` (artifact, document), ``notes`` (note), ``other`` (everything else).
6. **Size** (:func:`fit`). The whole response stays within ``markdown_token_budget`` × 4 × 1.25
   characters of JSON, and no body appears twice: the sections carry ids, scores, reasons,
   previews of at most :data:`~app.core.policy.CONTEXT_PREVIEW_CHARS` characters and the
   related entries; the Markdown carries the text. Items are taken reserved notes first, then
   by rank, while each leaves room for its Markdown heading and a line (80 characters) of text; the
   rest are left out (``filters.left_out_for_budget``, ``truncated``). Related lists are then
   given, in the same order, while the sections stay within half of the bound
   (``filters.related_left_out_for_budget`` counts the items whose list did not fit).
7. **Markdown** (:func:`render_markdown`): the text of the items, within ``markdown_token_budget``
   × 4 characters and what the sections leave of the response bound. Each text is the part
   that matches the goal (rule: context-budget-whole): a passage's text, and for a
   memory the text of its best-matching spans by search's BM25 (the statement of search's
   ``metadata.focus``, the goal's words and weights) that are not items of the pack
   themselves, the best two (a memory never cut: its body), named in the Markdown;
   each cut to its share as the query-focused excerpt (:func:`app.domain.excerpt.excerpt`),
   lines kept (code stays code). Shares fall with rank: the item ranked r-th gets 1/r of the
   best one's (a text shorter than its share leaves the rest to the others). Measured on the
   PEP questions (``docs/eval.md``): the pack's Markdown held the answer phrase for 98 of 232
   questions with openings and equal shares, 155 now.

A named project the reader cannot read answers exactly as a project that does not exist: an
empty pack (the project is echoed as sent, in both cases).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.domain.excerpt import excerpt, excerpt_at, matches
from app.domain.preview import preview
from app.domain.schemas import (
    ContextItem,
    ContextRequest,
    ContextResponse,
    ContextSections,
    RelatedItem,
)
from app.domain.search import (
    EXACT,
    FULLTEXT,
    SEMANTIC,
    Filters,
    Query,
    Ranked,
    SearchSettings,
    candidates,
    fused_order,
    hit_fields,
    normalize_query,
    search_settings,
)
from app.domain.search.focus import best_spans
from app.domain.validation import normalize_project
from app.repo import related as related_repo
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
# Related memories of a memory item: every relationship of the policy but the span links (a memory's
# own spans are one `fetch_slice` away, and would crowd out its real neighbors).
MEMORY_RELATED_RELATIONSHIPS = sorted(set(policy.RELATIONSHIPS) - {"PART_OF", "DERIVED_FROM"})
_GOAL_TITLE_CHARS = 200
_NAME_CHARS = 160
_RELATED_NAME_CHARS = 80
_MIN_PREVIEW_CHARS = 24
_MIN_TEXT_CHARS = 80  # the least text (a line) an item of the pack gets room for in Markdown
_MARKDOWN_FRAME_CHARS = 200  # the Markdown's title, facet headings and closing line, about


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
    return sorted(chosen.values(), key=lambda p: fused_order(p.ranked))


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
    ranks = [
        f"{label} #{lanes[lane]}"
        for lane, label in ((FULLTEXT, "words"), (EXACT, "id/name"), (SEMANTIC, "meaning"))
        if lane in lanes
    ]
    if ranks:
        parts.append("matches the goal: " + ", ".join(ranks))
    if parent_id is not None and parent_id in covered:
        parts.append(f"with the pack's other spans it covers {parent_id}, left out")
    return "; ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, chars: int) -> str:
    return preview(_one_line(text), chars)[0]


@dataclass(frozen=True)
class _Block:
    """One item's Markdown: its head line, text, related line; and how much it is worth
    keeping (``keep``: reserved notes above the rest, then by rank; lowest is dropped first)."""

    facet: str
    head: str
    body: str
    related: str | None
    keep: tuple[int, int]
    weight: float = 1.0
    """The block's share of the text, relative to the best item's: 1 / its rank (1, 1/2, ...)."""


def _text_lines(text: str) -> str:
    """``text`` with its line structure kept (code stays code): trailing spaces dropped, runs of
    blank lines made one, no blank line at either end."""
    out: list[str] = []
    gap = False
    for line in text.splitlines():
        line = line.rstrip()
        if not line.strip():
            gap = bool(out)
            continue
        if gap:
            out.append("")
            gap = False
        out.append(line)
    return "\n".join(out)


_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


def _close_fences(body: str, start: int, cut: str) -> str:
    """``cut`` (the stretch of ``body`` from ``start``) with its Markdown code fences balanced: a
    cut that starts inside a fenced block reopens it (with the block's own fence line), one
    that ends inside a block closes it, so the rest of the pack is not read as code."""
    before = _FENCE.findall(body, 0, start)
    if len(before) % 2:
        opener = [m for m in _FENCE.finditer(body, 0, start)][-1]
        line_end = body.find("\n", opener.start())
        fence_line = body[opener.start() : line_end if line_end >= 0 else len(body)].strip()
        cut = fence_line + "\n" + cut
    inside = _FENCE.findall(cut)
    if len(inside) % 2:
        cut = cut + "\n" + inside[-1]
    return cut


class _Texts:
    """Each block's text as the Markdown shows it at a given share: the query-focused excerpt
    (:func:`app.domain.excerpt.excerpt`; without words, the opening) of at most
    ``share × weight − 6`` characters, each line indented by two spaces under its bullet, or
    nothing below :data:`_MIN_PREVIEW_CHARS`. The share is searched for on an estimate of each
    text's size (exact when the text fits whole); the composition made is then measured."""

    def __init__(self, words: Sequence[tuple[str, float]], *, escaped: bool = False) -> None:
        self.words = words
        self.per_line = 3 if escaped else 2  # a line's indent, and its newline's JSON escape
        self.found: dict[int, list[tuple[int, int, float]]] = {}

    def budget(self, block: _Block, share: int) -> int:
        return int(share * block.weight) - 6

    def text(self, block: _Block, share: int) -> str:
        budget = self.budget(block, share)
        if not block.body or budget < _MIN_PREVIEW_CHARS:
            return ""
        start = 0
        if len(block.body) <= budget:
            cut = block.body
        elif self.words:
            where = self.found.get(id(block))
            if where is None:
                where = self.found[id(block)] = matches(block.body, self.words)
            start, cut = excerpt_at(block.body, where, budget)
        else:
            cut = preview(block.body, budget)[0]
        cut = _close_fences(block.body, start, cut)
        return "\n".join("  " + line if line else "" for line in cut.split("\n")) + "\n"

    def estimate(self, blocks: list[_Block], share: int) -> int:
        """About how many characters the texts of ``blocks`` add to :func:`_compose` at
        ``share``: exact for a text shown whole; else its budget, with the indents of its
        share of the body's lines."""
        total = 0
        for b in blocks:
            budget = self.budget(b, share)
            if not b.body or budget < _MIN_PREVIEW_CHARS:
                continue
            lines = b.body.count("\n")
            if len(b.body) <= budget:
                total += len(b.body) + self.per_line * (lines + 1)
            else:
                total += budget + self.per_line * (lines * budget // len(b.body) + 1)
        return total


def _compose(
    title: str,
    blocks: list[_Block],
    *,
    related: bool,
    share: int,
    omitted: int,
    texts: _Texts | None = None,
) -> str:
    out = [title]
    for facet in FACETS:
        mine = [b for b in blocks if b.facet == facet]
        if not mine:
            continue
        out.append(f"\n## {FACET_TITLES[facet]}\n")
        for b in mine:
            out.append(b.head + "\n")
            if texts is not None:
                out.append(texts.text(b, share))
            if related and b.related:
                out.append(b.related + "\n")
    if omitted:
        out.append(f"\n_{omitted} more item(s) of the pack left out to fit the token budget._\n")
    return "".join(out)


def render_markdown(
    goal: str,
    sections: ContextSections,
    *,
    budget_tokens: int,
    texts: Mapping[str, str] | None = None,
    omitted: int = 0,
    words: Sequence[tuple[str, float]] = (),
    json_chars: int | None = None,
    spans: Mapping[str, list[str]] | None = None,
) -> str:
    """The pack as Markdown of at most ``budget_tokens × 4`` characters, and at most
    ``json_chars`` characters once written as a JSON string (escapes counted), if given.

    A title, then one ``##`` section per non-empty facet (in facet order) with one bullet per item
    (name, id, type, lifecycle when not active, and ``spans[item.id]``, the spans its text comes
    from, when given), its text (``texts[item.id]``, else its preview; lines kept, indented
    under the bullet), and its related memories. To fit: the texts share what the headings
    leave, the item ranked r-th (by score) getting 1/r of the best one's share (a short text
    leaves its unused share to the others); if the headings alone do not fit, the related lines
    go, then the lowest-ranked items (reserved notes last). A closing line says how many items
    were left out, ``omitted`` (left out of the pack before) included. ``words`` (weighed
    query words): each text shows its query-focused excerpt rather than its opening.
    """
    limit = budget_tokens * policy.CHARS_PER_TOKEN
    if json_chars is not None:
        json_chars = max(0, json_chars)

    def fits(markdown: str) -> bool:
        if len(markdown) > limit:
            return False
        return json_chars is None or len(json.dumps(markdown, ensure_ascii=False)) - 2 <= json_chars

    bound = limit if json_chars is None else min(limit, json_chars)
    texts = texts or {}
    spans = spans or {}
    title = f"# Context: {_cut(goal, _GOAL_TITLE_CHARS)}\n"
    items: list[ContextItem] = [i for facet in FACETS for i in getattr(sections, facet)]
    rank = {i.id: n for n, i in enumerate(sorted(items, key=lambda i: (-i.score, i.id)))}
    blocks: list[_Block] = []
    for facet in FACETS:
        item: ContextItem
        for item in getattr(sections, facet):
            flags = [item.type] + ([item.lifecycle] if item.lifecycle != "active" else [])
            head = f"- **{_cut(item.name, _NAME_CHARS)}** `{item.id}` ({', '.join(flags)})"
            if spans.get(item.id):
                named = " and ".join(f"`{i}`" for i in spans[item.id])
                head += f", text from its span{'s' if len(spans[item.id]) > 1 else ''} {named}"
            related = None
            # a passage's parent is already in its name: the Markdown does not repeat it
            others = [n for n in item.related if n.id != item.parent_entity_id]
            if others:
                related = "  - related: " + "; ".join(
                    f"`{n.id}` {_cut(n.name, _RELATED_NAME_CHARS)} ({n.relationship})"
                    for n in others
                )
            lane = 1 if item.metadata.get("note_lane") is True else 0
            blocks.append(
                _Block(
                    facet=facet,
                    head=head,
                    body=_text_lines(texts.get(item.id, item.preview)),
                    related=related,
                    keep=(lane, -rank[item.id]),
                    weight=1.0 / (1 + rank[item.id]),
                )
            )
    drop_order = sorted(blocks, key=lambda b: b.keep)
    shown = list(blocks)
    dropped = 0
    with_related = True
    while True:
        skeleton = _compose(title, shown, related=with_related, share=0, omitted=omitted + dropped)
        if fits(skeleton):
            break
        if with_related and any(b.related for b in shown):
            with_related = False
            continue
        if not shown:
            return _cut(title, max(bound - 3, 0))
        drop = drop_order[dropped]
        shown = [b for b in shown if b is not drop]
        dropped += 1
    if not shown:
        return skeleton
    # the largest share of text per item that fits (shares a short text leaves unused go to the
    # others, since each text takes at most its share), found on an estimate of each text's
    # size; the composition is then measured, and the share narrowed while it does not fit
    cutter = _Texts(words, escaped=json_chars is not None)
    low, high = 0, int(max(len(b.body) / b.weight for b in shown)) + 6
    while low < high:
        mid = (low + high + 1) // 2
        if len(skeleton) + cutter.estimate(shown, mid) <= bound:
            low = mid
        else:
            high = mid - 1
    while True:  # the estimate may miss a cut's exact indents: measure, and narrow if over
        markdown = _compose(
            title, shown, related=with_related, share=low, omitted=omitted + dropped, texts=cutter
        )
        if fits(markdown) or low == 0:
            return markdown
        low = max(0, min(low - 1, int(low * bound / len(markdown))))


def _related_params(
    reader: Reader, *, item_ids: list[str], limit: int, project: str | None, settings: Settings
) -> dict[str, object]:
    """The bound parameters of :data:`app.repo.related.RELATED_SQL` for a pack's items."""
    rules = policy.hop_rules(MEMORY_RELATED_RELATIONSHIPS)
    rels, weights = policy.weight_arrays()
    return {
        **reader.params(),
        "item_ids": item_ids,
        "related_limit": limit,
        "project": project,
        "rel_filter": rules.rel_filter,
        "out_denied": rules.out_denied,
        "in_denied": rules.in_denied,
        "pol_rels": rels,
        "pol_weights": weights,
        "default_weight": policy.UNKNOWN_WEIGHT,
        "hop_cap": settings.walk_hop_cap,
    }


async def _related(
    conn: AsyncConnection,
    reader: Reader,
    item_ids: list[str],
    *,
    limit: int,
    project: str | None,
    settings: Settings,
) -> dict[str, list[RelatedItem]]:
    """Up to ``limit`` related memories of every item of ``item_ids`` (step 4 of the module
    docstring), in one statement; by item id, best first (items without any are absent)."""
    if not item_ids or limit <= 0:
        return {}
    rows = await related_repo.related(
        conn,
        params=_related_params(
            reader, item_ids=item_ids, limit=limit, project=project, settings=settings
        ),
    )
    return {
        item: [
            RelatedItem(
                id=r.id,
                type=r.type,
                name=_cut(r.name, _RELATED_NAME_CHARS),
                relationship=r.relationship,
                direction="outgoing" if r.outgoing else "incoming",
                distance=1,
                score=round(policy.score(r.relationship, 1), 6),
                lifecycle=r.lifecycle,
            )
            for r in found
        ]
        for item, found in rows.items()
    }


def _trim_overlaps(
    openings: dict[str, str], hits: Mapping[str, search_repo.Hit], ids: list[str]
) -> None:
    """No text twice: a memory's text that is its body's opening (``openings``, by memory id)
    stops where the first of its passages that is also in the pack (``ids``) begins (a passage
    is an exact slice of its parent's body, at its ``start_offset``)."""
    for pid in ids:
        hit = hits.get(pid)
        if hit is None or hit.parent_id not in openings or hit.start_offset is None:
            continue
        opening = openings[hit.parent_id]
        if hit.start_offset < len(opening):
            openings[hit.parent_id] = opening[: hit.start_offset].rstrip()


@dataclass(frozen=True)
class _FocusText:
    """The text a memory item shows: its best-matching spans (ids, best first) that are not
    items of the pack themselves, joined."""

    ids: list[str]
    text: str


async def _focus_texts(
    conn: AsyncConnection,
    reader: Reader,
    *,
    picks: list[str],
    hits: Mapping[str, search_repo.Hit],
    query: Query,
    settings: SearchSettings,
) -> dict[str, _FocusText]:
    """For each memory item of the pack that holds a goal word: the text of its
    :data:`~app.core.policy.CONTEXT_MEMORY_SPANS` best-matching spans (search's
    ``metadata.focus`` statement, same words and weights) that are not items of the pack
    themselves, best first, each its query-focused excerpt of at most
    :data:`~app.core.policy.CONTEXT_TEXT_CHARS`; a memory never cut: its own body. By memory
    id."""
    memories = [i for i in picks if i in hits and hits[i].parent_id is None]
    weighted = query.weighted
    if not memories or not weighted:
        return {}
    in_pack = set(picks)
    best = await best_spans(
        conn,
        reader,
        memories,
        query,
        settings,
        per_memory=policy.CONTEXT_PER_MEMORY + policy.CONTEXT_MEMORY_SPANS,
    )
    chosen: dict[str, list[search_repo.Span]] = {}
    for memory, f in best.items():
        spans = [sp for sp in f.spans if sp.id not in in_pack or sp.id == memory]
        if spans:
            chosen[memory] = spans[: policy.CONTEXT_MEMORY_SPANS]
    rows = await search_repo.hits(
        conn,
        reader_params=reader.params(),
        ids=[sp.id for spans in chosen.values() for sp in spans if sp.passage_index is not None],
        preview_chars=search_repo.FOCUS_TEXT_CHARS,  # read for the goal-centred excerpt
    )
    out: dict[str, _FocusText] = {}
    for memory, spans in chosen.items():
        ids: list[str] = []
        parts: list[str] = []
        for sp in spans:
            if sp.passage_index is None:
                text = best[memory].content
            elif sp.id in rows:
                text = rows[sp.id].content_prefix
            else:  # pragma: no cover - one snapshot: the span is still there
                continue
            ids.append(sp.id)
            parts.append(excerpt(text, weighted, policy.CONTEXT_TEXT_CHARS))
        if parts:
            out[memory] = _FocusText(ids, "\n\n".join(parts))
    return out


@dataclass
class _Placed:
    """An item of the pack being sized: its facet, how much it is worth keeping (higher: kept
    first), its related list, and its JSON size as the sections would carry it now."""

    facet: str
    item: ContextItem
    keep: tuple[int, int]
    related: list[RelatedItem]
    chars: int = 0

    def carry_related(self, on: bool) -> None:
        """Give the item its related list (or none), and measure it again."""
        self.item.related = self.related if on else []
        self.chars = len(self.item.model_dump_json()) + 1  # and its comma

    @property
    def markdown_floor(self) -> int:
        """The least Markdown the item needs: its heading and a little text."""
        return len(self.item.name[:_NAME_CHARS]) + len(self.item.id) + 24 + _MIN_TEXT_CHARS


def fit(placed: list[_Placed], *, base_chars: int, max_chars: int) -> tuple[list[_Placed], int]:
    """Choose what of the pack the response carries (step 6 of the module docstring).

    ``base_chars``: the response without sections and Markdown. Items are taken most worth
    keeping first (reserved notes, then by rank) while each still leaves room in ``max_chars``
    for its Markdown floor; the rest are left out. Then related lists are given, in the same
    order, to each item whose list keeps the sections within half of ``max_chars`` (the
    Markdown keeps the other half). Returns the items kept (in their order) and how many kept
    items lost their related list to the budget.
    """
    order = sorted(placed, key=lambda p: p.keep, reverse=True)
    for p in placed:
        p.carry_related(False)
    total = base_chars + _MARKDOWN_FRAME_CHARS
    chosen: set[int] = set()
    for p in order:
        if total + p.chars + p.markdown_floor > max_chars:
            break
        total += p.chars + p.markdown_floor
        chosen.add(id(p))
    kept = [p for p in placed if id(p) in chosen]
    sections = base_chars + sum(p.chars for p in kept)
    emptied = 0
    for p in order:
        if id(p) not in chosen or not p.related:
            continue
        before = p.chars
        p.carry_related(True)
        if sections + p.chars - before <= max_chars // 2:
            sections += p.chars - before
        else:
            p.carry_related(False)
            emptied += 1
    return kept, emptied


async def context_pack(
    conn: AsyncConnection,
    reader: Reader,
    request: ContextRequest,
    *,
    settings: Settings | None = None,
    pipeline: SearchSettings | None = None,
) -> ContextResponse:
    """Compose the pack of ``request.goal`` as ``reader`` may see it (see the module docstring);
    ``pipeline``: search's settings for its candidates (default: the service's).

    Bounds are clamped and echoed: limit 1..50 (default 12), related_limit 0..5 (default 3),
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
    max_chars = int(budget * policy.CHARS_PER_TOKEN * policy.CONTEXT_RESPONSE_FACTOR)
    lifecycles = list(policy.SEARCH_LIFECYCLES)
    ss = pipeline or search_settings(s)
    cap = ss.candidate_cap

    found = await candidates(
        conn, reader, goal, Filters(types=None, lifecycles=lifecycles, project=project), ss
    )
    ranked, capped, query = found.ranked, found.capped, found.query
    weighted = query.weighted
    notes: list[Ranked] | None = None
    if capped:  # the cap may have cut notes out: rank the notes on their own for the lane
        notes = (
            await candidates(
                conn,
                reader,
                goal,
                Filters(types=[NOTE_TYPE], lifecycles=lifecycles, project=project),
                ss,
            )
        ).ranked

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
                preview_chars=search_repo.FOCUS_TEXT_CHARS,  # read for the goal-centred excerpt
            )
        )
        newly = covered_parents(picks, hits) - left_out
        if not newly:
            break
        left_out |= newly

    related: dict[str, list[RelatedItem]] = {}
    if include_related and related_limit > 0:
        related = await _related(
            conn,
            reader,
            [p.ranked.id for p in picks if p.ranked.id in hits],
            limit=related_limit,
            project=project,
            settings=s,
        )

    focused = await _focus_texts(
        conn,
        reader,
        picks=[p.ranked.id for p in picks],
        hits=hits,
        query=query,
        settings=ss,
    )
    placed: list[_Placed] = []
    texts: dict[str, str] = {}
    openings: dict[str, str] = {}  # memories whose text is their body's opening
    text_spans: dict[str, list[str]] = {}
    for n, pick in enumerate(picks):
        hit = hits.get(pick.ranked.id)
        if hit is None:  # pragma: no cover - one snapshot: a candidate's row is still there
            continue
        fields = hit_fields(hit, policy.CONTEXT_PREVIEW_CHARS)
        metadata: dict[str, Any] = {}
        if hit.parent_id is not None:
            metadata["breadcrumb"] = hit.breadcrumb
            metadata["passage_total"] = hit.passage_total
        if pick.in_note_lane:
            metadata["note_lane"] = True
        best = focused.get(hit.id)
        if best is not None:
            if best.ids != [hit.id]:  # spans of the memory (never cut: its own body)
                text_spans[hit.id] = best.ids
            texts[hit.id] = best.text
        elif hit.parent_id is not None:  # a passage: the stretch of it the goal's words are in
            texts[hit.id] = excerpt(hit.content_prefix, weighted, policy.CONTEXT_TEXT_CHARS)
        else:  # a memory whose matching spans are all items (or none matches): its opening
            openings[hit.id] = hit.content_prefix
        item = ContextItem(
            id=fields["id"],
            type=fields["type"],
            name=fields["name"],
            preview=fields["content"],
            score=round(pick.ranked.score, 6),
            reason=_reason(pick, left_out, hit.parent_id),
            project_id=fields["project_id"],
            lifecycle=fields["lifecycle"],
            metadata=metadata,
            passage_index=fields["passage_index"],
            parent_entity_id=fields["parent_entity_id"],
            widen_with=fields["widen_with"],
            related=[],
        )
        facet = facet_of(hit.memory_type, hit.lifecycle, hit.metadata)
        keep = (1 if pick.in_note_lane else 0, -n)
        placed.append(_Placed(facet, item, keep, related=related.get(hit.id, [])))

    eligible = {r.id for r in ranked} - left_out
    filters: dict[str, Any] = {
        "project": project,
        "limit": limit,
        "include_related": include_related,
        "related_limit": related_limit,
        "markdown_token_budget": budget,
        "response_max_chars": max_chars,
        "lifecycle": lifecycles,
        "note_lane": policy.NOTE_LANE,
        "per_memory": policy.CONTEXT_PER_MEMORY,
        "candidate_cap": cap,
        "candidates_capped": capped,
        "left_out_parents": sorted(left_out),
        "left_out_for_budget": len(placed),  # the widest value it can take, for sizing
        "related_left_out_for_budget": len(placed),
        "round_budget": policy.ROUND_BUDGET,
    }

    def response(kept: list[_Placed], markdown: str) -> ContextResponse:
        sections = ContextSections(
            **{facet: [p.item for p in kept if p.facet == facet] for facet in FACETS}
        )
        return ContextResponse(
            goal=goal,
            sections=sections,
            total_items=len(kept),
            limit=limit,
            truncated=len(eligible) > len(kept),
            markdown=markdown,
            markdown_tokens=math.ceil(len(markdown) / policy.CHARS_PER_TOKEN),
            filters=filters,
        )

    base_chars = len(response([], "").model_dump_json())
    kept, emptied = fit(placed, base_chars=base_chars, max_chars=max_chars)
    _trim_overlaps(openings, hits, [p.item.id for p in kept])
    texts.update(
        (memory, preview(opening, policy.CONTEXT_TEXT_CHARS)[0] if opening else "")
        for memory, opening in openings.items()
    )
    filters["left_out_for_budget"] = len(placed) - len(kept)
    filters["related_left_out_for_budget"] = emptied
    draft = response(kept, "")
    # the Markdown keeps at least its title and closing line, even where the echoed filters
    # alone nearly fill a tiny budget's bound (the bound is "about" there)
    floor = len(_cut(goal, _GOAL_TITLE_CHARS)) + 90
    room = max(max_chars - len(draft.model_dump_json()), floor)
    while True:
        markdown = render_markdown(
            goal,
            draft.sections,
            budget_tokens=budget,
            texts=texts,
            json_chars=room,
            omitted=len(placed) - len(kept),
            words=weighted,
            spans=text_spans,
        )
        pack = response(kept, markdown)
        over = len(pack.model_dump_json()) - max_chars
        if over <= 0 or room <= floor:
            return pack
        room = max(room - over, floor)  # JSON escapes made the Markdown longer
