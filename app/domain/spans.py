"""Passage projections (rule: span-bound): how a long memory body is cut into spans.

A *projection* turns one memory body into an ordered tuple of :class:`Span` (character offsets
into the body, end exclusive). The service stores each span as a passage linked to its parent by
:attr:`Projection.link_relationship`. Three projections exist; :func:`project` picks one.

All offsets and sizes are in characters (Python ``str`` indices, i.e. Unicode code points, the same
unit as Postgres ``char_length``). Everything here is pure, deterministic and linear in the body.

Prose (:func:`cut_prose`)
=========================
Types other than ``observation`` and :data:`NEVER_CUT_TYPES` (``task``, ``person``, ``passage``).

* **Only bodies over** :data:`PROSE_MIN_BODY` (2000) characters are cut; shorter ones give ``None``.
* **Lines.** Only ``"\\n"`` ends a line (a ``"\\r"`` before it is tolerated and ignored when
  matching); each line owns its newline, so every boundary below is a line start.
* **Code fences are opaque.** A fence opens on a line of at least three backticks or tildes
  (indented by at most three spaces; a backtick fence's info string may not contain a backtick)
  and closes on a line of the same character, at least as long, with nothing after it but spaces.
  An unclosed fence runs to the end of the body. Inside a fence nothing is a heading and no line
  is blank (a fence is never split at a paragraph boundary).
* **Headings** are ATX headings outside fences, at the very start of a line: ``#`` .. ``######``
  then a space, a tab or the end of the line (``#tag`` is not a heading). Unlike CommonMark, an
  indented ``#`` line is not a heading, so ``# comments`` in indented code never become
  headings. The text is stripped of its optional closing ``#`` run and its whitespace is
  collapsed. Setext (underlined) headings are not recognised. A heading opens a *section* that
  runs to the next heading of the same or a higher level (fewer ``#``); a deeper heading in
  between opens a subsection (a skipped level is still a child). A section's *intro* is its
  heading line and the text before its first subsection.
* **Preamble.** Text before the first heading is the intro of the (headingless) document root: a
  section of its own whose breadcrumb is ``None``.
* **Units.** A section is cut by turning it into a sequence of *units* that are then packed:

  - its intro is one unit when it is at most :data:`HARD_MAX` (2000) characters; a larger intro is
    split into paragraph blocks (a block is a run of non-blank lines plus the blank lines after
    it; blank lines inside fences do not count);
  - a block over :data:`HARD_MAX` is split further: each fenced code block in it apart from the
    prose around it; the prose at sentence boundaries (after ``.``, ``!``, ``?`` or ``…`` and
    any closing quotes or brackets, then whitespace; after ``。！？`` without it), a sentence still
    over :data:`HARD_MAX` at line starts, a line still over it at word starts (after
    whitespace); a code block at line starts, then word starts. A piece runs from one boundary
    to the next, so it holds text and the whitespace after it, never whitespace alone; a piece
    that only whitespace separates from its neighbours (blank lines between two fences) joins
    the unit before it;
  - each subsection of at most :data:`HARD_MAX` characters is one unit, kept whole;
  - a subsection over :data:`HARD_MAX` is cut recursively the same way, and the spans it yields
    become *closed* units of its parent.

  The only units over :data:`HARD_MAX` are therefore a single token that no boundary cuts (a
  run of non-whitespace characters with the whitespace around it): the only spans allowed over
  2000 characters.
* **Packing** (greedy, left to right, over the units of one section, i.e. over siblings): the next
  unit joins the current span when

  (a) neither is closed and together they stay within :data:`PACK_MAX` (1200), or
  (b) the current span is under :data:`PACK_MIN` (600) and together they stay within
      :data:`HARD_MAX` (2000) (a short heading or intro joins what follows it);

  otherwise the current span is finished and the unit starts the next one. A finished span under
  :data:`PACK_MIN` is merged into the previous span when the merge stays within :data:`HARD_MAX`:
  this is the contract's tail merge ("when it fits" = the merged span is at most 2000
  characters), applied to the last span and to any span that could not grow forward. Closed
  units (the spans of a cut subsection) are thus never extended by a sibling except to absorb a
  span under :data:`PACK_MIN`, so spans follow the heading tree. Consequence relied on by the
  tests: of two adjacent spans, if either is under 600 characters, together they exceed 2000.
* **Partition.** The spans tile ``[0, len(body))`` in order, no gap, no overlap, always: every
  character of the body lies in exactly one span, however long the body. There is no count cap:
  a 1,000,000-character body gives hundreds of spans, each within the bound.
* **No whitespace-only span.** Every unit holds a non-whitespace character (a preamble of
  whitespace opens the first section; a body of whitespace alone is never cut), so every span
  does. Nothing is lost, so a prose projection is always ``lossless`` (``covers_parent`` then
  only depends on the window, rule: slice-window).
* **Breadcrumb** of a span: the heading texts of the deepest section containing the span's first
  character, from the outermost ancestor down to that section itself, joined by ``" > "``; e.g. a
  span starting inside "Rationale" under "Specification" gets ``"Specification > Rationale"``.
  Each text is at most :data:`HEADING_MAX_CHARS` (60) characters: a longer one is cut at its last
  space at or before the 59th character (a hard cut if that space lies in the first half) and
  ends with ``"…"``. Empty headings are skipped; a span starting in the preamble gets ``None``.

Evidence (:func:`cut_evidence`)
===============================
Type ``observation`` (logs, transcripts, tool output): fixed windows of ``lines_per_span`` lines
(default 40; the last window may be shorter), no breadcrumb, linked by ``DERIVED_FROM``, and
``lossless`` is always ``False`` (evidence never claims coverage). Windows are counted in lines, not
characters, so a window may exceed 2000 characters. When more than :data:`MAX_SPANS` windows
would be needed, each window grows to ``k × lines_per_span`` lines with the smallest ``k`` that
fits 64 windows: the windows still tile the whole body (every line is searchable).

Declared (:func:`declared_spans`)
=================================
A writer may send ``spans: [{start, end, label}]``; they are validated (they must tile the body
exactly) and used verbatim, the label becoming the breadcrumb. Invalid input raises
:class:`SpanError`, whose message is the user-facing reason (a 400 detail).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice, pairwise
from typing import Any, Literal, NamedTuple

from app.domain.validation import NOT_BLANK, line_problem, printable_line

__all__ = [
    "BREADCRUMB_SEPARATOR",
    "EVIDENCE_LINES_DEFAULT",
    "EVIDENCE_TYPE",
    "HARD_MAX",
    "HEADING_MAX_CHARS",
    "LABEL_MAX_CHARS",
    "MAX_SPANS",
    "NEVER_CUT_TYPES",
    "PACK_MAX",
    "PACK_MIN",
    "PROSE_MIN_BODY",
    "Projection",
    "ProjectionKind",
    "Span",
    "SpanError",
    "cut_evidence",
    "cut_prose",
    "declared_spans",
    "project",
]

ProjectionKind = Literal["prose", "evidence", "declared"]

MAX_SPANS = 64
"""At most this many evidence windows (past it, windows widen) and declared spans; prose spans
have no count cap (each stays within :data:`HARD_MAX`)."""
PROSE_MIN_BODY = 2000
"""Prose bodies of at most this many characters are never cut."""
PACK_MIN = 600
"""Packing target, lower bound (characters)."""
PACK_MAX = 1200
"""Packing target, upper bound (characters)."""
HARD_MAX = 2000
"""No prose span is longer, except a single token no boundary cuts (the span bound)."""
EVIDENCE_LINES_DEFAULT = 40
"""Lines per evidence window."""
HEADING_MAX_CHARS = 60
"""Each heading text in a breadcrumb is at most this long."""
LABEL_MAX_CHARS = 200
"""A declared span's label is at most this long."""
BREADCRUMB_SEPARATOR = " > "
EVIDENCE_TYPE = "observation"
NEVER_CUT_TYPES = frozenset({"task", "person", "passage"})
"""Entity types whose body is never cut (unless the writer declares spans)."""


