"""``sibyl:search.fulltext``: the full-text lane (rule: search-lanes), every query word a way in.

The statement, step by step (its CTEs):

- ``words``: the query's words (bound arrays, in the domain's order) with their weights
  (``idf``), each as a ``plainto_tsquery('english', word)`` and its lexemes, and ``list_lexeme``:
  the word's scarcest lexeme when the word takes the impact lists (null: it takes the scan).
- ``scanned``: a word without lists finds its readable matches through the GIN indexes of
  ``entities.search_tsv`` and ``passages.search_tsv`` (every filter and the read rule in the arm,
  a passage probing its parent); each match carries its term contribution (BM25's saturation of
  the word's frequency in it). Each arm reads at most ``:scan_read`` matches (a GIN index gives
  them in the table's physical order) and keeps the ``:scan_limit + 1`` of highest
  contribution (then id): a cut by contribution, never by where rows lie (which rows the reader
  cannot read, and inserts of others, move), unless a word has more readable matches than
  ``:scan_read``.
- ``listed``: a word with lists takes, from the current impact lists of the reader's fresh
  audiences (every document of an audience is one each of its readers may read), the
  ``:word_cap`` entries of highest contribution (the request's type filter applied first).
- ``private_*``: a word with lists also finds the reader's own and granted private memories (and
  their passages), which no audience holds: the rows whose ``access_tsv`` names the reader and
  that hold the word, one GIN probe per word and table (``ix_*_access_search``, migration 0015),
  every filter and the read rule in the arm (a lexeme is a way in, never a permission), each up
  to :func:`private_share` rows (``:scan_limit`` a table shared equally among the words with
  lists, so a rare word's matches are never crowded out by a common one's). Each row found is
  read once, whichever words found it, and counts every query word it holds (one pass over its
  vector), so its gain in the pool does not depend on which word's share reached it.
- ``pool``: each candidate once, the ``:cap`` with the highest Σ idf × contribution over the
  words that found it (then id): candidates holding more, rarer, more prominent query words,
  never the most recent or the first met.
- ``documents`` / ``lexeme_tf`` / ``word_tf`` / ``scored``: the pool's current vectors, their
  memory rows passing every filter and the read rule again; BM25 over every query word.
- ``fulltext``: ranks (score desc, then id).
- ``flags``: whether a bound cut anything: a scan or private arm that reached its limit, a
  word whose lists hold fewer documents than one of the reader's audiences has
  (``:truncated``), more candidates than the pool keeps. Always one row, so an empty page says
  whether it was cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.search.common import (
    BM25,
    MEMORY_FILTER,
    PARENT_OF_P,
    PASSAGE_FILTER,
    READER_AUDIENCES,
    TERM_FREQUENCIES,
    saturation,
    term_frequencies,
)

# One word's frequency in the vector `{tsv}`: the scarcest of its lexemes' occurrences (null:
# not all of them are there).
_WORD_TF = """(SELECT CASE WHEN count(*) = cardinality(w.lexemes)
                   THEN min(cardinality(u.positions)) END
             FROM unnest(ts_filter(setweight({tsv}, 'D', w.lexemes), '{{d}}')) u)"""


def _contribution(tsv: str) -> str:
    """SQL: the word's BM25 saturation in ``tsv``, over ``x.tf`` of :func:`_word_tf`."""
    return saturation("x.tf", f"length({tsv})")


def _word_tf(tsv: str) -> str:
    """SQL: ``CROSS JOIN LATERAL`` the word's frequency in ``tsv`` as ``x.tf``, computed once
    per row (the saturation reads it twice; the fence keeps it from being inlined there)."""
    return f"CROSS JOIN LATERAL (SELECT {_WORD_TF.format(tsv=tsv)} AS tf OFFSET 0) x"


