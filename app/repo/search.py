"""The statements of ``search`` and ``context`` (contract §8): candidates of two lanes, then hits.

``sibyl:search.candidates`` returns every candidate of both lanes with its rank in each, as the
bound reader may see them; the domain (:mod:`app.domain.search`, whose docstring states the
ranking) fuses the ranks (reciprocal rank fusion), folds a memory's hits together and pages.
``sibyl:search.hits`` then reads the rows of one page; ``sibyl:search.focus`` scores every span
of the best memories (the re-ranking and ``metadata.focus``); ``sibyl:search.promote`` finds the
best result's (else the second's) strongest typed neighbour (listed after it);
``sibyl:search.unheld_words`` (fallback weights only) tells which unknown words no readable row
holds. All embed the read
rule on the ``entities`` row (a passage: its parent's), and every filter (read rule, lifecycle,
types, project, current revision of a span) sits in the arm that finds a row, **before** any
cap, rank or page: a row the reader may not read neither takes a slot nor moves another row's
rank.

The full-text lane, step by step (CTEs of the statement):

- ``words``: the query's words (bound arrays ``:words`` and their weights ``:idfs``, rarest
  first), each as a ``plainto_tsquery('english', word)`` and its lexemes; stop words drop out.
- ``memory_matches`` / ``passage_matches``: per word, its first ``term_cap + 1`` readable
  matches in ``head_tsv`` (a memory's name: every word; a passage's breadcrumb: the
  ``breadcrumb_words`` rarest), and for the ``body_words`` rarest its first ``term_cap + 1`` in
  ``search_tsv`` (GIN index scans, LATERAL per word, so each stops early), in the order of the
  table's own scan: a bitmap heap scan (the tsquery is a run-time value, so its estimate is the
  same whatever the table holds) meets rows in physical order, and a passage probes its parent
  row per passage (LATERAL, LIMIT 1). Until 2026-11-30 the passage arm was a plain join: with
  8,000 hidden notes and an ANALYZE the planner turned its hash join into a merge join on the
  parents' key, so a capped word kept other readable passages (a breaker trial: 22 of 72 answers
  changed). Ordering the capped scans by id would make the kept rows independent of any plan,
  but costs a sort of every match (the common word of the 200k benchmark: 136 ms, 108k buffers
  against 11 ms, 5k): not done; ``docs/search.md`` says what physical order still depends on.
- ``pool``: each candidate once, the ``:cap`` found by the heaviest words.
- ``documents`` / ``lexeme_tf`` / ``word_tf`` / ``scored``: the pool's vectors; per query lexeme
  its occurrences (``setweight`` marks the query's lexemes, ``ts_filter`` keeps only them, so a
  vector is never unnested whole), a word's frequency being that of its scarcest lexeme; BM25.
- ``fulltext``: the ``:cap`` best by score, then id.

Every weight and constant is a bound parameter (the weights: :mod:`app.domain.terms`, from the
reader's own audiences' counts or fixed English frequencies); no other statistic enters a score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

# What every candidate's memory row `t` satisfies (a passage's: its parent's).
_MEMORY_FILTER = f"""t.lifecycle = ANY(CAST(:lifecycles AS text[]))
      AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[])))
      AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
      AND {readable("t")}"""

_PASSAGE_FILTER = f"""p.parent_revision = t.revision
      AND t.lifecycle = ANY(CAST(:lifecycles AS text[]))
      AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[]))
           OR 'passage' = ANY(CAST(:types AS text[])))
      AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
      AND {readable("t")}"""

_LOWER_QUERY = 'lower(CAST(:query AS text)) COLLATE "C"'


def _fulltext_arm(name: str) -> str:
    """The candidates of one table, per query word (rarest first): its first ``term_cap + 1``
    readable matches in a name or breadcrumb (``head`` 1: ``head_tsv``, few rows, the strongest
    evidence), then its first ``term_cap + 1`` readable matches anywhere (``head`` 0). ``n``
    counts a word's matches of one kind (``> term_cap``: that scan hit its cap), ``k`` numbers
    them by id."""
    heads = ":breadcrumb_words"
    if name == "entities":
        source = "entities t"
        key = 't.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type'
        row, filters = "t", _MEMORY_FILTER
        heads = ":name_words"
    else:
        # each passage probes its parent (LATERAL, LIMIT 1: a nested loop driven by the
        # passages' own scan), never a hash or merge join whose choice, and so the order the
        # capped scan meets readable rows in, follows statistics over rows the reader cannot read
        source = (
            "passages p CROSS JOIN LATERAL (SELECT t.* FROM entities t"
            " WHERE t.org_id = p.org_id AND t.id = p.parent_id LIMIT 1) t"
        )
        key = "p.id, p.parent_id, t.type"
        row, filters = "p", _PASSAGE_FILTER
    return f"""SELECT w.ord, w.idf, m.*, count(*) OVER (PARTITION BY w.ord, m.head) AS n,
               row_number() OVER (PARTITION BY w.ord, m.head ORDER BY m.id) AS k
        FROM words w
        CROSS JOIN LATERAL (
            (SELECT {key}, 1 AS head
             FROM {source}
             WHERE w.rarity <= {heads}
               AND {row}.org_id = :r_org AND {row}.head_tsv @@ w.tsq AND {filters}
             LIMIT :term_cap + 1)
          UNION ALL
            (SELECT {key}, 0
             FROM {source}
             WHERE w.rarity <= :body_words
               AND {row}.org_id = :r_org AND {row}.search_tsv @@ w.tsq AND {filters}
             LIMIT :term_cap + 1)
        ) m"""


# The BM25 of sibyl:search.candidates and sibyl:search.focus, written once so the two cannot drift.
# Over the CTEs `words` (ord, idf, lexemes) and `documents` (id, tsv): per document and query
# lexeme its occurrences, a name/breadcrumb (A) one counting :field_boost (setweight marks the
# query's lexemes, A positions as C and B as D; ts_filter keeps them); a word then matches with
# the frequency of its scarcest lexeme (all of its lexemes must be there).
_TERM_FREQUENCIES = """lexeme_tf AS (  -- per document and query lexeme: its positions,
    -- name/breadcrumb (A) boosted; setweight marks the query's lexemes (A positions as C, B as D),
    -- ts_filter keeps them
    SELECT c.id, u.lexeme,
           cardinality(u.positions) + (CAST(:field_boost AS float8) - 1)
             * cardinality(array_positions(u.weights, 'C')) AS tf
    FROM documents c
    CROSS JOIN (SELECT array_agg(l) AS lexemes FROM words, unnest(words.lexemes) l) q
    CROSS JOIN LATERAL unnest(ts_filter(
        setweight(ts_filter(c.tsv, '{a}'), 'C', q.lexemes)
          || setweight(ts_filter(c.tsv, '{b}'), 'D', q.lexemes),
        '{c,d}')) u
),
word_tf AS (  -- a word matches with the frequency of its scarcest lexeme (all must be there)
    SELECT l.id, w.ord, w.idf, min(l.tf) AS tf
    FROM words w
    JOIN lexeme_tf l ON l.lexeme = ANY(w.lexemes)
    GROUP BY l.id, w.ord, w.idf, cardinality(w.lexemes)
    HAVING count(*) = cardinality(w.lexemes)
),
"""
# BM25 of a document `c` over its matched words `x`:
# Σ idf × tf (k1 + 1) / (tf + k1 (1 − b + b × length / avg_length)).
# Summed in word order (`ORDER BY x.ord`): float addition is not associative, and two documents
# with the same words and frequencies must score exactly alike whatever order the plan feeds the
# aggregate (ties are then broken by the stated rule, not by rounding noise).
_BM25_WORD = """x.idf * x.tf * (CAST(:k1 AS float8) + 1)
               / (x.tf + CAST(:k1 AS float8) * (1 - CAST(:b AS float8)
                  + CAST(:b AS float8) * length(c.tsv) / CAST(:avg_length AS float8)))"""
"""One matched word's share of a document's BM25 (the summand)."""
_BM25 = f"""sum({_BM25_WORD}
               ORDER BY x.ord)"""

CANDIDATES_SQL = text(
    f"""/* sibyl:search.candidates */
