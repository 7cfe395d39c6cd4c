"""The query object: a query's text, its words and their weights, built once per request.

**Text.** NFC (text is compared in Unicode NFC, as it is stored), without the characters that
show nothing at its ends (:func:`app.domain.terms.strip_invisible`); blank or longer than
:data:`app.core.policy.MAX_QUERY_CHARS` characters is a ``BadRequest``.

**Words.** Split once, by the database (``sibyl:search.words``): the parser and ``english``
dictionaries that built every ``search_tsv`` give each token its lexemes, so a query word matches
exactly what indexing made of it; a stop word has none; a compound word counts through its parts.
Each word once (by its lexemes), in query order.

**Weights** (BM25's inverse document frequency). From the reader's counts when every audience it
reads is counted and fresh (:mod:`app.repo.term_stats`): with ``N`` documents and ``df`` of them
holding the word's scarcest lexeme, ``ln(1 + (N − df + 0.5) / (df + 0.5))``; the mean length is
theirs. Else the fallback: fixed English word frequencies (:func:`app.domain.terms.weight`) and a
mean length of :attr:`SearchSettings.fallback_avg_length`. No row the reader cannot read enters a
weight. Words weighing under ``min_weight`` are dropped while others are left; the
``max_words`` heaviest are kept (ties: query order).

**Paths.** With counts, a word whose scarcest lexeme the reader's audiences hold in more
documents than an impact list keeps takes the lists (its ``list_lexeme``; they exist then, as
the org holds it in at least as many): what decides the path is the reader's count, never the
org's, which rows the reader cannot read are part of. ``truncated`` when one of the reader's
audiences holds it in more documents than a list keeps. Every other word is scanned.

**Ask.** The words after the query's last interrogative word (``what``, ``which``, ``how``...;
contractions such as ``what's`` too) that has a word after it: what a question asks for, which
``metadata.focus`` weighs more (:attr:`SearchSettings.focus_asked`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.errors import BadRequest
from app.core.reader import Reader
from app.domain import terms
from app.domain.search.settings import SearchSettings
from app.domain.validation import clean_text
from app.repo import search as search_repo
from app.repo import term_stats

_LIFECYCLES = ("active", "superseded", "retired")
ASK_WORDS = frozenset({"what", "which", "how", "why", "when", "where", "who", "whom", "whose"})
_APOSTROPHES = re.compile("['\u2019\u2018\u02bc\u00b4]")


@dataclass(frozen=True)
class Word:
    """One word of the full-text lane: as written (``token``), its weight (``idf``), the lexeme
    whose impact lists it takes (None: it is scanned) and whether those lists are cut for the
    reader (``truncated``)."""

    token: str
    idf: float
    list_lexeme: str | None = None
    truncated: bool = False
    asked: bool = False
    """Whether the word is in the question's ask."""


@dataclass(frozen=True)
class Filters:
    """The request's filters every lane applies."""

    types: list[str] | None
    lifecycles: list[str]
    project: str | None


@dataclass(frozen=True)
class Query:
    """A query as every stage reads it."""

    text: str
    words: tuple[Word, ...]
    """The full-text lane's words, heaviest first."""
    scoring: search_repo.Scoring
    counted: bool
    """Whether the weights come from the reader's counts (else the fallback)."""
    documents: int | None = None
    """The documents the reader reads, by its counts (None: not counted)."""
    org_documents: int | None = None
    """The org's counted documents (None: not counted)."""

    @property
    def tokens(self) -> list[str]:
        """The words as written, heaviest first."""
        return [w.token for w in self.words]

    @property
    def idfs(self) -> list[float]:
        """Their weights, in the same order."""
        return [w.idf for w in self.words]

    @property
    def weighted(self) -> list[tuple[str, float]]:
        """(word, weight) pairs, heaviest first (what excerpts are centred by)."""
        return [(w.token, w.idf) for w in self.words]

    def asked(self) -> Query:
        """The query reduced to the words of its ask (none: no ask)."""
        return Query(
            self.text,
            tuple(w for w in self.words if w.asked),
            self.scoring,
            self.counted,
            self.documents,
            self.org_documents,
        )