class SpanError(ValueError):
    """Declared spans are invalid; the message is a user-facing reason (a 400 ``detail``)."""


@dataclass(frozen=True)
class Span:
    """One passage of a body: ``body[start:end]``.

    ``start`` is inclusive and ``end`` exclusive, both character offsets. ``breadcrumb`` is the
    heading path for prose, ``None`` for evidence (and for prose spans starting in the preamble),
    the label for declared spans.
    """

    start: int
    end: int
    breadcrumb: str | None

    @property
    def length(self) -> int:
        """Number of characters in the span."""
        return self.end - self.start


@dataclass(frozen=True)
class Projection:
    """The spans cut from one body, in body order.

    ``lossless`` is true iff the spans partition the whole body and nothing was dropped; it is
    always false for evidence (rule: covers-parent-honest; evidence never claims coverage).
    """

    kind: ProjectionKind
    spans: tuple[Span, ...]
    lossless: bool

    @property
    def link_relationship(self) -> str:
        """Edge from each passage to its parent: ``DERIVED_FROM`` for evidence, else ``PART_OF``."""
        return "DERIVED_FROM" if self.kind == "evidence" else "PART_OF"


# --------------------------------------------------------------------------------------------
# Line scan: fences, blank lines and ATX headings.

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_ATX = re.compile(r"(#{1,6})(?:[ \t]+(.*))?")
_FENCE_CHARS = ("`", "~")
_MARK_CHARS = frozenset(" `~#")
"""First characters of the lines that may be a fence line or a heading (a fence line may be
indented by up to three spaces); a line starting otherwise is neither."""
_CLOSING_HASHES = re.compile(r"(?:^|[ \t])#+$")


