"""The line-by-line reading of :func:`app.domain.memories.code_regions`, kept as its oracle.

``code_regions`` skips the lines between two that may open code (a backtick, ``~~~``, ``::`` or
``>>>``) at once; this is the same function reading every line in turn, as it was before that
fast path (a body of 500,000 short lines: 1.1 s → 0.1 s). ``tests/test_links.py`` holds the two
to the same answer on generated bodies and on the PEP corpus.
"""

from __future__ import annotations

from app.domain.memories import (
    _ATX_LINE,
    _BACKTICKS,
    _BLOCK_START,
    _CODE_DIRECTIVE,
    _EXPLICIT_MARKUP,
    _FENCE_LINE,
)


def code_regions_line_by_line(text: str) -> list[tuple[int, int]]:
    """``code_regions`` as first written: every line read in turn."""
    regions: list[tuple[int, int]] = []
    runs: list[tuple[int, int, int]] = []  # backtick runs outside fences: start, end, paragraph
    paragraph, pos = 0, 0
    fence_char, fence_len, fence_start = "", 0, 0
    marker: int | None = None  # indentation of a literal-block marker line still waiting
    marker_gap = False  # whether a blank line must (still) come before its block: after '::'
    literal: int | None = None  # indentation of the marker of the literal block we are in
    literal_start = 0
    doctest: int | None = None  # start of the doctest block ('>>> ' paragraph) we are in
    after_blank = True  # the line before was blank (or this is the first): a paragraph starts
    for raw in text.split("\n"):
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