def normalize_query(value: str, *, field: str) -> str:
    """``value`` in NFC without the characters that show nothing at its ends; ``BadRequest`` when
    it holds a NUL character or a lone surrogate anywhere (at its ends too: never silently
    dropped), when nothing but invisible characters and lone combining marks is left, or when
    it is longer than :data:`app.core.policy.MAX_QUERY_CHARS` characters."""
    clean_text(value, field=field)
    stripped = terms.strip_invisible(unicodedata.normalize("NFC", value))
    if all(unicodedata.category(c) in ("Mn", "Me") or terms.invisible(c) for c in stripped):
        raise BadRequest(f"{field} must be a non-blank string")
    if len(stripped) > policy.MAX_QUERY_CHARS:
        raise BadRequest(f"{field} must be at most {policy.MAX_QUERY_CHARS} characters")
    return stripped


def normalize_lifecycles(values: list[str] | None) -> list[str]:
    """The lifecycles to return: default ``active`` and ``superseded``; lower-cased, duplicates
    dropped, ``retired`` dropped (never returned). ``BadRequest`` for an unknown value, or when
    nothing but ``retired`` (or nothing at all) was named."""
    if values is None:
        return list(policy.SEARCH_LIFECYCLES)
    if len(values) > policy.MAX_NAMES:
        raise BadRequest(f"lifecycle may list at most {policy.MAX_NAMES} names")
    out: list[str] = []
    for value in values:
        name = value.strip().lower()
        if name not in _LIFECYCLES:
            raise BadRequest("lifecycle entries must be 'active' or 'superseded'")
        if name != "retired" and name not in out:
            out.append(name)
    if not out:
        raise BadRequest(
            "lifecycle must name 'active' or 'superseded' (retired memories are never returned)"
        )
    return out


def _interrogative(token: str) -> bool:
    word = token.lower()
    return word in ASK_WORDS or _APOSTROPHES.split(word, maxsplit=1)[0] in ASK_WORDS


def ask_positions(tokens: list[str]) -> set[int]:
    """The positions (0-based, in ``tokens``) of the words after the last interrogative word
    that has a word after it; empty when there is none (a keyword query)."""
    last = max((i for i, t in enumerate(tokens[:-1]) if _interrogative(t)), default=None)
    return set(range(last + 1, len(tokens))) if last is not None else set()


async def build_query(
    conn: AsyncConnection, reader: Reader, text: str, settings: SearchSettings
) -> Query:
    """The :class:`Query` of ``text`` (normalised already) for ``reader``: one statement,
    ``sibyl:search.words``."""
    parsed, counts = await search_repo.lookup_words(
        conn, reader_params=reader.params(), query=terms.word_text(text)
    )
    counted = counts.stale == 0 and counts.documents > 0
    ask = ask_positions(list(counts.tokens))
    asked_tokens = {counts.tokens[i].lower() for i in ask}
    words: list[Word] = []
    for p in parsed:
        scarcest = min(p.lexemes, key=lambda x: (x.df, x.lexeme))
        if counted:
            df = min(max(scarcest.df, 0), counts.documents)
            idf = math.log(1.0 + (counts.documents - df + 0.5) / (df + 0.5))
            # lists exist when the ORG holds the lexeme in more documents than a list keeps;
            # a word takes them only when the reader's own audiences do, so whether it is
            # scanned or listed never depends on rows the reader cannot read
            takes_lists = scarcest.listed and scarcest.df > term_stats.LIST_LENGTH
            list_lexeme = scarcest.lexeme if takes_lists else None
            truncated = list_lexeme is not None and scarcest.top_df > settings.word_cap
        else:
            idf = terms.weight(p.token.lower())
            list_lexeme, truncated = None, False
        words.append(
            Word(p.token, idf, list_lexeme, truncated, asked=p.token.lower() in asked_tokens)
        )
    order = {id(w): i for i, w in enumerate(words)}
    ranked = sorted(words, key=lambda w: (-w.idf, order[id(w)]))
    kept = [w for w in ranked if w.idf >= settings.min_weight] or ranked[:1]
    scoring = search_repo.Scoring(
        k1=settings.k1,
        b=settings.b,
        avg_length=(
            max(1.0, counts.lengths / counts.documents) if counted else settings.fallback_avg_length
        ),
    )
    return Query(
        text,
        tuple(kept[: settings.max_words]),
        scoring,
        counted,
        counts.documents if counted else None,
        counts.org_documents if counted else None,
    )
