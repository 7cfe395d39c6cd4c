"""The full-text lane's query words and their weights (contract §2, §8; issue 12).

**Whose statistics.** BM25 weighs a word by its rarity (inverse document frequency). Counting
documents over every stored row would let rows a reader cannot read change that reader's ranks,
scores and order (contract §2: absent ≡ denied holds for ranking too). So a reader's counts come
only from what it may read: per **audience** (a project's project-scoped memories; the org's
org-scoped ones), ``sibyl-pg stats refresh`` (also run by a bulk import of 1,000 lines or more
and by ``sibyl-pg communities rebuild``) counts the documents holding each lexeme
(:mod:`app.repo.term_stats`); a reader sums the audiences it reads (its readable projects, and
the org's unless its key is restricted). Private memories are never counted. Every row counted
is one every reader of that audience may read, so two readers who read the same audiences see
the same weights, whatever else is stored.

Counts go stale: a write that changes or removes a counted row (its text, scope, project, or
the row itself) marks its audience not fresh in the same transaction, and until the next refresh
a reader of that audience gets the **fallback**: a fixed table of English word frequencies, the
``wordfreq`` package (its data ships in the wheel), which no stored row enters. The fallback is
also used when nothing was ever counted for the reader. A new row is counted only from the next
refresh (it is then absent from the counts, never counted while unreadable). The fallback's
cost: words common in the corpus but not in English (``python``, ``pep`` in the PEPs) weigh
like rare words (docs/search.md measures both).

**Weight of a word from counts.** With ``N`` documents the reader reads and ``df`` of them
holding the word (a word of several lexemes: its scarcest), the BM25 IDF
``ln(1 + (N − df + 0.5) / (df + 0.5))``; a word no counted document holds has ``df`` 0. A stop
word (no lexeme) weighs 0.

**Weight of a word, fallback.** ``f`` = the word's frequency in English text
(``wordfreq.word_frequency``, at least :data:`MIN_FREQUENCY`; unknown words, such as
identifiers, get that floor);
``p = min(1, f × WORDS_PER_DOCUMENT)`` approximates the share of documents of
:data:`WORDS_PER_DOCUMENT` words holding it, and the weight is the BM25 IDF
``ln(1 + (1 − p) / (p + MIN_FREQUENCY × WORDS_PER_DOCUMENT))``: 0 for a word in every document
(``the``), about 15 for an unknown word, about 7 for ``python``, 4 for ``table``.

**Words.** Split as ``wordfreq.tokenize(text, "en")`` splits them (NFC, its token expression,
apostrophes at a word's ends stripped), punctuation dropped (``pyproject.toml`` stays one word,
``build-related`` gives ``build`` and ``related``), each sent to the database as written, which
lower-cases it as it lower-cased the text it indexes (two spellings that differ only in the
case of ASCII letters are one word: :func:`tokens`). Not case-folded as ``wordfreq`` does,
which turned ``Straße`` into ``strasse`` and ``ﬁnance`` into ``finance`` while the index holds
``straße`` and ``ﬁnanc``, so such a word never matched (a new-user trial, 2026-12-02); and not
lower-cased here, which in a database whose locale does not lower-case Unicode (``LC_CTYPE``
``C``) matched no word written with a capital ``İ``, ``Σ`` or ``É`` (a trial, 2026-12-03).
Each word once; those weighing under :data:`MIN_WEIGHT` are dropped (unless nothing else is
left), and of the rest the :data:`MAX_WORDS` rarest are kept, rarest first (ties: query order);
with counts, a word no counted document holds goes after the others (it weighs the most yet a scan
for it finds nothing, and the candidate scans look for the rarest words first); with the
fallback, so does a word the table does not know that no row the reader reads holds (one probe,
only for such words: ``sibyl:search.unheld_words``). The database stems each word with the
``english`` configuration and drops its stop words.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections.abc import Collection

import wordfreq
from wordfreq.tokens import TOKEN_RE

from app.repo.term_stats import Stats

__all__ = [
    "ASK_WORDS",
    "MAX_WORDS",
    "MIN_FREQUENCY",
    "MIN_WEIGHT",
    "WORDS_PER_DOCUMENT",
    "asked",
    "counted_weight",
    "filler",
    "invisible",
    "lowered",
    "strip_invisible",
    "tokens",
    "weight",
    "words",
]

MAX_WORDS = 12
"""At most this many words of a query reach the full-text lane (the rarest)."""
WORDS_PER_DOCUMENT = 150
"""The length, in words, of the document the IDF estimate assumes (a passage of ~1000 chars)."""
MIN_FREQUENCY = 1e-9
"""The frequency given to words the table does not know (rarer than any it lists)."""
MIN_WEIGHT = 0.05
"""Words weighing less (the commonest English words) are dropped when others are left."""
ASK_WORDS = frozenset({"what", "which", "how", "why", "when", "where", "who", "whom", "whose"})
"""The English interrogative words that open the clause :func:`asked` returns."""


def weight(word: str) -> float:
    """The IDF weight of one lower-cased word (see the module docstring), ≥ 0."""
    f = max(wordfreq.word_frequency(word, "en"), MIN_FREQUENCY)
    p = min(1.0, f * WORDS_PER_DOCUMENT)
    return math.log(1.0 + (1.0 - p) / (p + MIN_FREQUENCY * WORDS_PER_DOCUMENT))


def counted_weight(documents: int, df: int) -> float:
    """The BM25 IDF of a word ``df`` of ``documents`` documents hold (see the module docstring)."""
    df = min(max(df, 0), documents)
    return math.log(1.0 + (documents - df + 0.5) / (df + 0.5))


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
    word matched nothing, and in ``filters.words`` it looked like another word: new-user
    trials). A whole query (:func:`app.domain.search.normalize_query`): the exact lane meets
    ``task_a1`` in ``"\ufefftask_a1"`` as the word lane does."""
    start, end = 0, len(text)
    while start < end and invisible(text[start]):
        start += 1
    while end > start and invisible(text[end - 1]):
        end -= 1
    return text[start:end]