FULLTEXT_SQL = text(
    f"""/* sibyl:search.fulltext */
WITH words AS (  -- the query's words, their weights, lexemes and path (lists or scan)
    SELECT w.ord, w.idf, w.list_lexeme, plainto_tsquery('english', w.word) AS tsq,
           tsvector_to_array(to_tsvector('english', w.word)) AS lexemes
    FROM unnest(CAST(:words AS text[]), CAST(:idfs AS float8[]), CAST(:list_lexemes AS text[]))
         WITH ORDINALITY AS w(word, idf, list_lexeme, ord)
    WHERE numnode(plainto_tsquery('english', w.word)) > 0
),
scanned AS (  -- a word without lists: its readable matches, each arm reading up to
    -- :scan_read of them and keeping the :scan_limit + 1 of highest contribution
    SELECT w.ord, w.idf, m.*, count(*) OVER (PARTITION BY w.ord, m.arm) AS n
    FROM words w
    CROSS JOIN LATERAL (
        (SELECT r.* FROM (
            SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, 'memory' AS arm,
                   {_contribution("t.search_tsv")} AS contribution
            FROM entities t {_word_tf("t.search_tsv")}
            WHERE w.list_lexeme IS NULL
              AND t.org_id = :r_org AND t.search_tsv @@ w.tsq AND {MEMORY_FILTER}
            LIMIT :scan_read) r
         ORDER BY r.contribution DESC NULLS LAST, r.id
         LIMIT :scan_limit + 1)
      UNION ALL
        (SELECT r.* FROM (
            SELECT p.id, p.parent_id, t.type, 'passage' AS arm,
                   {_contribution("p.search_tsv")} AS contribution
            FROM passages p {PARENT_OF_P} {_word_tf("p.search_tsv")}
            WHERE w.list_lexeme IS NULL
              AND p.org_id = :r_org AND p.search_tsv @@ w.tsq AND {PASSAGE_FILTER}
            LIMIT :scan_read) r
         ORDER BY r.contribution DESC NULLS LAST, r.id
         LIMIT :scan_limit + 1)
    ) m
),
audiences AS (  -- the reader's fresh audiences and their current impact lists
    SELECT s.audience, s.impacts_generation AS generation
    FROM term_audiences s
    WHERE s.org_id = :r_org AND s.audience = ANY({READER_AUDIENCES}) AND s.fresh
      AND s.impacts_generation IS NOT NULL
      AND (CAST(:project AS text) IS NULL OR s.audience = :project)
),
listed AS (  -- a word with lists: the :word_cap best entries of the reader's audiences' lists
    SELECT w.ord, w.idf, l.*
    FROM words w
    CROSS JOIN LATERAL (
        SELECT i.doc_id AS id,
               CASE WHEN i.doc_id = i.memory_id THEN NULL ELSE i.memory_id END AS parent_id,
               i.memory_type AS type, i.impact AS contribution
        FROM audiences a
        JOIN term_impact_lists l ON l.org_id = :r_org AND l.lexeme = w.list_lexeme
                                AND l.audience = a.audience AND l.generation = a.generation
        CROSS JOIN LATERAL unnest(l.doc_ids, l.memory_ids, l.memory_types, l.impacts)
                           AS i(doc_id, memory_id, memory_type, impact)
        WHERE w.list_lexeme IS NOT NULL
          AND (CAST(:types AS text[]) IS NULL OR i.memory_type = ANY(CAST(:types AS text[]))
               OR (i.doc_id <> i.memory_id AND 'passage' = ANY(CAST(:types AS text[]))))
        ORDER BY i.impact DESC, i.doc_id COLLATE "C"
        LIMIT :word_cap
    ) l
),
private_hits AS (  -- a word with lists: the reader's private memories and passages holding it,
    -- one GIN probe per word and table (the rows whose access lexemes name the reader, migration
    -- 0015), every filter and the read rule in the arm (a lexeme is a way in, never a
    -- permission; what the reader may not read never takes a slot), each up to
    -- :private_share + 1 rows (the words share :scan_limit a table equally)
    SELECT w.ord, m.*, count(*) OVER (PARTITION BY w.ord, m.arm) AS n
    FROM words w
    CROSS JOIN LATERAL (
        SELECT sibyl_access_query(:r_user) && w.tsq AS q
    ) r
    CROSS JOIN LATERAL (
        (SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, 'memory' AS arm,
                t.search_tsv AS tsv
         FROM entities t
         WHERE w.list_lexeme IS NOT NULL AND t.org_id = :r_org
           AND t.access_tsv IS NOT NULL AND (t.search_tsv || t.access_tsv) @@ r.q
           AND {MEMORY_FILTER}
         LIMIT :private_share + 1)
      UNION ALL
        (SELECT p.id, p.parent_id, t.type, 'passage', p.search_tsv
         FROM passages p {PARENT_OF_P}
         WHERE w.list_lexeme IS NOT NULL AND p.org_id = :r_org
           AND p.access_tsv IS NOT NULL AND (p.search_tsv || p.access_tsv) @@ r.q
           AND {PASSAGE_FILTER}
         LIMIT :private_share + 1)
    ) m
),
private_rows AS (  -- each private row found once, whichever words found it (ids are unique
    -- across the two tables: only passages' begin with passage_)
    SELECT DISTINCT ON (h.id) h.id, h.parent_id, h.type, h.tsv
    FROM private_hits h
    ORDER BY h.id
),
{term_frequencies("private_rows", "private_")}private AS (  -- per private row and every query
    -- word it holds, the word's contribution: a row counts each word it holds, whichever found it
    SELECT x.ord, x.idf, r.id, r.parent_id, r.type,
           {saturation("x.tf", "length(r.tsv)")} AS contribution
    FROM private_word_tf x
    JOIN private_rows r ON r.id = x.id
),
found AS (  -- every (word, document) a way in found, with the word's weighted contribution
    SELECT s.ord, s.id, s.parent_id, s.type, s.idf * s.contribution AS gain
    FROM scanned s WHERE s.contribution IS NOT NULL
  UNION ALL
    SELECT l.ord, l.id, l.parent_id, l.type, l.idf * l.contribution FROM listed l
  UNION ALL
    SELECT v.ord, v.id, v.parent_id, v.type, v.idf * v.contribution
    FROM private v WHERE v.contribution IS NOT NULL
),
pool AS (  -- each candidate once: the :cap with the highest summed gain, then by id
    SELECT c.id, c.parent_id, c.type
    FROM (
        SELECT f.id, min(f.parent_id) AS parent_id, min(f.type) AS type, sum(f.gain) AS gain
        FROM (  -- a word counts once per document (its best way in)
            SELECT f.ord, f.id, min(f.parent_id) AS parent_id, min(f.type) AS type,
                   max(f.gain) AS gain
            FROM found f
            GROUP BY f.ord, f.id
        ) f
        GROUP BY f.id
    ) c
    ORDER BY c.gain DESC, c.id
    LIMIT :cap
),
documents AS (  -- the pool's current vectors, each memory row passing every filter again
    SELECT c.id, c.parent_id, c.type, t.search_tsv AS tsv
    FROM pool c
    JOIN entities t ON t.org_id = :r_org AND t.id = c.id
    WHERE c.parent_id IS NULL AND {MEMORY_FILTER}
  UNION ALL
    SELECT c.id, c.parent_id, c.type, p.search_tsv
    FROM pool c
    JOIN passages p ON p.org_id = :r_org AND p.id = c.id
    JOIN entities t ON t.org_id = :r_org AND t.id = p.parent_id
    WHERE c.parent_id IS NOT NULL AND {PASSAGE_FILTER}
),
{TERM_FREQUENCIES}scored AS (  -- BM25 over every query word
    SELECT c.id, c.parent_id, c.type, {BM25} AS text_rank
    FROM documents c
    JOIN word_tf x ON x.id = c.id
    GROUP BY c.id, c.parent_id, c.type, length(c.tsv)
),
fulltext AS (
    SELECT s.id, s.parent_id, s.type, s.text_rank,
           row_number() OVER (ORDER BY s.text_rank DESC, s.id) AS lane_rank
    FROM scored s
),
flags AS (  -- whether a bound cut anything (always one row: an empty page says it too)
    SELECT coalesce((SELECT max(n) > :scan_limit FROM scanned), false)
        OR coalesce((SELECT max(n) > :private_share FROM private_hits), false)
        OR CAST(:truncated AS boolean)
        OR (SELECT count(DISTINCT f.id) > :cap FROM found f) AS capped
)
SELECT f.id, f.parent_id, f.type, f.text_rank, f.lane_rank, flags.capped
FROM flags
LEFT JOIN fulltext f ON true
ORDER BY f.lane_rank"""
)


