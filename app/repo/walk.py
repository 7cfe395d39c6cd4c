"""The walk of ``expand_neighbors``: seed resolution and one recursive CTE (contract §5).

Read ``docs/walk-plans.md`` for a guided tour. In short, each row of the recursive CTE ``walk`` is
one node of one BFS level; every row of a level carries the same ``visited`` array (all nodes at
distance ≤ that level), so the next level can skip every node seen before: a true breadth-first
distance, not a per-path one. A level is built in three nested steps:

1. ``hops``: for each node of the previous level, one ``LATERAL`` union of hop arms (outgoing and
   incoming edges, outgoing and incoming mentions, a seed's community co-members (first hop
   only), passage → parent, parent → passages). Each arm
   joins the entered node's ``entities`` row (a passage: its parent's) and applies the read rule,
   the lifecycle rule and the project confinement **before** its per-node cap (``LIMIT``), so an
   unreadable memory is neither a result nor a route, and hidden rows never eat the budget.
2. ``best``: per entered node, its best hop (highest weight, then relationship name, outgoing
   before incoming, then predecessor id); rows past a cap only raise the ``capped`` flag.
3. the level: at most ``:level_cap`` nodes (by weight, then id), and the visited set grows by them.

The final SELECT scores each node, filters ``types`` (the answer, never the route), orders by
score desc, distance, id and returns ``:limit + 1`` rows, so the caller can tell ``truncated``.
For a node reached by the synthetic ``SHARES_COMMUNITY`` hop it also names the community: the
smallest community id the node shares with its chosen predecessor (a seed). That is the
community of the arm's first row for the node, since the arm orders by entity id, then
community id; computing it in the final SELECT keeps the CTE's columns unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

SEEDS_SQL = text(
    f"""/* sibyl:expand_neighbors.seeds */
SELECT s.id
FROM unnest(CAST(:seed_ids AS text[])) WITH ORDINALITY AS s(id, ord)
LEFT JOIN passages p ON p.org_id = :r_org AND p.id = s.id
JOIN entities t ON t.org_id = :r_org AND t.id = coalesce(p.parent_id, s.id)
WHERE {readable("t")}
  AND t.lifecycle <> 'retired'
  AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
ORDER BY s.ord"""
)

# The conditions every entered node satisfies: readable, not retired, inside `project` if named.
_ENTER = f"""t.lifecycle <> 'retired'
          AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
          AND {readable("t")}"""

_WEIGHT = (
    "coalesce((CAST(:pol_weights AS float8[]))[array_position(CAST(:pol_rels AS text[]), {rel})],"
    " CAST(:default_weight AS float8))"
)


def _allowed(rel: str, denied: str) -> str:
    return (
        f"(CAST(:rel_filter AS text[]) IS NULL OR {rel} = ANY(CAST(:rel_filter AS text[])))\n"
        f"          AND NOT ({rel} = ANY(CAST(:{denied} AS text[])))"
    )


_PASSAGE_REL = "(CASE WHEN t.passage_kind = 'evidence' THEN 'DERIVED_FROM' ELSE 'PART_OF' END)"

WALK_SQL = text(
    f"""/* sibyl:expand_neighbors */