WITH words AS (  -- the query's words (rarest first, with their weights), each as its lexemes
    SELECT w.ord, w.idf, plainto_tsquery('english', w.word) AS tsq,
           tsvector_to_array(to_tsvector('english', w.word)) AS lexemes,
           row_number() OVER (ORDER BY w.ord) AS rarity
    FROM unnest(CAST(:words AS text[]), CAST(:idfs AS float8[]))
         WITH ORDINALITY AS w(word, idf, ord)
    WHERE numnode(plainto_tsquery('english', w.word)) > 0
),
memory_matches AS (  -- full text, memories: per word, its first readable matches (head, any)
    {_fulltext_arm("entities")}
),
passage_matches AS (  -- full text, passages (read rule on their parent): the same
    {_fulltext_arm("passages")}
),
pool AS (  -- every candidate once: the cap found by the heaviest words (Σ idf, a word found
    SELECT c.*  -- in a name or breadcrumb counting field_boost times), then by id
    FROM (
        SELECT f.id, min(f.parent_id) AS parent_id, min(f.type) AS type,
               sum(f.idf * CASE WHEN f.head = 1 THEN CAST(:field_boost AS float8) ELSE 1 END)
                 AS found_weight
        FROM (
            SELECT m.id, m.ord, min(m.parent_id) AS parent_id, min(m.type) AS type,
                   min(m.idf) AS idf, max(m.head) AS head
            FROM (SELECT * FROM memory_matches UNION ALL SELECT * FROM passage_matches) m
            WHERE m.k <= :term_cap
            GROUP BY m.id, m.ord
        ) f
        GROUP BY f.id
    ) c
    ORDER BY c.found_weight DESC, c.id
    LIMIT :cap
),
documents AS (  -- the pool's vectors
    SELECT c.id, c.parent_id, c.type, coalesce(p.search_tsv, t.search_tsv) AS tsv
    FROM pool c
    LEFT JOIN entities t ON c.parent_id IS NULL AND t.org_id = :r_org AND t.id = c.id
    LEFT JOIN passages p ON c.parent_id IS NOT NULL AND p.org_id = :r_org AND p.id = c.id
),
{_TERM_FREQUENCIES}scored AS (  -- BM25: Σ idf·tf·(k1 + 1) / (tf + k1·(1 − b + b·len / avg_len))
    SELECT c.id, c.parent_id, c.type,
           {_BM25} AS text_rank
    FROM documents c
    JOIN word_tf x ON x.id = c.id
    GROUP BY c.id, c.parent_id, c.type, length(c.tsv)
),
fulltext AS (  -- the cap best
    SELECT r.*
    FROM (
        SELECT s.id, s.parent_id, s.type, s.text_rank,
               row_number() OVER (ORDER BY s.text_rank DESC, s.id) AS lane_rank
        FROM scored s
    ) r
    WHERE r.lane_rank <= :cap
),
exact_ids AS (  -- a memory or a passage whose id is the query (as sent, or lower-cased)
    SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, 0 AS tier,
           CAST('' AS text) COLLATE "C" AS sort_key
    FROM entities t
    WHERE t.org_id = :r_org
      AND t.id = ANY(ARRAY[CAST(:query AS text), lower(CAST(:query AS text))])
      AND {_MEMORY_FILTER}
  UNION ALL
    SELECT p.id, p.parent_id, t.type, 0, CAST('' AS text) COLLATE "C"
    FROM passages p
    JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
    WHERE p.org_id = :r_org
      AND p.id = ANY(ARRAY[CAST(:query AS text), lower(CAST(:query AS text))])
      AND {_PASSAGE_FILTER}
),
exact_names AS (  -- memories whose lower-cased name, or title after a conventional prefix
    SELECT x.*      -- (PEP 8: ...), starts with the query, each in index order up to the cap
    FROM (
        SELECT t.id, t.type, t.name_lower AS sort_key, t.name_lower AS matched, 'name' AS arm
        FROM entities t
        WHERE t.org_id = :r_org
          -- the range the index scans (U+10FFFF sorts after every character)
          AND t.name_lower >= {_LOWER_QUERY}
          AND t.name_lower <= ({_LOWER_QUERY} || chr(1114111)) COLLATE "C"
          AND starts_with(t.name_lower, {_LOWER_QUERY})
          AND {_MEMORY_FILTER}
        ORDER BY t.name_lower, t.id
        LIMIT :cap + 1
    ) x
  UNION ALL
    SELECT y.*
    FROM (
        SELECT t.id, t.type, t.name_lower, t.title_lower, 'title'
        FROM entities t
        WHERE t.org_id = :r_org
          AND t.title_lower >= {_LOWER_QUERY}
          AND t.title_lower <= ({_LOWER_QUERY} || chr(1114111)) COLLATE "C"
          AND starts_with(t.title_lower, {_LOWER_QUERY})
          AND {_MEMORY_FILTER}
        ORDER BY t.title_lower, t.id
        LIMIT :cap + 1
    ) y
),
exact AS (  -- tiers: 0 id; 1 the whole name or title; 2 a whole-word prefix; 3 any prefix
    SELECT e.id, e.parent_id, e.type,
           row_number() OVER (ORDER BY e.tier, e.sort_key, e.id) AS lane_rank
    FROM (
        SELECT DISTINCT ON (x.id) x.*
        FROM (
            SELECT * FROM exact_ids
          UNION ALL
            SELECT n.id, CAST(NULL AS text) COLLATE "C", n.type,
                   CASE WHEN n.matched = {_LOWER_QUERY} THEN 1
                        WHEN substr(n.matched, length(CAST(:query AS text)) + 1, 1)
                             !~ '[[:alnum:]_]' THEN 2
                        ELSE 3 END,
                   n.sort_key
            FROM exact_names n
        ) x
        ORDER BY x.id, x.tier
    ) e
),
flags AS (
    SELECT (SELECT count(*) > :body_words FROM words)
        OR coalesce((SELECT max(n) > :term_cap FROM memory_matches), false)
        OR coalesce((SELECT max(n) > :term_cap FROM passage_matches), false)
        OR (SELECT count(*) > :cap FROM (SELECT DISTINCT id FROM memory_matches
                                         UNION SELECT id FROM passage_matches) a)
        OR (SELECT count(*) FILTER (WHERE arm = 'name') > :cap
                   OR count(*) FILTER (WHERE arm = 'title') > :cap FROM exact_names) AS capped
)
SELECT coalesce(f.id, e.id) AS id, coalesce(f.parent_id, e.parent_id) AS parent_id,
       coalesce(f.type, e.type) AS type, f.lane_rank AS fulltext_rank, f.text_rank,
       e.lane_rank AS exact_rank, flags.capped