def lowered(word: str) -> str:
    """``word`` lower-cased one character at a time, as PostgreSQL's full-text parser does
    where the database's locale lower-cases Unicode (``towlower`` per character): ``ß`` and
    ligatures stay, ``Σ`` is always ``σ``, ``İ`` is ``i`` (Python's ``str.lower`` gives ``i``
    and a combining dot, here only the ``i``). The form ``filters.words`` echoes, and the key
    by which a query word is matched against the question's ask (:func:`asked`)."""
    return "".join(c.lower()[:1] for c in word)


def _words_in_order(text: str) -> list[str]:
    """Every word of ``text`` as written (repeats kept), in order: the tokens of
    ``wordfreq.tokenize(text, "en")`` (its expression over the NFC text; English needs no other
    step) before its case folding, without invisible format characters at their ends."""
    found = TOKEN_RE.findall(unicodedata.normalize("NFC", text))
    cleaned = (strip_invisible(t.strip("'")) for t in found)
    return [t for t in cleaned if t]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def tokens(text: str) -> list[str]:
    """The query's distinct words, in query order, each as first written: two spellings that
    differ only in the case of ASCII letters are one (``CPython cpython``: ``CPython``), as
    every database lower-cases those. Not lower-cased here: the database lower-cases each word
    as it lower-cased the text it indexed, in its own locale (in a database whose ``LC_CTYPE``
    is ``C``, ``İstanbul`` stays as written on both sides; a lower-cased query word matched
    nothing there: new-user trials, 2026-12-03), so ``istanbul İstanbul`` stays two words: one
    lexeme where the locale lower-cases Unicode, two where it does not. Invisible format
    characters at a word's ends are not part of it (:func:`strip_invisible`)."""
    seen: dict[str, str] = {}
    for word in _words_in_order(text):
        seen.setdefault(word.translate(_ASCII_LOWER), word)
    return list(seen.values())


def _interrogative(word: str) -> bool:
    """Whether ``word`` is one of :data:`ASK_WORDS`, or one with a contraction (``what's``,
    ``who’s``, ``how'd``: the part before its apostrophe, written ``'``, ``’``, ``‘``, ``ʼ`` or
    ``´``)."""
    return word in ASK_WORDS or _APOSTROPHES.split(word, maxsplit=1)[0] in ASK_WORDS


_APOSTROPHES = re.compile("['\u2019\u2018\u02bc\u00b4]")


def asked(text: str) -> set[str]:
    """The words of a question's last interrogative clause: every word after the last of
    :data:`ASK_WORDS` (or its contraction: ``what's``) that has a word after it
    (``"The proposal ... was withdrawn; what replaced it, and what return annotation does a
    narrowing function use?"`` → ``return``, ``annotation``, ``does``, ``a``, ``narrowing``,
    ``function``, ``use``; a trailing ``..., or what?`` does not end it). Empty when ``text``
    has none (a keyword query).

    Why: an agent's question often describes the memory first (its topic, which every span of
    it repeats) and asks for one detail last; search's ``metadata.focus.next`` weighs these
    words more (:data:`app.domain.policy.SEARCH_FOCUS_ASKED`)."""
    words = [lowered(w) for w in _words_in_order(text)]
    last = max((i for i, w in enumerate(words[:-1]) if _interrogative(w)), default=None)
    return set(words[last + 1 :]) if last is not None else set()


def unknown(word: str) -> bool:
    """Whether the fixed English table does not know ``word`` (it then weighs as the rarest)."""
    return wordfreq.word_frequency(word, "en") == 0


def words(
    text: str, stats: Stats | None = None, *, unheld: Collection[str] = ()
) -> list[tuple[str, float]]:
    """The query's words with their weights, rarest first: at most :data:`MAX_WORDS`, each once;
    an empty list when ``text`` holds no word. Weights from ``stats`` (the reader's counts, which
    hold every word of ``text``: a word absent from them is a stop word, weight 0), else the
    fallback :func:`weight` (with counts, a query of stop words only keeps none). A word no
    document holds (``df`` 0 in ``stats``, or listed in
    ``unheld``: with the fallback, what the caller found no readable row to hold) goes after the
    others, whatever its weight: the candidate scans look for the first words."""
    seen: dict[str, float] = {}
    for token in tokens(text):
        if stats is None:
            seen[token] = weight(token)
        elif token in stats.df:
            seen[token] = counted_weight(stats.documents, stats.df[token])
        else:
            seen[token] = 0.0
    order = {w: i for i, w in enumerate(seen)}
    # a word no counted document holds (a typo, a name new since the refresh) weighs the most,
    # yet a scan for it finds nothing: it goes last, so the rarest words that exist are the ones
    # the scans look for (one misspelt word emptied a whole query; a new-user trial, 2026-11-30)
    last = set(unheld) | {w for w in seen if stats is not None and stats.df.get(w) == 0}
    ranked = sorted(seen.items(), key=lambda kv: (kv[0] in last, -kv[1], order[kv[0]]))
    # with counts, a stop word (no lexeme: absent from them) can match nothing: never kept
    kept = [kv for kv in ranked if kv[1] >= MIN_WEIGHT] or [
        kv for kv in ranked[:1] if stats is None or kv[0] in stats.df
    ]
    return kept[:MAX_WORDS]
