"""``sibyl:search.words``: a query's words as the database splits and stems them, with the bound
reader's document frequencies (the statistics of :mod:`app.repo.term_stats`).

One statement: ``ts_debug('english', query)`` gives every token the parser finds with the
lexemes the ``english`` configuration makes of it (the same parser and dictionaries that built
every ``search_tsv``, so a query word matches exactly what indexing made of the same word); a
compound word (``build-related``) counts through its parts, and a stop word has no lexeme. For
each lexeme: the documents of the reader's audiences holding it (summed, and the most in one
audience), and whether impact lists exist for it. With the totals of those audiences: their
documents, summed lengths, and how many are not fresh; and the org's counted documents (a
size, for the semantic lane's choice of path: no count of any row).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.search.common import READER_AUDIENCES

WORDS_SQL = text(
    f"""/* sibyl:search.words */
WITH parsed AS (  -- the parser's word tokens, stop words too (no lexeme); compounds: parts
    SELECT d.ord, d.token, d.lexemes
    FROM ts_debug('english', CAST(:query AS text))
         WITH ORDINALITY AS d(alias, description, token, dictionaries, dictionary, lexemes, ord)
    WHERE d.lexemes IS NOT NULL AND d.alias NOT IN ('asciihword', 'hword', 'numhword')
),
words AS (  -- each word that has lexemes once (by its lexemes), where it first appears
    SELECT DISTINCT ON (p.lexemes) p.ord, p.token, p.lexemes
    FROM parsed p
    WHERE cardinality(p.lexemes) > 0
    ORDER BY p.lexemes, p.ord
),
audiences AS (  -- the audiences the reader reads
    SELECT s.audience, s.fresh, s.documents, s.lengths
    FROM term_audiences s
    WHERE s.org_id = :r_org AND s.audience = ANY({READER_AUDIENCES})
),
totals AS (
    SELECT count(*) FILTER (WHERE NOT a.fresh) AS stale,
           coalesce(sum(a.documents), 0) AS documents, coalesce(sum(a.lengths), 0) AS lengths,
           (SELECT coalesce(sum(s.documents), 0) FROM term_audiences s
            WHERE s.org_id = :r_org) AS org_documents
    FROM audiences a
),
lexemes AS (  -- per word and lexeme: its documents in the reader's audiences (all, most in one)
    SELECT w.ord, w.token, l.lexeme, l.n, d.df, d.top_df,
           EXISTS (SELECT 1 FROM term_impact_lists i
                   WHERE i.org_id = :r_org AND i.lexeme = l.lexeme) AS listed
    FROM words w
    CROSS JOIN LATERAL unnest(w.lexemes) WITH ORDINALITY AS l(lexeme, n)
    CROSS JOIN LATERAL (  -- one index range per lexeme (never a pass over the statistics)
        SELECT coalesce(sum(s.df), 0) AS df, coalesce(max(s.df), 0) AS top_df
        FROM term_stats s
        WHERE s.org_id = :r_org AND s.lexeme = l.lexeme AND s.audience = ANY({READER_AUDIENCES})
    ) d
)
SELECT t.stale, t.documents, t.lengths, t.org_documents,
       x.ord, x.token, x.lexeme, x.df, x.top_df, x.listed,
       (SELECT array_agg(p.token ORDER BY p.ord) FROM parsed p) AS tokens
FROM totals t
LEFT JOIN lexemes x ON true
ORDER BY x.ord, x.n"""
)


@dataclass(frozen=True)
class Lexeme:
    """One lexeme of a query word: the documents of the reader's audiences holding it (``df``),
    the most in any one of them (``top_df``), and whether impact lists exist for it."""

    lexeme: str
    df: int
    top_df: int
    listed: bool


@dataclass(frozen=True)
class ParsedWord:
    """One word of a query, as written (``token``), at its first position (``ord``), with its
    lexemes."""

    ord: int
    token: str
    lexemes: tuple[Lexeme, ...]


@dataclass(frozen=True)
class ReaderCounts:
    """The reader's audiences together: documents, summed lengths, and how many are stale;
    with the query's word tokens in order, stop words included (``tokens``)."""

    documents: int
    lengths: int
    stale: int
    tokens: tuple[str, ...] = ()
    org_documents: int = 0
    """Every counted document of the org (every audience's, read or not)."""


async def lookup_words(
    conn: AsyncConnection, *, reader_params: dict[str, object], query: str
) -> tuple[list[ParsedWord], ReaderCounts]:
    """The words of ``query`` in query order (each once) with the bound reader's counts
    (:data:`WORDS_SQL`)."""
    rows = (await conn.execute(WORDS_SQL, {**reader_params, "query": query})).all()
    counts = ReaderCounts(
        documents=int(rows[0].documents),
        lengths=int(rows[0].lengths),
        stale=int(rows[0].stale),
        tokens=tuple(rows[0].tokens or ()),
        org_documents=int(rows[0].org_documents),
    )
    words: dict[int, ParsedWord] = {}
    for r in rows:
        if r.ord is None:
            continue
        lexeme = Lexeme(r.lexeme, int(r.df), int(r.top_df), bool(r.listed))
        found = words.get(r.ord)
        words[r.ord] = ParsedWord(
            r.ord, r.token, ((*found.lexemes, lexeme) if found else (lexeme,))
        )
    return sorted(words.values(), key=lambda w: w.ord), counts