WITH RECURSIVE walk(id, distance, relationship, dir_rank, weight, pred, visited, capped) AS (
    SELECT s.id COLLATE "C", 0, CAST(NULL AS text) COLLATE "C", 0, CAST(1.0 AS float8),
           CAST(NULL AS text) COLLATE "C",
           CAST(:seed_ids AS text[]) COLLATE "C", false
    FROM unnest(CAST(:seed_ids AS text[])) AS s(id)
  UNION ALL
    SELECT lvl.id, lvl.distance, lvl.relationship, lvl.dir_rank, lvl.weight, lvl.pred,
           lvl.prev_visited || array_agg(lvl.id) OVER (),
           lvl.capped OR lvl.level_size > :level_cap
    FROM (
      SELECT best.*,
             count(*) OVER () AS level_size,
             row_number() OVER (ORDER BY best.weight DESC, best.id) AS level_ord
      FROM (
        SELECT h.id, w.distance + 1 AS distance, h.relationship, h.dir_rank, h.weight,
               w.id AS pred, w.visited AS prev_visited, h.ord,
               w.capped OR bool_or(h.ord > :hop_cap) OVER () AS capped,
               row_number() OVER (
                 PARTITION BY h.id
                 ORDER BY h.ord > :hop_cap, h.weight DESC, h.relationship, h.dir_rank, w.id
               ) AS hop_rank
        FROM walk w
        CROSS JOIN LATERAL (
          (  -- outgoing edges: w -rel-> t
            SELECT e.dst_id AS id, e.relationship, 0 AS dir_rank,
                   {_WEIGHT.format(rel="e.relationship")} AS weight,
                   row_number() OVER (ORDER BY e.relationship, e.dst_id) AS ord
            FROM edges e
            JOIN entities t ON t.org_id = e.org_id AND t.id = e.dst_id
            WHERE e.org_id = :r_org AND e.src_id = w.id
              AND e.dst_id <> ALL (w.visited)
              AND {_allowed("e.relationship", "out_denied")}
              AND {_ENTER}
            ORDER BY e.relationship, e.dst_id
            LIMIT :hop_cap + 1
          ) UNION ALL (  -- incoming edges: t -rel-> w
            SELECT e.src_id, e.relationship, 1,
                   {_WEIGHT.format(rel="e.relationship")},
                   row_number() OVER (ORDER BY e.relationship, e.src_id)
            FROM edges e
            JOIN entities t ON t.org_id = e.org_id AND t.id = e.src_id
            WHERE CAST(:include_incoming AS boolean)
              AND e.org_id = :r_org AND e.dst_id = w.id
              AND e.src_id <> ALL (w.visited)
              AND {_allowed("e.relationship", "in_denied")}
              AND {_ENTER}
            ORDER BY e.relationship, e.src_id
            LIMIT :hop_cap + 1
          ) UNION ALL (  -- outgoing mentions: w mentions t
            SELECT m.dst_id, 'MENTIONS', 0,
                   {_WEIGHT.format(rel="'MENTIONS'")},
                   row_number() OVER (ORDER BY m.dst_id)
            FROM mentions m
            JOIN entities t ON t.org_id = m.org_id AND t.id = m.dst_id
            WHERE m.org_id = :r_org AND m.src_id = w.id
              AND m.dst_id <> ALL (w.visited)
              AND {_allowed("'MENTIONS'", "out_denied")}
              AND {_ENTER}
            ORDER BY m.dst_id
            LIMIT :hop_cap + 1
          ) UNION ALL (  -- incoming mentions: t mentions w
            SELECT m.src_id, 'MENTIONS', 1,
                   {_WEIGHT.format(rel="'MENTIONS'")},
                   row_number() OVER (ORDER BY m.src_id)
            FROM mentions m
            JOIN entities t ON t.org_id = m.org_id AND t.id = m.src_id
            WHERE CAST(:include_incoming AS boolean)
              AND m.org_id = :r_org AND m.dst_id = w.id
              AND m.src_id <> ALL (w.visited)
              AND {_allowed("'MENTIONS'", "in_denied")}
              AND {_ENTER}
            ORDER BY m.src_id
            LIMIT :hop_cap + 1
          ) UNION ALL (  -- synthetic, first hop only: other members of a seed's communities
            SELECT c2.entity_id, 'SHARES_COMMUNITY', 0,
                   {_WEIGHT.format(rel="'SHARES_COMMUNITY'")},
                   row_number() OVER (ORDER BY c2.entity_id, c2.community_id)
            FROM community_members c1
            JOIN community_members c2
              ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
            JOIN entities t ON t.org_id = c2.org_id AND t.id = c2.entity_id
            WHERE w.distance = 0
              AND c1.org_id = :r_org AND c1.entity_id = w.id
              AND c2.entity_id <> ALL (w.visited)
              AND {_allowed("'SHARES_COMMUNITY'", "out_denied")}
              AND {_ENTER}
            ORDER BY c2.entity_id, c2.community_id
            LIMIT :hop_cap + 1
          ) UNION ALL (  -- passage to its parent: w -PART_OF|DERIVED_FROM-> t
            SELECT t.id, {_PASSAGE_REL}, 0,
                   {_WEIGHT.format(rel=_PASSAGE_REL)},
                   CAST(1 AS bigint)
            FROM passages p
            JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
            WHERE p.org_id = :r_org AND p.id = w.id
              AND t.id <> ALL (w.visited)
              AND {_allowed(_PASSAGE_REL, "out_denied")}
              AND {_ENTER}
          ) UNION ALL (  -- a memory to its passages: p -PART_OF|DERIVED_FROM-> w
            SELECT p.id, {_PASSAGE_REL}, 1,
                   {_WEIGHT.format(rel=_PASSAGE_REL)},
                   row_number() OVER (ORDER BY p.passage_index)
            FROM passages p
            JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
            WHERE CAST(:include_incoming AS boolean)
              AND p.org_id = :r_org AND p.parent_id = w.id
              AND p.id <> ALL (w.visited)
              AND {_allowed(_PASSAGE_REL, "in_denied")}
              AND {_ENTER}
            ORDER BY p.passage_index
            LIMIT :hop_cap + 1
          )
        ) h
        WHERE w.distance < :depth
      ) best
      WHERE best.hop_rank = 1 AND best.ord <= :hop_cap
    ) lvl
    WHERE lvl.level_ord <= :level_cap
),
flags AS (
    SELECT coalesce(bool_or(capped), false) AS capped FROM walk
)
SELECT f.capped, r.*
FROM flags f
LEFT JOIN LATERAL (
    SELECT w.id, w.distance, w.relationship, w.dir_rank,
           least(greatest(w.weight * power(CAST(:decay AS float8), w.distance - 1),
                          CAST(:score_min AS float8)), CAST(:score_max AS float8)) AS score,
           coalesce(te.type, 'passage') AS type,
           coalesce(te.name, pe.name) AS name,
           coalesce(te.project_id, pe.project_id) AS project_id,
           coalesce(te.lifecycle, pe.lifecycle) AS lifecycle,
           coalesce(te.metadata, CAST('{{}}' AS jsonb)) AS metadata,
           left(coalesce(te.content, pp.content), :preview_chars + 1) AS content_prefix,
           length(coalesce(te.content, pp.content)) AS content_length,
           pp.passage_index, pp.parent_id, pp.breadcrumb, pe.passage_total,
           CASE WHEN w.relationship = 'SHARES_COMMUNITY' AND w.distance = 1 THEN (
             -- the community behind a synthetic hop: the smallest one the node shares with
             -- its predecessor (a seed); both ends already passed the read rule
             SELECT min(c1.community_id)
             FROM community_members c1
             JOIN community_members c2
               ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
             WHERE c1.org_id = :r_org AND c1.entity_id = w.pred AND c2.entity_id = w.id
           ) END AS community_id
    FROM walk w
    LEFT JOIN entities te ON te.org_id = :r_org AND te.id = w.id
    LEFT JOIN passages pp ON pp.org_id = :r_org AND pp.id = w.id
    LEFT JOIN entities pe ON pe.org_id = :r_org AND pe.id = pp.parent_id
    WHERE w.distance >= 1
      AND (CAST(:types AS text[]) IS NULL
           OR coalesce(te.type, 'passage') = ANY(CAST(:types AS text[])))
    ORDER BY score DESC, w.distance, w.id
    LIMIT :limit + 1
) r ON true"""
)


@dataclass(frozen=True)
class WalkRow:
    """One neighbor row of the walk, before presentation (preview, names) by the domain."""

    id: str
    distance: int
    relationship: str
    outgoing: bool
    score: float
    type: str
    name: str
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    content_prefix: str
    content_length: int
    passage_index: int | None
    parent_id: str | None
    breadcrumb: str | None
    passage_total: int | None
    community_id: str | None = None  # for a SHARES_COMMUNITY hop: the community it went through


async def resolve_seeds(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    seeds: list[str],
    project: str | None,
) -> list[str]:
    """The ``seeds`` that exist, are readable, not retired and inside ``project``; request order."""
    rows = await conn.execute(SEEDS_SQL, {**reader_params, "seed_ids": seeds, "project": project})
    return [r.id for r in rows]


async def walk(conn: AsyncConnection, *, params: dict[str, object]) -> tuple[list[WalkRow], bool]:
    """Run the walk with all of its bound ``params``; return (up to limit+1 rows, capped flag)."""
    rows = (await conn.execute(WALK_SQL, params)).all()
    capped = bool(rows[0].capped) if rows else False
    out = [
        WalkRow(
            id=r.id,
            distance=r.distance,
            relationship=r.relationship,
            outgoing=r.dir_rank == 0,
            score=r.score,
            type=r.type,
            name=r.name,
            project_id=r.project_id,
            lifecycle=r.lifecycle,
            metadata=dict(r.metadata),
            content_prefix=r.content_prefix,
            content_length=r.content_length,
            passage_index=r.passage_index,
            parent_id=r.parent_id,
            breadcrumb=r.breadcrumb,
            passage_total=r.passage_total,
            community_id=r.community_id,
        )
        for r in rows
        if r.id is not None
    ]
    return out, capped
