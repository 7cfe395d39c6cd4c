"""Characters and fixed word weights the search pipeline shares (:mod:`app.domain.search`).

- **Fallback weights** (:func:`weight`): without the reader's counts (never counted, or an
  audience stale since a write: :mod:`app.repo.term_stats`), a word weighs by its frequency in
  English text, the ``wordfreq`` package (its data ships in the wheel; no stored row enters
  it). ``f`` = the word's frequency (at least :data:`MIN_FREQUENCY`; an unknown word, such as an
  identifier, gets that floor); ``p = min(1, f × WORDS_PER_DOCUMENT)`` approximates the share of
  documents of :data:`WORDS_PER_DOCUMENT` words holding it, and the weight is the BM25 IDF
  ``ln(1 + (1 − p) / (p + MIN_FREQUENCY × WORDS_PER_DOCUMENT))``: 0 for a word in every
  document (``the``), about 15 for an unknown word, about 7 for ``python``, 4 for ``table``.
  Words common in the corpus but not in English (``python``, ``pep`` in the PEPs) weigh like
  rare words there.
- **Invisible characters** (:func:`invisible`, :func:`strip_invisible`): what shows nothing
  and belongs to no word; a query loses them at its ends.
- **Lower-casing as the index does** (:func:`lowered`): how ``filters.words`` echoes a word.
"""

from __future__ import annotations

import math
import unicodedata

import wordfreq

__all__ = [
    "MIN_FREQUENCY",
    "WORDS_PER_DOCUMENT",
    "filler",
    "invisible",
    "lowered",
    "strip_invisible",
    "weight",
    "word_text",
]

WORDS_PER_DOCUMENT = 150
"""The length, in words, of the document the IDF estimate assumes (a passage of ~1000 chars)."""
MIN_FREQUENCY = 1e-9
"""The frequency given to words the table does not know (rarer than any it lists)."""


def weight(word: str) -> float:
    """The IDF weight of one lower-cased word (see the module docstring), ≥ 0."""
    f = max(wordfreq.word_frequency(word, "en"), MIN_FREQUENCY)
    p = min(1.0, f * WORDS_PER_DOCUMENT)
    return math.log(1.0 + (1.0 - p) / (p + MIN_FREQUENCY * WORDS_PER_DOCUMENT))


_FILLERS = frozenset("\u034f\u115f\u1160\u3164\uffa0")


def filler(c: str) -> bool:
    """A character that shows nothing and means nothing in a word: a Hangul filler (U+115F,
    U+1160, U+3164, U+FFA0), the combining grapheme joiner U+034F, a variation selector
    (U+FE00-U+FE0F, U+E0100-U+E01EF)."""
    return c in _FILLERS or "\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef"


_BLANK_SYMBOLS = frozenset("\u2800")  # the braille blank: a symbol that shows nothing


def invisible(c: str) -> bool:
    """A character that shows nothing and belongs to no word: a space, a control or format
    character (Cc, Cf: U+0001, U+200B, U+FEFF, bidi controls), a filler (:func:`filler`:
    U+3164, U+034F, the variation selector U+FE0F), or the braille blank U+2800. (A combining
    mark shows nothing alone but ends many words, as in Devanagari: it is not one of these.)"""
    return (
        c.isspace() or filler(c) or c in _BLANK_SYMBOLS or unicodedata.category(c) in ("Cc", "Cf")
    )


def strip_invisible(text: str) -> str:
    """``text`` without the :func:`invisible` characters at its ends; inside it they stay.
    A query word: ``"\u202equorvex\u202c"`` and ``"type\ufe0f"`` are the words ``quorvex`` and
    ``type`` (the database's parser drops them or reads no letter in them; kept, the query's
    word would match nothing, and in ``filters.words`` look like another word). A whole query
    (:func:`app.domain.search.normalize_query`): the exact lane meets ``task_a1`` in
    ``"\ufefftask_a1"`` as the word lane does."""
    start, end = 0, len(text)
    while start < end and invisible(text[start]):
        start += 1
    while end > start and invisible(text[end - 1]):
        end -= 1
    return text[start:end]


def word_text(text: str) -> str:
    """``text`` with every :func:`invisible` character a space: what the database's parser is
    given to split a query into words (``"type\ufe0f"`` and ``"\u3164hints\u3164"`` are the
    words ``type`` and ``hints``, as the same letters are where a document writes them
    plainly; kept, the parser made other words of them, which matched nothing)."""
    return "".join(" " if invisible(c) else c for c in text)


def lowered(word: str) -> str:
    """``word`` lower-cased one character at a time, as PostgreSQL's full-text parser does
    where the database's locale lower-cases Unicode (``towlower`` per character): ``ß`` and
    ligatures stay, ``Σ`` is always ``σ``, ``İ`` is ``i`` (Python's ``str.lower`` gives ``i``
    and a combining dot, here only the ``i``). The form ``filters.words`` echoes."""
    return "".join(c.lower()[:1] for c in word)