@dataclass(frozen=True)
class _Heading:
    line: int
    offset: int
    level: int
    title: str


class _Lines:
    """Line table of a body: offsets, blank flags and fence membership, plus its headings.

    Built column by column (a body of 500,000 one-character lines is half a million lines):
    offsets and blank flags for every line at once, then only the lines that may open or close
    a fence (at most three spaces, then a backtick or a tilde) or be a heading (``#`` first) are
    read one by one, in order; the lines of a fenced block are marked by slices."""

    def __init__(self, body: str) -> None:
        raw_lines = body.split("\n")
        if raw_lines[-1] == "":
            raw_lines.pop()  # the body ends with a newline (or is empty): no line after it
        n = len(body)
        starts = list(accumulate((len(raw) + 1 for raw in raw_lines), initial=0))
        ends = starts[1:]
        starts.pop()
        if ends and ends[-1] > n:
            ends[-1] = n  # the last line has no newline
        blank = [not raw.strip() for raw in raw_lines]  # then made False inside fences
        fence = [-1] * len(raw_lines)  # index of the fenced block holding the line, -1 if none
        self.headings: list[_Heading] = []
        marked = [i for i, raw in enumerate(raw_lines) if raw[:1] in _MARK_CHARS]
        fences = 0
        k = 0
        while k < len(marked):
            index = marked[k]
            k += 1
            line = _line(raw_lines[index])
            if line[:1] == "#":
                heading = _ATX.fullmatch(line)
                if heading:
                    title = _title(heading.group(2))
                    self.headings.append(
                        _Heading(index, starts[index], len(heading.group(1)), title)
                    )
                continue
            if line.lstrip(" ")[:1] not in _FENCE_CHARS:
                continue
            opening = _FENCE_OPEN.fullmatch(line)
            if not opening or (opening.group(1)[0] == "`" and "`" in opening.group(2)):
                continue
            fence_char, fence_len = opening.group(1)[0], len(opening.group(1))
            last = len(raw_lines) - 1  # an unclosed fence runs to the end of the body
            while k < len(marked):
                candidate = marked[k]
                k += 1
                closing = _line(raw_lines[candidate])
                close = _FENCE_CLOSE.fullmatch(closing) if fence_char in closing else None
                if close and close.group(1)[0] == fence_char and len(close.group(1)) >= fence_len:
                    last = candidate
                    break
            fence[index : last + 1] = [fences] * (last + 1 - index)
            blank[index : last + 1] = [False] * (last + 1 - index)
            fences += 1
        self.starts, self.ends, self.blank, self.fence = starts, ends, blank, fence
        self.count = len(starts)

    def index_of(self, offset: int) -> int:
        """Index of the line starting at ``offset`` (the line count for the body's end)."""
        return bisect_right(self.starts, offset) - 1 if offset < self._end() else self.count

    def _end(self) -> int:
        return self.ends[-1] if self.ends else 0


