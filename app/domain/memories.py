"""Writing one memory: fields, its passage cut and its derived mentions, in one transaction.

Used by the NDJSON import and by the REST/MCP write routes, so a memory is cut the same way
whichever door it came in by (rule: one-write-path). Rules:

- the revision starts at 1 and grows by one on every change (rule: revision-guards-every-field;
  every content edit; a change of name, scope, project, lifecycle or metadata too, so ``If-Match``
  guards every field);
- when the body or its cut changes, the cut is redone in the same transaction and passage ids
  are minted anew per (parent, revision, index); any other change keeps the spans (same ids,
  same text) and moves them to the new revision;
- an identical repeated write changes nothing (import idempotence);
- mentions are re-derived from ``[[entity_id]]`` links on every body edit: a link to an existing
  memory that ``may_link`` accepts (the writer's read rule, on REST and MCP) is a mention; any
  other link (target missing, or hidden from the writer: the two look alike) is kept as a
  **pending link** and nothing is dropped (rules: one-write-path, pending-links);
- creating a memory turns every pending link to its id into a mention (a forward link earlier in
  the same import, a later import, REST, MCP);
- an unchanged re-write whose stored mentions and pending links disagree with its links (rows
  written before pending links existed) re-derives them: outcome ``repaired``, no new revision;
- the rules of :mod:`app.domain.write_rules` hold here for every door: a reserved type or id is
  refused, scope and project agree, and a change of scope, project, lifecycle or links retires
  the communities holding the memories it touched.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import re
import sys
import threading
import unicodedata
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest, Conflict
from app.domain import spans, write_rules
from app.domain.passages import passage_id
from app.domain.validation import nfc
from app.repo import writes

LINK_RE = re.compile(r"\[\[([A-Za-z0-9_.:-]{1,128})\]\](?!\()")
"""A ``[[id]]`` link; one followed by ``(`` is a Markdown link whose text is in brackets (a
footnote reference ``[[1]](https://...)``), not a link to a memory."""
MAX_CONTENT_CHARS = 1_000_000
MAX_LINKS = 1_000
"""Distinct ``[[id]]`` link targets one body may hold (more: 400). A breaker's body of 30,000
links could never be written: deriving its mentions outlasted the statement timeout on every
try (a 503 that asked for a retry that could not succeed)."""

Outcome = Literal["created", "updated", "unchanged", "repaired"]


@dataclass
class EntityData:
    """The fields of one memory as a writer states them (ids already validated)."""

    id: str
    type: str
    name: str
    content: str
    scope: str
    project_id: str | None
    owner_id: str | None
    lifecycle: str = "active"
    metadata: dict[str, Any] = field(default_factory=dict)
    spans: Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        """Store text as it will be searched: name, body and span labels in Unicode NFC
        (:func:`app.domain.validation.nfc`), declared spans moved onto the normalised body."""
        self.name = nfc(self.name)
        if self.spans is not None:
            self.spans = nfc_spans(self.content, self.spans)
        self.content = nfc(self.content)

    def fields(self) -> dict[str, Any]:
        """The stored columns (no spans)."""
        return {
            "id": self.id,
            "type": self.type,
            "name": self.name,
            "content": self.content,
            "scope": self.scope,
            "project_id": self.project_id,
            "owner_id": self.owner_id,
            "lifecycle": self.lifecycle,
            "metadata": self.metadata,
        }


SPAN_SPLITS_CHARACTER = (
    "a declared span starts inside a character: the body's characters are stored composed "
    "(Unicode NFC), and a combining mark at a span's start would join the span before it"
)


def nfc_spans(content: str, declared: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """Declared spans of ``content`` moved onto its NFC form (each span's text normalised on
    its own, offsets recounted, labels normalised). Unchanged when ``content`` is NFC already
    (labels aside; where they do not tile it, the cut refuses them with the reason). Offsets
    count the body as sent: spans of a decomposed body that do not tile it are refused with the
    reason (``BadRequest``), even where they would tile its composed form: one frame, so the
    same offsets never mean two texts. Raises ``BadRequest`` when the spans' texts normalised
    one by one are not the body's NFC form: a span starting with a mark that composes with the
    character before it."""
    labelled = [
        {**item, "label": nfc(item["label"])}
        if isinstance(item, Mapping) and isinstance(item.get("label"), str)
        else item
        for item in declared
    ]
    if unicodedata.is_normalized("NFC", content):
        return labelled
    try:
        tiled = spans.declared_spans(content, declared)
    except spans.SpanError as exc:
        raise BadRequest(str(exc)) from exc
    moved: list[Mapping[str, Any]] = []
    offset = 0
    for item, span in zip(labelled, tiled.spans, strict=True):
        size = len(nfc(content[span.start : span.end]))
        moved.append({**item, "start": offset, "end": offset + size})
        offset += size
    if offset != len(nfc(content)) or "".join(
        nfc(content[s.start : s.end]) for s in tiled.spans
    ) != nfc(content):
        raise BadRequest(SPAN_SPLITS_CHARACTER)
    return moved


_FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_ATX_LINE = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_BLOCK_START = re.compile(r" {0,3}(?:[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>)")
_BACKTICKS = re.compile(r"`+")
_MAY_OPEN_CODE = re.compile(r"`|~~~|::|>>>")
"""What a line must hold to open code or pair a backtick (a fence, an inline code span, a
literal-block marker or code directive, a doctest block): :func:`code_regions` reads the lines
before the next such one at once."""
_PARAGRAPH_BREAK = re.compile(
    r"^(?:[ \t]*\r?$| {0,3}#{1,6}(?:[ \t]|\r?$)"
    r"| {0,3}(?:[-*+](?:[ \t]|\r?$)|\d{1,9}[.)](?:[ \t]|\r?$)|>))",
    re.MULTILINE,
)
"""A line that ends a paragraph (blank, an ATX heading, a list item, a block quote: the
line-by-line tests of :func:`code_regions`, ``\\r\\n`` endings allowed), over whole lines."""
_EXPLICIT_MARKUP = re.compile(r"[ \t]*\.\.(?:[ \t]|$)")  # ``.. note::``: a directive, no marker
_CODE_DIRECTIVE = re.compile(
    r"[ \t]*\.\.[ \t]+(?:code-block|code|sourcecode|doctest|testcode|testoutput|parsed-literal)::",
    re.IGNORECASE,  # directive names are case-insensitive
)


def code_regions(text: str) -> list[tuple[int, int]]:
    """The ``[start, end)`` character ranges of code in a Markdown (or reStructuredText) body,
    sorted and disjoint: fenced blocks (a line of 3+ backticks or tildes, at any indentation, so
    inside list items too, up to a closing line of the same character, at least as long, with
    nothing after it but spaces or tabs, or the end) and inline code spans (a run of n backticks
    up to the next run of exactly n in the same paragraph: ``x`` and RST's ````x````). A
    paragraph ends at a blank line, a fence, a heading, a list item or a block quote, so a stray
    backtick (an apostrophe typed as one) never pairs across them. reStructuredText literal
    blocks too: after a line ending in ``::`` (a paragraph's literal marker, ``Example::`` or a
    bare ``::``) or a code directive (``.. code-block::``, ``.. code::``, ``.. sourcecode::``,
    ``.. doctest::``, ``.. testcode::``, ``.. testoutput::``, ``.. parsed-literal::``; other
    directives such as ``.. note::`` hold text), the lines indented deeper than it (tabs to the
    next multiple of 8 columns; blank lines between them included; after ``::`` only past a
    blank line, else the paragraph goes on), up to the first non-blank line that is not
    (docutils' rules; ``\\::`` is no marker). And doctest blocks: a paragraph opening with
    ``>>> `` (in a Markdown body that would be a quote three levels deep; REPL sessions are far
    more common), up to the next blank line. Lines end at ``\n`` (one ``\r`` before it
    dropped). Linear in the text's length, whatever its backticks. Not handled (documented):
    backslash-escaped backticks, a code directive's one-line argument, literal blocks inside
    footnotes and citations, RST's quoted literal blocks (unindented lines each starting with the
    same punctuation), Markdown's indented code blocks (in a reStructuredText body an indented
    block is a block quote, whose links are links)."""
    regions: list[tuple[int, int]] = []
    runs: list[tuple[int, int, int]] = []  # backtick runs outside fences: start, end, paragraph
    paragraph = 0  # compared for equality only: a run pairs with a run of its own paragraph
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(raw) + 1 for raw in lines), initial=0))
    fence_char, fence_len, fence_start = "", 0, 0
    marker: int | None = None  # indentation of a literal-block marker line still waiting
    marker_gap = False  # whether a blank line must (still) come before its block: after '::'
    literal: int | None = None  # indentation of the marker of the literal block we are in
    literal_start = 0
    doctest: int | None = None  # start of the doctest block ('>>> ' paragraph) we are in
    after_blank = True  # the line before was blank (or this is the first): a paragraph starts
    index = 0
    while index < len(lines):
        pos = starts[index]
        if not fence_char and marker is None and literal is None and doctest is None:
            # Nothing is open: only a line holding a backtick, '~~~', '::' or '>>>' can open
            # code. The lines before the next one are read at once (a body of short lines is
            # half a million of them): whether any ends a paragraph, and whether the last is blank.
            found = _MAY_OPEN_CODE.search(text, pos)
            upto = len(lines) if found is None else bisect.bisect_right(starts, found.start()) - 1
            if upto > index:
                if _PARAGRAPH_BREAK.search(text, pos, starts[upto] - 1):
                    paragraph += 1
                after_blank = not lines[upto - 1].removesuffix("\r").strip(" \t")
                index = upto
                continue
        raw = lines[index]
        index += 1
        end = min(pos + len(raw) + 1, len(text))
        line = raw[:-1] if raw.endswith("\r") else raw
        blank = not line.strip(" \t")
        columns = line.expandtabs(8)  # docutils: a tab advances to the next multiple of 8
        indent = len(columns) - len(columns.lstrip(" "))
        starts_paragraph, after_blank = after_blank, blank
        if doctest is not None:
            if not blank:
                pos = end
                continue
            regions.append((doctest, pos))
            doctest, paragraph = None, paragraph + 1
        elif (
            starts_paragraph
            and literal is None
            and not fence_char
            and columns.lstrip(" ").startswith(">>> ")
        ):  # a doctest block: a paragraph opening with '>>> ', up to the next blank line
            doctest, marker = pos, None
            pos = end
            continue
        if literal is not None:
            if blank or indent > literal:
                pos = end
                continue
            regions.append((literal_start, pos))
            literal, paragraph = None, paragraph + 1
        elif marker is not None and not fence_char:
            if blank:
                marker_gap = False
            elif indent > marker and not marker_gap:
                literal, literal_start, marker = marker, pos, None
                pos = end
                continue
            else:  # the paragraph goes on, or a definition: no literal block
                marker = None
        found = _FENCE_LINE.fullmatch(line)
        if fence_char:
            if (
                found
                and found.group(1)[0] == fence_char
                and len(found.group(1)) >= fence_len
                and not found.group(2).strip(" \t")
            ):
                regions.append((fence_start, end))
                fence_char, paragraph = "", paragraph + 1
        elif found and not (found.group(1)[0] == "`" and "`" in found.group(2)):
            fence_char, fence_len, fence_start = found.group(1)[0], len(found.group(1)), pos
            paragraph += 1
        elif blank:
            paragraph += 1
        else:
            heading = _ATX_LINE.match(line) is not None
            if heading or _BLOCK_START.match(line):
                paragraph += 1
            runs += [(pos + r.start(), pos + r.end(), paragraph) for r in _BACKTICKS.finditer(line)]
            if heading:  # a heading is one line: what follows is another paragraph
                paragraph += 1
            if _CODE_DIRECTIVE.match(line):
                marker, marker_gap = indent, False  # its options and body follow at once
            elif (
                line.rstrip(" \t").endswith("::")
                and not line.rstrip(" \t").endswith("\\::")  # an escaped marker is text
                and not heading
                and not _EXPLICIT_MARKUP.match(line)
            ):
                marker, marker_gap = indent, True  # a paragraph's '::': a blank line first
        pos = end
    if fence_char:
        regions.append((fence_start, len(text)))
    if literal is not None:
        regions.append((literal_start, len(text)))
    if doctest is not None:
        regions.append((doctest, len(text)))
    closer: list[int | None] = [None] * len(runs)  # the next run of the same length, paragraph
    last: dict[tuple[int, int], int] = {}
    for i in range(len(runs) - 1, -1, -1):
        key = (runs[i][1] - runs[i][0], runs[i][2])
        closer[i] = last.get(key)
        last[key] = i
    i = 0
    while i < len(runs):
        j = closer[i]
        if j is None:
            i += 1
            continue
        regions.append((runs[i][0], runs[j][1]))
        i = j + 1
    return sorted(regions)


def _inside(regions: list[tuple[int, int]], at: int) -> bool:
    """Whether ``at`` lies in one of the sorted, non-overlapping ``regions``."""
    k = bisect.bisect_right(regions, (at, sys.maxsize)) - 1
    return k >= 0 and regions[k][0] <= at < regions[k][1]


def links(content: str) -> list[str]:
    """Distinct ``[[entity_id]]`` link targets of ``content``, in order of first appearance;
    a ``[[...]]`` inside code (:func:`code_regions`) is code, not a link: a TOML array of tables
    (``[[packages]]``), a nested list (``x[[0]]``) or a C++ attribute in a sample made pending
    links on the PEPs, and would have made MENTIONS edges to any memory with that id. Nor is a
    ``[[...]]`` directly followed by ``(``: Markdown's link with bracketed text, the form of a
    footnote reference (``[[1]](https://example.org)``).

    Linear in the length: 0.1 s for a 1,000,000-character body of one-character lines, up to
    about 2 s when every line holds a backtick (each such line is read on its own); the
    last few bodies' answers are kept (one write asks several times; :func:`save_entity` asks
    first in a worker thread, off the event loop)."""
    if "[[" not in content:
        return []
    return list(_links(content))


@functools.lru_cache(maxsize=8)
def _links(content: str) -> tuple[str, ...]:
    regions = code_regions(content)
    found = (m for m in LINK_RE.finditer(content) if not _inside(regions, m.start()))
    return tuple(dict.fromkeys(m.group(1) for m in found))


_CUTTING = threading.Lock()


def _prepare(data: EntityData, evidence_lines: int) -> spans.Projection | None:
    """:func:`checked_cut` of ``data`` (which reads its links too, kept for the write's later
    asks): the CPU-bound part of a write, run off the event loop by :func:`save_entity`, one
    body at a time per process. Threads share the interpreter lock, so each more cutting at once
    took a bigger share from the event loop: six 1,000,000-character bodies of one-character
    lines cut together paused it 1.2 s; one at a time, about 0.15 s (the others wait their
    turn in their worker threads, not on the loop)."""
    with _CUTTING:
        return checked_cut(data, evidence_lines=evidence_lines)


def cut(data: EntityData, *, evidence_lines: int) -> spans.Projection | None:
    """The projection this memory gets (rule: span-bound) (None: never cut). Raises ``BadRequest``
    for declared spans that do not tile the body."""
    try:
        return spans.project(
            data.type, data.content, declared=data.spans, evidence_lines=evidence_lines
        )
    except spans.SpanError as exc:
        raise BadRequest(str(exc)) from exc


def checked_cut(data: EntityData, *, evidence_lines: int) -> spans.Projection | None:
    """Apply the rules every memory write obeys (:mod:`app.domain.write_rules`: no reserved
    type or id, scope and project agree; a body of at most 1,000,000 characters linking at most
    1,000 memories) and return its cut. Raises ``BadRequest`` naming the rule."""
    write_rules.memory_type(data.type)
    write_rules.memory_id(data.id)
    write_rules.check_scope(data.scope, data.project_id)
    if len(data.content) > MAX_CONTENT_CHARS:
        raise BadRequest(f"content is longer than {MAX_CONTENT_CHARS} characters")
    if len(links(data.content)) > MAX_LINKS:
        raise BadRequest(f"content links more than {MAX_LINKS} memories ([[id]])")
    return cut(data, evidence_lines=evidence_lines)


def passage_rows(
    data: EntityData, revision: int, projection: spans.Projection | None
) -> list[writes.PassageRow]:
    """The stored spans of ``data`` at ``revision`` (ids minted per parent, revision, index)."""
    if projection is None:
        return []
    return [
        writes.PassageRow(
            id=passage_id(data.id, revision, i, data.content[s.start : s.end]),
            passage_index=i,
            start_offset=s.start,
            end_offset=s.end,
            breadcrumb=s.breadcrumb,
            content=data.content[s.start : s.end],
        )
        for i, s in enumerate(projection.spans)
    ]


async def unchanged(
    conn: AsyncConnection, *, org_id: str, items: Sequence[EntityData], keep_mark: bool
) -> tuple[set[str], dict[str, str]]:
    """Which of ``items`` (stored memories, no declared spans) :func:`save_entity` would leave
    ``unchanged``, found in a few statements: same fields, and stored mentions and pending
    links that agree with the body's links. ``keep_mark``: an ``active`` item that is stored
    superseded with a SUPERSEDES edge pointing at it counts as ``superseded`` (the import's
    rule). Returns (the unchanged ids, the lifecycle to write for the others by id)."""
    states = await writes.stored_states(conn, org_id=org_id, ids=[d.id for d in items])
    lifecycle: dict[str, str] = {}
    candidates = []
    for d in items:
        fields, marked = states[d.id]
        life = "superseded" if keep_mark and d.lifecycle == "active" and marked else d.lifecycle
        lifecycle[d.id] = life
        mine = (
            d.type,
            d.name,
            d.content,
            d.project_id,
            d.scope,
            d.owner_id,
            life,
            d.metadata,
        )
        if mine == fields:
            candidates.append(d)
    linked = [d for d in candidates if links(d.content)]
    if not linked:
        return {d.id for d in candidates}, lifecycle
    stored = await writes.derived_states(conn, org_id=org_id, ids=[d.id for d in linked])
    wanted = {d.id: [t for t in links(d.content) if t != d.id] for d in linked}
    found = await writes.existing_ids(
        conn, org_id=org_id, ids=sorted({t for ts in wanted.values() for t in ts})
    )
    same = {d.id for d in candidates if not links(d.content)}
    for d in linked:
        expected = (
            {t for t in wanted[d.id] if t in found},
            {t for t in wanted[d.id] if t not in found},
        )
        if expected == stored[d.id]:
            same.add(d.id)
    return same, lifecycle


async def save_entity(
    conn: AsyncConnection,
    *,
    org_id: str,
    data: EntityData,
    evidence_lines: int,
    may_link: Callable[[list[str]], Awaitable[list[str]]] | None = None,
) -> tuple[Outcome, int]:
    """Create or update ``data`` in ``org_id``; return (outcome, revision).

    The row is locked for the transaction; any change bumps the revision; passages and derived
    mentions are rewritten only when the body or its cut changed (otherwise the spans are
    restamped with the new revision). ``may_link`` filters link targets (default: every
    existing one).
    Raises ``BadRequest`` for a reserved type or id, a scope/project mismatch, a body over
    1,000,000 characters or bad declared spans.
    """
    # A 1,000,000-character body takes up to ~3 s of CPU to cut and read for links (a heading or
    # a backtick on every line; 0.4 s for one-character lines, 0.1 s for prose): in a worker
    # thread, so other requests are served meanwhile (a breaker held /healthz 1 s this way).
    projection = await asyncio.to_thread(_prepare, data, evidence_lines)
    stored = await writes.lock_entity(conn, org_id=org_id, entity_id=data.id)
    fields = data.fields()
    if stored is None:
        if not await writes.insert_entity(conn, org_id=org_id, fields=fields):
            raise Conflict(write_rules.ID_TAKEN)
        await _write_cut(conn, org_id=org_id, data=data, revision=1, projection=projection)
        await _derive_mentions(conn, org_id=org_id, data=data, may_link=may_link)
        gained = await writes.resolve_pending(conn, org_id=org_id, entity_id=data.id)
        await write_rules.retire_link_communities(
            conn, org_id=org_id, pairs=[(source, data.id) for source in gained]
        )
        write_rules.note_created(org_id, [data.id])
        return "created", 1

    body_changed = stored.content != data.content or stored.type != data.type
    if not body_changed and data.spans is not None:
        new_cut = [(s.start, s.end, s.breadcrumb) for s in projection.spans] if projection else []
        body_changed = new_cut != await writes.stored_cut(conn, org_id=org_id, parent_id=data.id)
    same_fields = (
        stored.type,
        stored.name,
        stored.content,
        stored.project_id,
        stored.scope,
        stored.owner_id,
        stored.lifecycle,
        stored.metadata,
    ) == (
        data.type,
        data.name,
        data.content,
        data.project_id,
        data.scope,
        data.owner_id,
        data.lifecycle,
        data.metadata,
    )
    if same_fields and not body_changed:
        if await _repair_links(conn, org_id=org_id, data=data, may_link=may_link):
            return "repaired", stored.revision
        return "unchanged", stored.revision
    revision = stored.revision + 1
    await writes.update_entity(conn, org_id=org_id, fields=fields, revision=revision)
    placed = (stored.scope, stored.project_id, stored.lifecycle)
    if placed != (data.scope, data.project_id, data.lifecycle):
        await write_rules.retire_moved_communities(
            conn,
            org_id=org_id,
            entity_id=data.id,
            placements=[placed, (data.scope, data.project_id, data.lifecycle)],
        )
    counted = (stored.name, stored.content, stored.scope, stored.project_id)
    if body_changed or counted != (data.name, data.content, data.scope, data.project_id):
        await write_rules.retire_term_stats(
            conn,
            org_id=org_id,
            entity_id=data.id,
            scope=stored.scope,
            project_id=stored.project_id,
        )
    if (stored.scope, stored.project_id) != (data.scope, data.project_id):
        await write_rules.retire_term_stats(  # the audience it joins did not count it
            conn,
            org_id=org_id,
            entity_id=data.id,
            scope=data.scope,
            project_id=data.project_id,
            moved_in=True,
        )
    if body_changed:
        await _write_cut(conn, org_id=org_id, data=data, revision=revision, projection=projection)
        await _derive_mentions(conn, org_id=org_id, data=data, may_link=may_link)
    else:
        await writes.restamp_passages(conn, org_id=org_id, parent_id=data.id, revision=revision)
    return "updated", revision


async def _write_cut(
    conn: AsyncConnection,
    *,
    org_id: str,
    data: EntityData,
    revision: int,
    projection: spans.Projection | None,
) -> None:
    rows = passage_rows(data, revision, projection)
    await writes.replace_passages(
        conn,
        org_id=org_id,
        parent_id=data.id,
        revision=revision,
        kind=projection.kind if projection else None,
        lossless=projection.lossless if projection else False,
        passages=rows,
    )


async def _split_links(
    conn: AsyncConnection,
    *,
    org_id: str,
    data: EntityData,
    may_link: Callable[[list[str]], Awaitable[list[str]]] | None,
) -> tuple[list[str], list[str]]:
    """(links that are mentions now, links kept pending), in order of first appearance.

    A link to a memory the writer cannot read (``may_link`` refuses it) stays pending, exactly
    as a link to no memory, except a link that is already a mention of this memory (a writer
    who could read its target wrote it): the link's text is still there, so it stays a mention.
    A colleague fixing a typo does not turn the owner's links to memories only the owner reads
    into pending ones, and the editor's answer is the same either way (an
    unchanged re-write is ``unchanged``, not ``repaired``, whether the target is hidden or
    absent)."""
    wanted = [t for t in links(data.content) if t != data.id]
    if not wanted:
        return [], []
    existing = await writes.referenced_ids(conn, org_id=org_id, ids=wanted)
    targets = [t for t in wanted if t in existing]
    if targets and may_link is not None:
        allowed = set(await may_link(targets))
        if len(allowed) < len(targets):
            mentions, _ = await writes.derived_state(conn, org_id=org_id, src_id=data.id)
            allowed |= mentions
        targets = [t for t in targets if t in allowed]
    kept = set(targets)
    return targets, [t for t in wanted if t not in kept]


async def _derive_mentions(
    conn: AsyncConnection,
    *,
    org_id: str,
    data: EntityData,
    may_link: Callable[[list[str]], Awaitable[list[str]]] | None,
) -> None:
    targets, pending = await _split_links(conn, org_id=org_id, data=data, may_link=may_link)
    if pending:
        write_rules.note_pending(org_id, [data.id])
    removed = await writes.rederive_mentions(
        conn, org_id=org_id, src_id=data.id, dst_ids=targets, pending_ids=pending
    )
    if removed != set(targets):
        await write_rules.retire_link_communities(
            conn, org_id=org_id, pairs=[(data.id, t) for t in sorted(removed ^ set(targets))]
        )


async def _repair_links(
    conn: AsyncConnection,
    *,
    org_id: str,
    data: EntityData,
    may_link: Callable[[list[str]], Awaitable[list[str]]] | None,
) -> bool:
    """Re-derive the links of an unchanged memory when the stored ones disagree; True if so."""
    if not links(data.content):
        return False
    mentions, pending = await writes.derived_state(conn, org_id=org_id, src_id=data.id)
    targets, waiting = await _split_links(conn, org_id=org_id, data=data, may_link=may_link)
    if (set(targets), set(waiting)) == (mentions, pending):
        return False
    await _derive_mentions(conn, org_id=org_id, data=data, may_link=may_link)
    return True