FROM fulltext f
FULL JOIN (SELECT * FROM exact WHERE lane_rank <= :cap) e ON e.id = f.id
CROSS JOIN flags
ORDER BY 1"""
)

HITS_SQL = text(
    f"""/* sibyl:search.hits */
SELECT h.id, t.type AS memory_type, t.name, t.project_id, t.lifecycle, t.metadata,
       t.passage_kind, t.passage_total, t.passages_lossless,
       p.parent_id, p.passage_index, p.breadcrumb, p.start_offset,
       left(CASE WHEN p.id IS NULL THEN t.content ELSE p.content END, :preview_chars + 1)
           AS content_prefix,
       length(CASE WHEN p.id IS NULL THEN t.content ELSE p.content END) AS content_length
FROM unnest(CAST(:ids AS text[])) WITH ORDINALITY AS h(id, ord)
LEFT JOIN passages p ON p.org_id = :r_org AND p.id = h.id
JOIN entities t ON t.org_id = :r_org AND t.id = coalesce(p.parent_id, h.id)
WHERE {readable("t")}
  AND (p.id IS NULL OR p.parent_revision = t.revision)
ORDER BY h.ord"""
)


@dataclass(frozen=True)
class Candidate:
    """One readable candidate and its rank in each lane (None: not in that lane).

    ``type`` is the memory's type (a passage's parent's); ``parent_id`` is set for passages.
    """

    id: str
    parent_id: str | None
    type: str
    fulltext_rank: int | None
    text_rank: float | None
    exact_rank: int | None


@dataclass(frozen=True)
class Hit:
    """The row of one hit: the memory's fields (a passage's parent's) and the hit's own text.

    ``content_prefix`` holds at most ``preview_chars + 1`` characters of the memory's body, or
    the passage's text; ``content_length`` is the full length.
    """

    id: str
    memory_type: str
    name: str
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    passage_kind: str | None
    passage_total: int
    passages_lossless: bool
    parent_id: str | None
    passage_index: int | None
    breadcrumb: str | None
    content_prefix: str
    content_length: int
    start_offset: int | None = None
    """Where a passage's text begins in its parent's body (characters); None for a memory."""


# Which of the given words no row the bound reader reads holds (a memory's own document, or a
# current passage's; the read rule on the memory, as every search statement): used only with
# the fallback weights, for words the fixed English table does not know, so that a misspelt
# word is not the one the candidate scans look for. One GIN probe per word and table, stopping
# at the first readable match: each probe is a scalar subquery with LIMIT 1, which the planner
# cannot turn into a join (as NOT EXISTS, past ~55 words it chose an anti join that compared
# every word with every passage: 57 words took 2.7 s on the PEPs, 400 words 17 s).
UNHELD_WORDS_SQL = text(
    f"""/* sibyl:search.unheld_words */