@dataclass(frozen=True)
class TextHit:
    """One candidate of the full-text lane: a memory or passage (``parent_id`` set), the
    memory's type, its BM25 score (``text_rank`` > 0) and its rank in the lane (1 = best)."""

    id: str
    parent_id: str | None
    type: str
    text_rank: float
    lane_rank: int


@dataclass(frozen=True)
class Bounds:
    """The full-text lane's bounds: ``cap`` candidates scored, ``word_cap`` list entries a word
    takes, ``scan_limit`` matches a scan arm keeps (per word and table) of the ``scan_read`` it
    reads at most."""

    cap: int
    word_cap: int
    scan_limit: int
    scan_read: int


@dataclass(frozen=True)
class Scoring:
    """BM25's constants: ``k1`` term-frequency saturation, ``b`` length normalisation,
    ``avg_length`` the length (distinct lexemes) at which a document is neither favoured nor
    penalised."""

    k1: float
    b: float
    avg_length: float

    def params(self) -> dict[str, float]:
        """The bound parameters ``:k1``, ``:b``, ``:avg_length``."""
        return {"k1": self.k1, "b": self.b, "avg_length": self.avg_length}


def private_share(scan_limit: int, list_lexemes: list[str | None]) -> int:
    """The private matches one word with lists reads per table: ``scan_limit`` shared equally
    among those words (rounded up, at least 1), so a reader's private rows cost the same bound
    whatever the query's length and a rare word's few matches are never crowded out by a
    common word's many."""
    words = sum(lexeme is not None for lexeme in list_lexemes)
    return max(1, -(-scan_limit // max(words, 1)))


async def fulltext(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    words: list[str],
    idfs: list[float],
    list_lexemes: list[str | None],
    truncated: bool,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    bounds: Bounds,
    scoring: Scoring,
) -> tuple[list[TextHit], bool]:
    """Run :data:`FULLTEXT_SQL`: the lane's candidates, best first, and whether a bound cut
    anything. ``words`` (tokens as written), ``idfs`` and ``list_lexemes`` (a word's scarcest
    lexeme when it takes the impact lists, else None) are parallel; ``truncated``: a word taking
    lists has more documents in one of the reader's audiences than a list holds."""
    if not words:
        return [], False
    rows = (
        await conn.execute(
            FULLTEXT_SQL,
            {
                **reader_params,
                "words": words,
                "idfs": idfs,
                "list_lexemes": list_lexemes,
                "truncated": truncated,
                "types": types,
                "lifecycles": lifecycles,
                "project": project,
                "cap": bounds.cap,
                "word_cap": bounds.word_cap,
                "scan_limit": bounds.scan_limit,
                "scan_read": max(bounds.scan_read, bounds.scan_limit + 1),
                "private_share": private_share(bounds.scan_limit, list_lexemes),
                **scoring.params(),
            },
        )
    ).all()
    capped = bool(rows[0].capped) if rows else False
    hits = [
        TextHit(r.id, r.parent_id, r.type, float(r.text_rank), int(r.lane_rank))
        for r in rows
        if r.id is not None
    ]
    return hits, capped
