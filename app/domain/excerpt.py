"""Query-focused excerpts: the stretch of a text where a query's words are (search's ``focus``).

:func:`excerpt` picks, in ``text``, the window of at most ``chars`` characters that holds the
heaviest set of distinct query words (Σ of their weights; then more occurrences; then the
earlier window), starting at the beginning of the line or sentence that holds its first match
when that fits. A query word matches a text word that starts with the word's stem-like prefix
(the word less up to two final letters, at least 4 letters: ``returns`` finds ``return`` and
``returning``), case-insensitively, at a word boundary (an underscore is one: ``type`` is found
in ``get_type_hints``, as the database's parser finds it). Cuts fall on whitespace and are marked
``...`` (a hard cut, with no whitespace in reach, at a grapheme-cluster boundary: never inside a
flag, an emoji sequence or a letter and its accents); the result, markers included, is never
longer than ``chars``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.domain.preview import cluster_floor

__all__ = ["excerpt", "excerpt_at", "matches"]

_LEAD = 0.25
"""How far before its first match (a share of ``chars``) a window may start to take in the start
of that match's line or sentence."""


def _stem(word: str) -> str:
    return (word if len(word) <= 4 else word[: max(4, len(word) - 2)]).casefold()


def _pattern(stem: str) -> re.Pattern[str]:
    # a word starts after anything but a letter or digit: an underscore separates words, as
    # PostgreSQL's parser splits `get_type_hints` into get, type, hints (else a span that scored
    # on "type hints" through it would show an excerpt without either word)
    return re.compile(r"(?<![^\W_])" + re.escape(stem), re.IGNORECASE)


def matches(text: str, words: Sequence[tuple[str, float]]) -> list[tuple[int, int, float]]:
    """(position, word number, weight) of every query-word occurrence in ``text``, by position
    (what :func:`excerpt_at` takes, to cut one text at several lengths)."""
    found: list[tuple[int, int, float]] = []
    folded = text.casefold()  # a word whose stem is nowhere in it is not scanned for
    for n, (word, weight) in enumerate(words):
        stem = _stem(word)
        if not word.strip() or stem not in folded:
            continue
        for m in _pattern(stem).finditer(text):
            found.append((m.start(), n, weight))
    found.sort()
    return found


def _start_of_context(text: str, position: int, earliest: int) -> int:
    """The start of the line or sentence holding ``position``, not before ``earliest``."""
    floor = max(0, earliest)
    line = text.rfind("\n", floor, position)
    sentence = max(text.rfind(". ", floor, position), text.rfind("? ", floor, position))
    best = max(line, sentence)
    if best >= 0:
        return best + (1 if best == line else 2)
    if floor == 0:
        return 0
    space = text.find(" ", floor, position)  # no boundary in reach: start at a word
    return space + 1 if space >= 0 else position


def excerpt(text: str, words: Sequence[tuple[str, float]], chars: int) -> str:
    """The query-focused excerpt of ``text`` (see the module docstring): at most ``chars``
    characters; ``text`` itself when it fits; its first ``chars`` (cut at whitespace, ``...``)
    when no word matches; "" when ``chars`` ≤ 3 and the text does not fit. ``words``: (word,
    weight > 0) pairs, as :func:`app.domain.terms.words` gives them."""
    if len(text) <= chars:
        return text
    return excerpt_at(text, matches(text, words) if chars > 3 else [], chars)[1]


def excerpt_at(text: str, found: Sequence[tuple[int, int, float]], chars: int) -> tuple[int, str]:
    """:func:`excerpt` of ``text`` given its :func:`matches`, with where in ``text`` the excerpt
    starts (its first character after a leading ``...``)."""
    if len(text) <= chars:
        return 0, text
    if chars <= 3:
        return 0, ""
    if not found or chars < 10:
        return 0, _cut_end(text, 0, chars)
    span = chars - 6  # room for both markers
    best: tuple[float, int, int] | None = None
    best_start = 0
    # One pass: the window starting at match i holds the matches i..end-1 (a writer may store
    # thousands of matches in one span; comparing each with every other was quadratic).
    weights = {n: weight for _, n, weight in found}
    inside: dict[int, int] = {}  # word number -> its matches inside the window
    end = 0
    for i, (position, number, _) in enumerate(found):
        while end < len(found) and found[end][0] + 1 <= position + span:
            inside[found[end][1]] = inside.get(found[end][1], 0) + 1
            end += 1
        key = (sum(weights[n] for n in sorted(inside)), end - i, -position)
        if best is None or key > best:
            best, best_start = key, position
        inside[number] -= 1
        if not inside[number]:
            del inside[number]
    start = _start_of_context(text, best_start, best_start - int(span * _LEAD))
    if start <= 3:
        start = 0
    return start, _cut_end(text, start, chars)


def _cut_end(text: str, start: int, chars: int) -> str:
    """``text[start:]`` within ``chars`` characters, markers included: ``...`` before it when
    ``start`` > 0, after it when cut (at the last whitespace, unless that lies before half)."""
    lead = "..." if start > 0 else ""
    room = chars - len(lead)
    if room - 3 < 1:
        return ""
    rest = text[start:]
    if len(rest) <= room:
        return lead + rest.lstrip() if lead else rest
    room -= 3
    piece = rest[: room + 1]
    cut = piece.rfind(" ", 0, room + 1)
    newline = piece.rfind("\n", 0, room + 1)
    cut = max(cut, newline)
    body = rest[:cut] if cut >= room // 2 else rest[: cluster_floor(rest, room)]
    return (lead + body.strip() if lead else body.rstrip()) + "..."
