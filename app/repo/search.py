"""The statements of ``search`` and ``context`` (contract §8): candidates of two lanes, then hits.

``sibyl:search.candidates`` returns every candidate of both lanes with its rank in each, as the
bound reader may see them; the domain (:mod:`app.domain.search`) fuses the ranks (reciprocal
rank fusion), folds a memory's hits together and pages. ``sibyl:search.hits`` then reads the rows
of one page. Both embed the read rule on the ``entities`` row (a passage: its parent's), and every
filter (read rule, lifecycle, types, project, current revision of a span) sits in the arm that
finds a row, **before** any cap, rank or page: a row the reader may not read neither takes a
slot nor moves another row's rank, so hidden rows cannot leave gaps or be counted.

The lanes, each capped at ``:cap`` readable candidates (``:cap + 1`` are read to tell that the
cap was hit):

- **full text**: memories whose ``search_tsv`` (name A, body B) and passages whose
  ``search_tsv`` (breadcrumb A, text B) match ``websearch_to_tsquery('english', :words)``
  (``search`` sends its query as is; ``context`` its goal's words joined by ``or``). Per
  table, the scan stops after ``:scan_cap`` readable matches (so a query matching half the corpus
  reads a bounded number of rows), and of those the cap keeps the most recently updated (ties by
  id), a cheap order that reads no vector; only those are ranked, by
  ``ts_rank_cd(search_tsv, query, 1)``: cover density over the document itself, divided by
  1 + log(document length). No corpus statistic enters it, so no other row (readable or not) can
  change a row's text rank. While a table has at most ``:scan_cap`` readable matches (every query
  of the PEP corpus), the candidates are fully deterministic; past it, which matches the scan
  meets first depends on the physical order of the table.
- **exact**: a memory or passage whose id is the query (as sent, or lower-cased), then memories
  whose lower-cased name starts with the lower-cased query, read from ``ix_entities_name_prefix``
  in index order (so the scan stops at the cap). Ranked: id hits first, then names bytewise.
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

_TSQUERY = "websearch_to_tsquery('english', CAST(:words AS text))"
_LOWER_QUERY = 'lower(CAST(:query AS text)) COLLATE "C"'

CANDIDATES_SQL = text(
    f"""/* sibyl:search.candidates */
WITH memory_matches AS (  -- full text, memories: of the first :scan_cap readable matches met,
    SELECT s.*        -- the :cap + 1 most recently updated (no vector is read to choose them)
    FROM (
        SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, t.updated_at,
               t.search_tsv AS tsv
        FROM entities t
        WHERE t.org_id = :r_org AND t.search_tsv @@ {_TSQUERY}
          AND {_MEMORY_FILTER}
        LIMIT :scan_cap
    ) s
    ORDER BY s.updated_at DESC, s.id
    LIMIT :cap + 1
),
passage_matches AS (  -- full text, passages (through their parent): the same
    SELECT s.*
    FROM (
        SELECT p.id, p.parent_id, t.type, t.updated_at, p.search_tsv AS tsv
        FROM passages p
        JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
        WHERE p.org_id = :r_org AND p.search_tsv @@ {_TSQUERY}
          AND {_PASSAGE_FILTER}
        LIMIT :scan_cap
    ) s
    ORDER BY s.updated_at DESC, s.id
    LIMIT :cap + 1
),
matches AS (
    SELECT m.*, row_number() OVER (ORDER BY m.updated_at DESC, m.id) AS ord,
           count(*) OVER () AS n
    FROM memory_matches m
  UNION ALL
    SELECT m.*, row_number() OVER (ORDER BY m.updated_at DESC, m.id), count(*) OVER ()
    FROM passage_matches m
),
fulltext AS (  -- only the capped candidates are ranked
    SELECT r.id, r.parent_id, r.type, r.text_rank,
           row_number() OVER (ORDER BY r.text_rank DESC, r.id) AS lane_rank
    FROM (
        SELECT m.id, m.parent_id, m.type, ts_rank_cd(m.tsv, {_TSQUERY}, 1) AS text_rank
        FROM matches m
        WHERE m.ord <= :cap
    ) r
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
exact_names AS (  -- memories whose lower-cased name starts with the query, in index order
    SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, 1 AS tier,
           t.name_lower AS sort_key
    FROM entities t
    WHERE t.org_id = :r_org
      -- the range the index scans (U+10FFFF sorts after every character); starts_with decides
      AND t.name_lower >= {_LOWER_QUERY}
      AND t.name_lower <= ({_LOWER_QUERY} || chr(1114111)) COLLATE "C"
      AND starts_with(t.name_lower, {_LOWER_QUERY})
      AND {_MEMORY_FILTER}
    ORDER BY t.name_lower, t.id
    LIMIT :cap + 1
),
exact AS (
    SELECT e.id, e.parent_id, e.type,
           row_number() OVER (ORDER BY e.tier, e.sort_key, e.id) AS lane_rank
    FROM (
        SELECT DISTINCT ON (x.id) x.*
        FROM (SELECT * FROM exact_ids UNION ALL SELECT * FROM exact_names) x
        ORDER BY x.id, x.tier
    ) e
),
flags AS (
    SELECT coalesce((SELECT max(n) > :cap FROM matches), false)
        OR (SELECT count(*) > :cap FROM exact_names) AS capped
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
       p.parent_id, p.passage_index, p.breadcrumb,
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


def candidate_params(
    reader_params: dict[str, object],
    *,
    query: str,
    words: str,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    cap: int,
    scan_cap: int,
) -> dict[str, object]:
    """Every bound parameter of :data:`CANDIDATES_SQL`: ``query`` is what the exact lane matches
    (ids, name prefixes), ``words`` the web-search text of the full-text lane."""
    return {
        **reader_params,
        "query": query,
        "words": words,
        "types": types,
        "lifecycles": lifecycles,
        "project": project,
        "cap": cap,
        "scan_cap": scan_cap,
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
        )
        for r in rows
    }