SELECT w.word
FROM unnest(CAST(:words AS text[])) AS w(word)
WHERE numnode(plainto_tsquery('english', w.word)) > 0
  AND (SELECT 1 FROM entities t
       WHERE t.org_id = :r_org AND t.search_tsv @@ plainto_tsquery('english', w.word)
         AND {readable("t")}
       LIMIT 1) IS NULL
  AND (SELECT 1 FROM passages p
       CROSS JOIN LATERAL (SELECT t.* FROM entities t
                           WHERE t.org_id = p.org_id AND t.id = p.parent_id LIMIT 1) t
       WHERE p.org_id = :r_org AND p.search_tsv @@ plainto_tsquery('english', w.word)
         AND p.parent_revision = t.revision AND {readable("t")}
       LIMIT 1) IS NULL"""
)


async def unheld_words(
    conn: AsyncConnection, *, reader_params: dict[str, object], words: list[str]
) -> set[str]:
    """The ``words`` no row the bound reader may read holds (:data:`UNHELD_WORDS_SQL`)."""
    if not words:
        return set()
    rows = await conn.execute(UNHELD_WORDS_SQL, {**reader_params, "words": words})
    return {r.word for r in rows}


@dataclass(frozen=True)
class Scoring:
    """The constants of the BM25 score: ``k1`` term-frequency saturation, ``b`` length
    normalisation, ``avg_length`` the length (distinct lexemes) at which a document is neither
    favoured nor penalised (the mean over the documents the reader's statistics count, when it
    has them: :func:`app.domain.search.weigh`; else this fixed default), ``field_boost`` what
    one occurrence in a name or breadcrumb counts for, against 1 in a body."""

    k1: float = 1.2
    b: float = 0.75
    avg_length: float = 100.0
    field_boost: float = 3.0
    counted: bool = False
    """Whether the words were weighed from the reader's counts (else the fallback table):
    echoed as ``filters.word_weights``."""


@dataclass(frozen=True)
class Scan:
    """How many of a query's rarest words find candidates in memory names (``names``), passage
    breadcrumbs (``breadcrumbs``) and anywhere (``bodies``); every word scores."""

    names: int
    breadcrumbs: int
    bodies: int


def candidate_params(
    reader_params: dict[str, object],
    *,
    query: str,
    words: list[str],
    idfs: list[float],
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    cap: int,
    term_cap: int,
    scan: Scan,
    scoring: Scoring = Scoring(),
) -> dict[str, object]:
    """Every bound parameter of :data:`CANDIDATES_SQL`: ``query`` is what the exact lane matches
    (ids, name prefixes, titles); ``words`` the full-text lane's words, rarest first, with their
    weights ``idfs`` (same length); ``term_cap`` the readable matches kept per word and table,
    ``cap`` the candidates each lane ranks."""
    return {
        **reader_params,
        "query": query,
        "words": words,
        "idfs": idfs,
        "types": types,
        "lifecycles": lifecycles,
        "project": project,
        "cap": cap,
        "term_cap": term_cap,
        "name_words": scan.names,
        "breadcrumb_words": scan.breadcrumbs,
        "body_words": scan.bodies,
        "k1": scoring.k1,
        "b": scoring.b,
        "avg_length": scoring.avg_length,
        "field_boost": scoring.field_boost,
    }


async def candidates(
    conn: AsyncConnection, *, params: dict[str, object]
) -> tuple[list[Candidate], bool]:
    """Run the candidates statement; return (candidates by id, whether a lane hit its cap).

    At most ``cap`` candidates per full-text table and ``cap`` in the exact lane.
    """
    rows = (await conn.execute(CANDIDATES_SQL, params)).all()
    capped = any(bool(r.capped) for r in rows)
    return [
        Candidate(
            id=r.id,
            parent_id=r.parent_id,
            type=r.type,
            fulltext_rank=r.fulltext_rank,
            text_rank=r.text_rank,
            exact_rank=r.exact_rank,
        )
        for r in rows
    ], capped


async def hits(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    ids: list[str],
    preview_chars: int,
) -> dict[str, Hit]:
    """The readable rows of ``ids`` (memories or current passages), by id."""
    if not ids:
        return {}
    rows = await conn.execute(
        HITS_SQL, {**reader_params, "ids": ids, "preview_chars": preview_chars}
    )
    return {
        r.id: Hit(
            id=r.id,
            memory_type=r.memory_type,
            name=r.name,
            project_id=r.project_id,
            lifecycle=r.lifecycle,
            metadata=dict(r.metadata),
            passage_kind=r.passage_kind,
            passage_total=r.passage_total,
            passages_lossless=r.passages_lossless,
            parent_id=r.parent_id,
            passage_index=r.passage_index,
            breadcrumb=r.breadcrumb,
            content_prefix=r.content_prefix,
            content_length=r.content_length,
            start_offset=r.start_offset,
        )
        for r in rows
    }


FOCUS_SQL = text(
    f"""/* sibyl:search.focus */
