"""SQL fragments every search statement shares: the filters a candidate's memory row passes,
the reader's audiences, and BM25 (the full-text relevance, rule: search-lanes), written once.

Every filter (read rule, lifecycle, types, project, a passage's current revision) sits in the
arm that finds a row, before any cap, rank or page: a row the reader may not read neither takes
a slot nor moves another row's rank.
"""

from __future__ import annotations

from app.repo.readrule import readable
from app.repo.term_stats import ORG_AUDIENCE

# What every candidate's memory row `t` satisfies (a passage's: its parent's).
MEMORY_FILTER = f"""t.lifecycle = ANY(CAST(:lifecycles AS text[]))
      AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[])))
      AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
      AND {readable("t")}"""

# The same for a passage `p` of the memory row `t`: the parent's current revision only; the
# type filter also admits every passage when it names `passage`.
PASSAGE_FILTER = f"""p.parent_revision = t.revision
      AND t.lifecycle = ANY(CAST(:lifecycles AS text[]))
      AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[]))
           OR 'passage' = ANY(CAST(:types AS text[])))
      AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
      AND {readable("t")}"""

# A passage's memory row, probed once per passage (LATERAL, LIMIT 1: a nested loop driven by
# the passages' own scan, never a hash or merge join whose choice follows statistics over rows
# the reader cannot read).
PARENT_OF_P = (
    "CROSS JOIN LATERAL (SELECT t.* FROM entities t"
    " WHERE t.org_id = p.org_id AND t.id = p.parent_id LIMIT 1) t"
)

# The audiences the bound reader reads: its readable projects, and '*' unless its key is
# restricted to projects (the read rule, app/repo/readrule.py).
READER_AUDIENCES = f"""CASE WHEN :r_restricted THEN CAST(:r_projects AS text[])
         ELSE array_append(CAST(:r_projects AS text[]), '{ORG_AUDIENCE}') END"""


def term_frequencies(documents: str = "documents", prefix: str = "") -> str:
    """SQL: two CTEs, ``<prefix>lexeme_tf`` and ``<prefix>word_tf``, over the CTE ``documents``
    (columns id, tsv; ids unique) and the CTE ``words`` (ord, idf, lexemes). ``lexeme_tf``: per
    document and query lexeme, its occurrences, in one pass over each vector (setweight marks
    the query's lexemes D, which no stored vector uses, and ts_filter keeps them, so a vector is
    never unnested whole; materialized, so no plan repeats the pass per word). ``word_tf``: per
    document and word, the frequency of the word's scarcest lexeme (all of its lexemes must be
    there), by an equality join on each word's lexemes. ``documents`` and ``prefix`` are fixed
    identifiers of the calling statement, never input."""
    return f"""{prefix}lexeme_tf AS MATERIALIZED (  -- per document and query lexeme: occurrences
    SELECT c.id, u.lexeme, cardinality(u.positions) AS tf
    FROM {documents} c
    CROSS JOIN (SELECT array_agg(l) AS lexemes FROM words, unnest(words.lexemes) l) q
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'D', q.lexemes), '{{d}}')) u
),
{prefix}word_tf AS (  -- a word matches with the frequency of its scarcest lexeme (all there)
    SELECT l.id, w.ord, w.idf, min(l.tf) AS tf
    FROM {prefix}lexeme_tf l
    JOIN (SELECT w.ord, w.idf, cardinality(w.lexemes) AS n, x AS lexeme
          FROM words w, unnest(w.lexemes) x) w ON w.lexeme = l.lexeme
    GROUP BY l.id, w.ord, w.idf, w.n
    HAVING count(*) = w.n
),
"""


TERM_FREQUENCIES = term_frequencies()
"""The pool's or the spans' ``lexeme_tf`` / ``word_tf`` over their CTE ``documents``."""


def saturation(tf: str, length: str) -> str:
    """BM25's term-frequency part, ``tf·(k1 + 1) / (tf + k1·(1 − b + b·length / avg_length))``,
    over the SQL expressions ``tf`` and ``length`` (bound ``:k1``, ``:b``, ``:avg_length``)."""
    return f"""({tf}) * (CAST(:k1 AS float8) + 1)
               / (({tf}) + CAST(:k1 AS float8) * (1 - CAST(:b AS float8)
                  + CAST(:b AS float8) * ({length}) / CAST(:avg_length AS float8)))"""


# One matched word's share of a document's BM25 (the summand): idf × saturation.
BM25_WORD = f"x.idf * {saturation('x.tf', 'length(c.tsv)')}"
# BM25 of a document `c` over its matched words `x`, summed in word order (`ORDER BY x.ord`):
# float addition is not associative, and two documents with the same words and frequencies must
# score exactly alike whatever order the plan feeds the aggregate.
BM25 = f"sum({BM25_WORD} ORDER BY x.ord)"
