"""``sibyl:search.exact``: the exact lane (rule: search-lanes): the memory or passage whose id is
the query, then memories whose name, or whose title after a conventional prefix (``PEP 8: ``,
``KEP-753: ``), equals the query, starts with it at a word boundary, or merely starts with it
(case-insensitive), in that order (tiers 0-3), then by name and id. The name and title indexes
are read in order and each scan stops after ``:cap + 1`` rows (more: the lane was cut)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.search.common import MEMORY_FILTER, PASSAGE_FILTER

_LOWER_QUERY = 'lower(CAST(:query AS text)) COLLATE "C"'

EXACT_SQL = text(
    f"""/* sibyl:search.exact */
WITH exact_ids AS (  -- a memory or a passage whose id is the query (as sent, or lower-cased)
    SELECT t.id, CAST(NULL AS text) COLLATE "C" AS parent_id, t.type, 0 AS tier,
           CAST('' AS text) COLLATE "C" AS sort_key
    FROM entities t
    WHERE t.org_id = :r_org
      AND t.id = ANY(ARRAY[CAST(:query AS text), lower(CAST(:query AS text))])
      AND {MEMORY_FILTER}
  UNION ALL
    SELECT p.id, p.parent_id, t.type, 0, CAST('' AS text) COLLATE "C"
    FROM passages p
    JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
    WHERE p.org_id = :r_org
      AND p.id = ANY(ARRAY[CAST(:query AS text), lower(CAST(:query AS text))])
      AND {PASSAGE_FILTER}
),
exact_names AS (  -- memories whose lower-cased name, or title after a conventional prefix,
    SELECT x.*      -- starts with the query, each in index order up to the cap
    FROM (
        SELECT t.id, t.type, t.name_lower AS sort_key, t.name_lower AS matched, 'name' AS arm
        FROM entities t
        WHERE t.org_id = :r_org
          -- the range the index scans (U+10FFFF sorts after every character)
          AND t.name_lower >= {_LOWER_QUERY}
          AND t.name_lower <= ({_LOWER_QUERY} || chr(1114111)) COLLATE "C"
          AND starts_with(t.name_lower, {_LOWER_QUERY})
          AND {MEMORY_FILTER}
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
          AND {MEMORY_FILTER}
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
    SELECT count(*) FILTER (WHERE arm = 'name') > :cap
        OR count(*) FILTER (WHERE arm = 'title') > :cap AS capped
    FROM exact_names
)
SELECT e.id, e.parent_id, e.type, e.lane_rank, flags.capped
FROM flags
LEFT JOIN exact e ON e.lane_rank <= :cap
ORDER BY e.lane_rank"""
)


@dataclass(frozen=True)
class ExactHit:
    """One candidate of the exact lane and its rank (1 = best)."""

    id: str
    parent_id: str | None
    type: str
    lane_rank: int


async def exact(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    query: str,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    cap: int,
) -> tuple[list[ExactHit], bool]:
    """Run :data:`EXACT_SQL`: the lane's candidates, best first, and whether a scan was cut."""
    rows = (
        await conn.execute(
            EXACT_SQL,
            {
                **reader_params,
                "query": query,
                "types": types,
                "lifecycles": lifecycles,
                "project": project,
                "cap": cap,
            },
        )
    ).all()
    capped = bool(rows[0].capped) if rows else False
    return [
        ExactHit(r.id, r.parent_id, r.type, int(r.lane_rank)) for r in rows if r.id is not None
    ], capped
