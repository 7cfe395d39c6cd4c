"""``sibyl:search.spans``: the spans of given memories that hold a query word, scored with the
full-text lane's BM25 (``metadata.focus`` of search; the text a context pack shows).

Bounded per memory: the current spans (a memory never cut: itself) that hold at least one query
word, found through ``passages.search_tsv``'s index, at most ``:span_limit`` of them (in span
order), each scored once; per memory the ``:per_memory`` best are returned, best first (ties: the
earlier span), with the share of each query word in the score, and the text of each memory's
best span (its first ``:text_chars`` characters). Only the memory's own rows are read, through
the read rule on the memory: nothing another reader holds enters.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable
from app.repo.search.common import BM25, BM25_WORD, TERM_FREQUENCIES
from app.repo.search.fulltext import Scoring

SPANS_SQL = text(
    f"""/* sibyl:search.spans */
WITH words AS (  -- the query's words and weights, as in sibyl:search.fulltext
    SELECT w.ord, w.idf, tsvector_to_array(to_tsvector('english', w.word)) AS lexemes,
           plainto_tsquery('english', w.word) AS tsq
    FROM unnest(CAST(:words AS text[]), CAST(:idfs AS float8[]))
         WITH ORDINALITY AS w(word, idf, ord)
    WHERE numnode(plainto_tsquery('english', w.word)) > 0
),
any_word AS (  -- a span holding any of them
    SELECT coalesce((SELECT string_agg(CAST(w.tsq AS text), ' | ') FROM words w), '') AS q
),
memories AS (  -- the readable memories asked about
    SELECT t.id, t.org_id, t.revision, t.passage_total, t.search_tsv
    FROM entities t
    WHERE t.org_id = :r_org AND t.id = ANY(CAST(:memories AS text[])) AND {readable("t")}
),
documents AS (  -- each memory's current spans holding a query word, at most :span_limit
    SELECT m.id AS memory_id, s.id, s.passage_index, s.tsv
    FROM memories m
    CROSS JOIN LATERAL (
        SELECT p.id, p.passage_index, p.search_tsv AS tsv
        FROM passages p
        WHERE p.org_id = m.org_id AND p.parent_id = m.id AND p.parent_revision = m.revision
          AND p.search_tsv @@ CAST((SELECT q FROM any_word) AS tsquery)
        ORDER BY p.passage_index
        LIMIT :span_limit
    ) s
  UNION ALL
    SELECT m.id, m.id, NULL, m.search_tsv
    FROM memories m
    WHERE m.passage_total = 0
),
{TERM_FREQUENCIES}scored AS (  -- BM25, the formula and constants of the full-text lane
    SELECT c.memory_id, c.id, c.passage_index,
           {BM25} AS text_rank,
           -- which query words the span holds (1-based, in :words order) and each one's share
           array_agg(x.ord ORDER BY x.ord) AS word_ords,
           array_agg({BM25_WORD} ORDER BY x.ord) AS word_scores
    FROM documents c
    JOIN word_tf x ON x.id = c.id
    GROUP BY c.memory_id, c.id, c.passage_index, length(c.tsv)
),
best AS (  -- per memory, its :per_memory best spans (ties: the earlier span)
    SELECT r.*
    FROM (
        SELECT s.*, row_number() OVER (PARTITION BY s.memory_id
                                       ORDER BY s.text_rank DESC, s.passage_index NULLS FIRST)
                      AS focus_rank
        FROM scored s
    ) r
    WHERE r.focus_rank <= :per_memory
)
SELECT b.memory_id, b.id, b.passage_index, b.text_rank, b.focus_rank, b.word_ords,
       b.word_scores,
       -- the text of each memory's best span only (one probe a memory, not one a span)
       CASE WHEN b.focus_rank > 1 THEN ''
            WHEN b.passage_index IS NULL
            THEN (SELECT left(t.content, :text_chars) FROM entities t
                  WHERE t.org_id = :r_org AND t.id = b.memory_id)
            ELSE (SELECT left(p.content, :text_chars) FROM passages p
                  WHERE p.org_id = :r_org AND p.id = b.id) END AS content
FROM best b
ORDER BY b.memory_id, b.focus_rank"""
)


@dataclass(frozen=True)
class Span:
    """One span of a memory that matches the query: ``id`` (a passage, or the memory itself when
    never cut; ``passage_index`` then None) and its BM25 ``text_rank`` (> 0)."""

    id: str
    passage_index: int | None
    text_rank: float
    words: tuple[tuple[int, float], ...] = ()
    """The query words the span holds: (the word's 1-based position in ``words``, its share of
    ``text_rank``), in word order; the shares sum to ``text_rank``."""


@dataclass(frozen=True)
class Focus:
    """A memory's spans that best match the query, best first (at least one), and the first
    :data:`FOCUS_TEXT_CHARS` characters of the best one's text."""

    memory_id: str
    spans: list[Span]
    content: str


FOCUS_TEXT_CHARS = 20_000
"""The most characters of a focus span read for its excerpt (a prose span is at most 2,000
characters but a single oversized leaf or a never-cut memory may be longer)."""


async def spans(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    memories: list[str],
    words: list[str],
    idfs: list[float],
    scoring: Scoring,
    per_memory: int,
    span_limit: int,
) -> dict[str, Focus]:
    """:data:`SPANS_SQL` for ``memories`` (ids) and the weighted ``words``: each readable memory
    that holds a word, with its ``per_memory`` (≥ 1) best spans among at most ``span_limit``
    holding one, best first. Keyed by memory id; a memory with no match is absent."""
    if not memories or not words:
        return {}
    rows = await conn.execute(
        SPANS_SQL,
        {
            **reader_params,
            "memories": memories,
            "words": words,
            "idfs": idfs,
            "text_chars": FOCUS_TEXT_CHARS,
            "per_memory": max(1, per_memory),
            "span_limit": max(1, span_limit),
            **scoring.params(),
        },
    )
    out: dict[str, Focus] = {}
    for r in rows:
        span = Span(
            id=r.id,
            passage_index=r.passage_index,
            text_rank=float(r.text_rank),
            words=tuple(zip(r.word_ords, map(float, r.word_scores), strict=True)),
        )
        if r.memory_id in out:
            out[r.memory_id].spans.append(span)
        else:
            out[r.memory_id] = Focus(memory_id=r.memory_id, spans=[span], content=r.content)
    return out