def _line(raw: str) -> str:
    """A line without the ``\\r`` of a ``\\r\\n`` ending."""
    return raw[:-1] if raw.endswith("\r") else raw


def _title(raw: str | None) -> str:
    """Heading text without its closing ``#`` run, whitespace collapsed, at most 60 chars;
    control characters, line separators and bidi overrides are spaces (a breadcrumb is printed
    as a name is: :func:`app.domain.validation.printable_line`)."""
    text = (raw or "").strip()
    closing = _CLOSING_HASHES.search(text)
    if closing:
        text = text[: closing.start()]
    return _shorten(printable_line(text), HEADING_MAX_CHARS)


def _shorten(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` chars, else cut at a space and ended with ``…``."""
    if len(text) <= limit:
        return text
    room = limit - 1  # keep one character for the ellipsis
    space = text.rfind(" ", 0, room + 1)
    head = text[:space] if space >= 0 and 2 * space >= room else text[:room]
    return head.rstrip() + "…"


# --------------------------------------------------------------------------------------------
# Section tree.


@dataclass(eq=False)
class _Section:
    start: int
    level: int
    title: str
    parent: _Section | None
    end: int = 0
    children: list[_Section] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def intro_end(self) -> int:
        return self.children[0].start if self.children else self.end


def _build_tree(lines: _Lines, length: int) -> tuple[_Section, list[_Section]]:
    """The root section (level 0, the whole body) and every heading's section in body order."""
    root = _Section(0, 0, "", None, end=length)
    sections: list[_Section] = []
    stack = [root]
    for heading in lines.headings:
        while stack[-1].level >= heading.level:
            stack.pop().end = heading.offset
        parent = stack[-1]
        node = _Section(heading.offset, heading.level, heading.title, parent)
        parent.children.append(node)
        sections.append(node)
        stack.append(node)
    for node in stack:
        node.end = length
    return root, sections


# --------------------------------------------------------------------------------------------
# Units and packing.


class _Piece(NamedTuple):
    """A unit or a packed span: ``[start, end)``; ``closed`` spans take no sibling (a tuple:
    a body of short lines makes one per line)."""

    start: int
    end: int
    closed: bool

    @property
    def size(self) -> int:
        return self.end - self.start


_Unit = tuple[int, int, bool]
"""A unit to pack, as :class:`_Piece` (start, end, closed); line units are plain tuples."""


_SENTENCE_END = re.compile(
    r"[.!?\u2026\u203c\u2047-\u2049][\"'\u2019\u201d)\]\u00bb]*\s+"
    r"|[\u3002\uff01\uff1f][\"'\u2019\u201d)\]\u300d\u300f]*\s*"
)
"""The end of a sentence: a full stop, question or exclamation mark or ellipsis, closing quotes
or brackets, then whitespace (an ideographic full stop needs none); a sentence starts after it."""
_LINE_START = re.compile(r"\n(?=[^\S\n]*\S)")
"""A newline followed by a line holding a non-whitespace character: a line starts after it."""
_WORD_START = re.compile(r"(?<=\s)(?=\S)")
"""A non-whitespace character after a whitespace one: a word starts there."""
_NON_BLANK = re.compile(r"\S")


_Boundaries = Callable[[str, int, int], list[int]]
"""Where a range ``[start, end)`` of a body may be cut: the positions a piece starts at."""


def _cuts(pattern: re.Pattern[str], zero_width: bool) -> _Boundaries:
    def cuts(body: str, start: int, end: int) -> list[int]:
        return [m.start() if zero_width else m.end() for m in pattern.finditer(body, start, end)]

    return cuts


_PROSE_LEVELS = (
    _cuts(_SENTENCE_END, False),
    _cuts(_LINE_START, False),
    _cuts(_WORD_START, True),
)
"""Where prose splits, coarsest first: sentences, then lines, then words."""
_CODE_LEVELS = _PROSE_LEVELS[1:]
"""Where a fenced code block splits: lines, then words (a full stop in code ends nothing)."""


def _split(body: str, start: int, end: int, levels: Sequence[_Boundaries]) -> list[_Unit]:
    """``[start, end)`` as units of at most HARD_MAX characters, cut at the boundaries of the
    first level that has any, each piece still over HARD_MAX cut by the next levels. A piece
    runs from one boundary to the next, so it holds the text before its trailing whitespace:
    none is only whitespace. A piece no level can cut (a single token and the whitespace
    around it) stays whole, whatever its length."""
    if end - start <= HARD_MAX or not levels:
        return [(start, end, False)]
    first = _NON_BLANK.search(body, start, end)
    floor = first.start() if first is not None else end
    cuts = [c for c in levels[0](body, start, end) if floor < c < end]
    if not cuts:
        return _split(body, start, end, levels[1:])
    units: list[_Unit] = []
    for a, b in pairwise([start, *cuts, end]):
        units.extend(_split(body, a, b, levels[1:]) if b - a > HARD_MAX else [(a, b, False)])
    return units


def _glue_blank_units(body: str, units: list[_Unit]) -> list[_Unit]:
    """``units`` with each one that holds only whitespace joined to the unit before it (to the
    one after it when it comes first): no span may be only whitespace."""
    out: list[_Unit] = []
    carry: int | None = None  # start of leading whitespace-only units waiting for a unit
    for start, end, closed in units:
        if _NON_BLANK.search(body, start, end) is None:
            if out:
                out[-1] = (out[-1][0], end, out[-1][2])
            elif carry is None:
                carry = start
            continue
        out.append((carry if carry is not None else start, end, closed))
        carry = None
    if carry is not None:  # every unit was whitespace: one unit for all of it
        out.append((carry, units[-1][1], False))
    return out


class _Cutter:
    def __init__(self, body: str) -> None:
        self.body = body
        self.lines = _Lines(body)
        self.root, self.sections = _build_tree(self.lines, len(body))
        if self.sections and _NON_BLANK.search(body, 0, self.sections[0].start) is None:
            self.sections[0].start = 0  # a preamble of whitespace opens the first section
        self.heading_starts = [s.start for s in self.sections]

    def spans(self) -> list[_Piece]:
        return _pack(self._units(self.root))

    def _units(self, section: _Section) -> list[_Unit]:
        units: list[_Unit] = []
        if section.intro_end > section.start:
            if section.intro_end - section.start <= HARD_MAX:
                units.append(_Piece(section.start, section.intro_end, closed=False))
            else:
                units.extend(self._block_units(section.start, section.intro_end))
        for child in section.children:
            if child.size <= HARD_MAX:
                units.append(_Piece(child.start, child.end, closed=False))
            else:
                units.extend(_pack(self._units(child)))
        return units

    def _block_units(self, start: int, end: int) -> list[_Unit]:
        """Paragraph blocks of ``[start, end)``; a block over HARD_MAX is split further
        (:meth:`_split_block`)."""
        lines = self.lines
        first, stop = lines.index_of(start), lines.index_of(end)
        units: list[_Unit] = []
        block_start = first
        seen_text = False
        after_blank = False
        for i in range(first, stop + 1):
            boundary = i == stop
            if not boundary:
                if lines.blank[i]:
                    after_blank = seen_text
                    continue
                boundary = after_blank
                seen_text = True
                after_blank = False
            if boundary and i > block_start:
                a, b = lines.starts[block_start], lines.ends[i - 1]
                if b - a <= HARD_MAX:
                    units.append(_Piece(a, b, closed=False))
                else:
                    units.extend(self._split_block(block_start, i))
                block_start = i
        return units

    def _split_block(self, first: int, stop: int) -> list[_Unit]:
        """Units of at most HARD_MAX characters for the oversized block of lines ``[first,
        stop)``: each fenced code block apart (split at lines, then words, when over HARD_MAX),
        the prose between fences at sentences, then lines, then words (:func:`_split`)."""
        lines = self.lines
        units: list[_Unit] = []
        i = first
        while i < stop:
            j = i + 1
            fence = lines.fence[i]
            while j < stop and (lines.fence[j] == fence if fence >= 0 else lines.fence[j] < 0):
                j += 1
            a, b = lines.starts[i], lines.ends[j - 1]
            levels = _CODE_LEVELS if fence >= 0 else _PROSE_LEVELS
            units.extend(_split(self.body, a, b, levels))
            i = j
        return _glue_blank_units(self.body, units)

    def breadcrumb(self, offset: int) -> str | None:
        """Heading path of the deepest section containing ``offset``; None in the preamble."""
        i = bisect_right(self.heading_starts, offset) - 1
        node: _Section | None = self.sections[i] if i >= 0 else None
        while node is not None and node.end <= offset:
            node = node.parent
        titles: list[str] = []
        while node is not None and node.level > 0:
            if node.title:
                titles.append(node.title)
            node = node.parent
        return BREADCRUMB_SEPARATOR.join(reversed(titles)) or None


def _pack(units: list[_Unit]) -> list[_Piece]:
    """Greedy packing of consecutive units (see the module docstring); the result is closed.
    The span being packed is kept as plain integers (a body of short lines has a unit a line)."""
    out: list[_Piece] = []

    def finish(start: int, end: int) -> None:
        if out and end - start < PACK_MIN and out[-1].size + (end - start) <= HARD_MAX:
            out[-1] = _Piece(out[-1].start, end, closed=True)
        else:
            out.append(_Piece(start, end, closed=True))

    if not units:
        return out
    start, end, closed = units[0]
    for unit_start, unit_end, unit_closed in islice(units, 1, None):
        size = end - start
        total = size + (unit_end - unit_start)
        if (not closed and not unit_closed and total <= PACK_MAX) or (
            size < PACK_MIN and total <= HARD_MAX
        ):
            end, closed = unit_end, closed or unit_closed
        else:
            finish(start, end)
            start, end, closed = unit_start, unit_end, unit_closed
    finish(start, end)
    return out


# --------------------------------------------------------------------------------------------
# Public projections.


def cut_prose(body: str) -> Projection | None:
    """Cut a prose body along its Markdown heading tree (rule: span-bound; rules in the module doc).

    Returns ``None`` when ``len(body) <= PROSE_MIN_BODY`` (2000) or the body is only whitespace:
    the body is never cut. Otherwise a ``"prose"`` projection of spans in body order tiling the
    whole body, none only whitespace, each at most 2000 characters unless it is a single token
    no boundary cuts; always ``lossless``. Linear time; never raises.
    """
    if len(body) <= PROSE_MIN_BODY or _NON_BLANK.search(body) is None:
        return None
    cutter = _Cutter(body)
    spans = tuple(Span(p.start, p.end, cutter.breadcrumb(p.start)) for p in cutter.spans())
    return Projection("prose", spans, lossless=True)


def cut_evidence(body: str, *, lines_per_span: int = EVIDENCE_LINES_DEFAULT) -> Projection | None:
    """Cut operational evidence into fixed windows of ``lines_per_span`` lines (rule:
    evidence-windows).

    Lines end with ``"\\n"`` (kept in the window); the last window holds the remaining lines and
    may be shorter. At most 64 windows: a longer body gets windows of ``k × lines_per_span``
    lines (smallest such ``k``), so the windows always tile the whole body. Spans have no
    breadcrumb and the projection is never lossless. Returns ``None`` for an empty body. Raises
    ``ValueError`` when ``lines_per_span < 1`` (a configuration error, not a user error).
    """
    if lines_per_span < 1:
        raise ValueError(f"lines_per_span must be at least 1, got {lines_per_span}")
    if not body:
        return None
    n = len(body)
    lines = body.count("\n") + (0 if body.endswith("\n") else 1)
    windows = -(-lines // lines_per_span)
    lines_per_span *= max(1, -(-windows // MAX_SPANS))
    spans: list[Span] = []
    pos = 0
    while pos < n:
        end = pos
        for _ in range(lines_per_span):
            nl = body.find("\n", end)
            end = n if nl < 0 else nl + 1
            if end >= n:
                break
        spans.append(Span(pos, end, None))
        pos = end
    return Projection("evidence", tuple(spans), lossless=False)


def _int_field(item: Mapping[str, Any], key: str, index: int) -> int:
    if key not in item:
        raise SpanError(f"spans[{index}] has no {key!r}; each span needs start, end and label")
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpanError(f"spans[{index}].{key} must be an integer character offset")
    return value


def declared_spans(body: str, spans: Sequence[Mapping[str, Any]]) -> Projection:
    """Validate writer-declared spans and use them verbatim (rule: declared-spans).

    ``spans`` is a list of ``{"start": int, "end": int, "label": str}`` (character offsets, end
    exclusive; other keys are ignored). They must be 1..64, in body order, each non-empty, tiling
    ``[0, len(body))`` with no gap or overlap; each label a non-blank string of at most 200
    characters, used as the span's breadcrumb unchanged. Returns a lossless ``"declared"``
    projection. Raises :class:`SpanError` naming the first offending span and the reason.
    """
    n = len(body)
    if not n:
        raise SpanError("spans cannot be declared on an empty body")
    if isinstance(spans, str | bytes | Mapping) or not isinstance(spans, Sequence):
        raise SpanError("spans must be a list of {start, end, label} objects")
    if not spans:
        raise SpanError("spans must not be empty: declare at least one span, or omit spans")
    if len(spans) > MAX_SPANS:
        raise SpanError(f"at most {MAX_SPANS} spans may be declared, got {len(spans)}")
    result: list[Span] = []
    expected = 0
    for index, item in enumerate(spans):
        if not isinstance(item, Mapping):
            raise SpanError(f"spans[{index}] must be an object with start, end and label")
        start = _int_field(item, "start", index)
        end = _int_field(item, "end", index)
        label = item.get("label")
        if not isinstance(label, str) or not label.strip():
            raise SpanError(f"spans[{index}].label must be a non-blank string")
        problem = line_problem(label)  # a label is a breadcrumb: printed as a name is
        if problem == NOT_BLANK:  # only invisible characters (zero-width spaces): blank too
            raise SpanError(f"spans[{index}].label must be a non-blank string")
        if problem:
            raise SpanError(f"spans[{index}].label must be {problem}")
        if len(label) > LABEL_MAX_CHARS:
            raise SpanError(
                f"spans[{index}].label is {len(label)} characters long;"
                f" at most {LABEL_MAX_CHARS} are allowed"
            )
        if end <= start:
            raise SpanError(
                f"spans[{index}] is empty or reversed (start {start}, end {end});"
                " end must be greater than start"
            )
        if start != expected:
            if index == 0:
                reason = f"spans[0] starts at {start}; the first span must start at 0"
            elif start < result[-1].start:
                reason = (
                    f"spans[{index}] starts at {start}, before spans[{index - 1}]"
                    f" (which starts at {result[-1].start}): list spans in body order"
                )
            elif start < expected:
                reason = (
                    f"spans[{index}] starts at {start} but spans[{index - 1}] ends at"
                    f" {expected}: spans must not overlap"
                )
            else:
                reason = (
                    f"spans[{index}] starts at {start} but spans[{index - 1}] ends at"
                    f" {expected}: characters {expected}..{start - 1} are in no span (gap)"
                )
            raise SpanError(reason)
        if end > n:
            raise SpanError(
                f"spans[{index}] ends at {end}, past the end of the body ({n} characters)"
            )
        result.append(Span(start, end, label))
        expected = end
    if expected != n:
        raise SpanError(
            f"the last span ends at {expected} but the body has {n} characters:"
            " spans must cover the whole body"
        )
    return Projection("declared", tuple(result), lossless=True)


def project(
    entity_type: str,
    body: str,
    *,
    declared: Sequence[Mapping[str, Any]] | None = None,
    evidence_lines: int = EVIDENCE_LINES_DEFAULT,
) -> Projection | None:
    """Choose and apply the projection for a memory (rule: span-bound).

    ``declared`` given (even an empty list) → :func:`declared_spans` (may raise
    :class:`SpanError`); type ``observation`` → :func:`cut_evidence` with ``evidence_lines``;
    a type in :data:`NEVER_CUT_TYPES` → ``None``; any other type → :func:`cut_prose`. ``None``
    means the body is not cut. The type is compared case-insensitively after stripping.
    """
    if declared is not None:
        return declared_spans(body, declared)
    kind = entity_type.strip().lower()
    if kind == EVIDENCE_TYPE:
        return cut_evidence(body, lines_per_span=evidence_lines)
    if kind in NEVER_CUT_TYPES:
        return None
    return cut_prose(body)