WITH words AS (  -- the query's words and weights, as in sibyl:search.candidates
    SELECT w.ord, w.idf, tsvector_to_array(to_tsvector('english', w.word)) AS lexemes
    FROM unnest(CAST(:words AS text[]), CAST(:idfs AS float8[]))
         WITH ORDINALITY AS w(word, idf, ord)
    WHERE numnode(plainto_tsquery('english', w.word)) > 0
),
documents AS (  -- every current span of each readable memory (a memory never cut: itself)
    SELECT t.id AS memory_id, p.id, p.passage_index, p.search_tsv AS tsv
    FROM entities t
    JOIN passages p ON p.org_id = t.org_id AND p.parent_id = t.id
                   AND p.parent_revision = t.revision
    WHERE t.org_id = :r_org AND t.id = ANY(CAST(:memories AS text[])) AND {readable("t")}
  UNION ALL
    SELECT t.id, t.id, NULL, t.search_tsv
    FROM entities t
    WHERE t.org_id = :r_org AND t.id = ANY(CAST(:memories AS text[])) AND t.passage_total = 0
      AND {readable("t")}
),
{_TERM_FREQUENCIES}scored AS (  -- BM25, the formula and constants of the full-text lane
    SELECT c.memory_id, c.id, c.passage_index,
           {_BM25} AS text_rank,
           -- which query words the span holds (their order in :words, 1-based) and each one's
           -- share of text_rank: what the domain's coverage order of focus.next reads
           array_agg(x.ord ORDER BY x.ord) AS word_ords,
           array_agg({_BM25_WORD} ORDER BY x.ord) AS word_scores
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
SELECT b.memory_id, b.id, b.passage_index, b.text_rank, b.focus_rank, b.word_ords, b.word_scores,
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


async def focus(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    memories: list[str],
    words: list[str],
    idfs: list[float],
    per_memory: int = 3,
    scoring: Scoring = Scoring(),
) -> dict[str, Focus]:
    """For each readable memory of ``memories`` (ids) that matches any of ``words`` (weights
    ``idfs``): its ``per_memory`` (≥ 1) best spans by the full-text lane's BM25 (``scoring``: the
    lane's constants with the reader's length statistics), over **all** its current spans (not
    only those the candidate scans found), best first (ties: the earlier span). Keyed by memory
    id; a memory with no match is absent. Only the memory's own rows are scored: nothing another
    reader holds enters."""
    if not memories or not words:
        return {}
    rows = await conn.execute(
        FOCUS_SQL,
        {
            **reader_params,
            "memories": memories,
            "words": words,
            "idfs": idfs,
            "text_chars": FOCUS_TEXT_CHARS,
            "per_memory": max(1, per_memory),
            "k1": scoring.k1,
            "b": scoring.b,
            "avg_length": scoring.avg_length,
            "field_boost": scoring.field_boost,
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


# One arm per (relationship, direction, lifecycle), strongest first; each probes the edge index
# for its first neighbour (by id) that passes every filter, the read rule included, so the LIMIT
# counts only rows the reader may see and a hub costs one index range start per arm, not its
# degree (a lifecycle is an arm of its own, so "active before superseded" needs no sort).
_PROMOTE_ARM = """(
            SELECT t.id, t.type
            FROM edges e
            JOIN entities t ON t.org_id = e.org_id AND t.id = e.{far}
            WHERE a.outgoing = {outgoing} AND e.org_id = :r_org AND e.{near} = :memory
              AND e.relationship = a.relationship AND t.id <> :memory
              AND NOT t.id = ANY(CAST(:skip AS text[]))
              AND t.lifecycle = a.lifecycle
              AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[])))
              AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
              AND {readable}
            ORDER BY e.{far}
            LIMIT 1
        )"""

PROMOTE_SQL = text(
    f"""/* sibyl:search.promote */
SELECT n.id, n.type, a.relationship, a.outgoing
FROM unnest(CAST(:relationships AS text[]), CAST(:weights AS float8[]),
            CAST(:outgoing AS boolean[]), CAST(:lifecycles AS text[]))
     WITH ORDINALITY AS a(relationship, weight, outgoing, lifecycle, ord)
CROSS JOIN LATERAL (
    {_PROMOTE_ARM.format(far="dst_id", near="src_id", outgoing="true", readable=readable("t"))}
    UNION ALL
    {_PROMOTE_ARM.format(far="src_id", near="dst_id", outgoing="false", readable=readable("t"))}
) n
ORDER BY a.weight DESC, a.lifecycle = 'superseded', n.id, a.ord
LIMIT 1"""
)


@dataclass(frozen=True)
class Neighbor:
    """The neighbour :func:`promoted` found: its id and type, and the hop from the memory."""

    id: str
    type: str
    relationship: str
    outgoing: bool


async def promoted(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    memory: str,
    arms: list[tuple[str, float, bool]],
    lifecycles: list[str],
    types: list[str] | None,
    project: str | None,
    skip: list[str] | None = None,
) -> Neighbor | None:
    """The first one-hop neighbour of ``memory`` over ``arms`` (``(relationship, §4 weight,
    outgoing?)``, in order) by weight desc, then active before superseded, then id (ties: the
    earlier arm), among the memories the reader may read whose lifecycle (one of
    ``lifecycles``), type and project pass the filters and that are not in ``skip`` (rows
    listed above already); None when there is none."""
    every = [(*arm, life) for arm in arms for life in lifecycles]
    if not every:
        return None
    row = (
        await conn.execute(
            PROMOTE_SQL,
            {
                **reader_params,
                "memory": memory,
                "relationships": [a[0] for a in every],
                "weights": [a[1] for a in every],
                "outgoing": [a[2] for a in every],
                "lifecycles": [a[3] for a in every],
                "types": types,
                "project": project,
                "skip": skip or [],
            },
        )
    ).first()
    if row is None:
        return None
    return Neighbor(id=row.id, type=row.type, relationship=row.relationship, outgoing=row.outgoing)
