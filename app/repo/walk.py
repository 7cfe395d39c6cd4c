"""The walk of ``expand_neighbors``: seed resolution and one recursive CTE (contract §5).

Read ``docs/walk-plans.md`` for a guided tour. In short, each row of the recursive CTE ``walk`` is
one BFS *level*, its nodes held as parallel arrays (ids, relationships, directions, weights,
predecessors), plus ``visited``: every node at distance ≤ that level. Keeping one row per level
keeps the work table small (a row per node carrying the visited set grows quadratically), and
lets each level anti-join its candidates against ``visited`` once, with a hash: a true
breadth-first distance, not a per-path one. A level is built in three nested steps:

1. ``h``: for each frontier node ``f``, one ``LATERAL`` union of hop arms (outgoing and incoming
   edges, outgoing and incoming mentions, a seed's community co-members (first hop only),
   passage → parent, parent → passages). Each arm joins the entered node's ``entities`` row (a
   passage: its parent's) and applies the read rule, the lifecycle rule and the project
   confinement **before** its per-node cap (``LIMIT :hop_cap + 1``), so an unreadable memory is
   neither a result nor a route, and hidden rows never eat the budget.
2. ``best``: per unvisited entered node, its best hop (highest weight, then relationship name,
   outgoing before incoming, then predecessor id); a row past a cap only raises ``capped``.
3. ``kept``: at most ``:level_cap`` nodes (by weight, then id) become the next level.

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

# SQL fragments of the hop arms (also used by the benchmark's baseline walk, so both walks apply
# exactly the same rules). The conditions every entered node satisfies: readable, not retired,
# inside `project` if named.
ENTER = f"""t.lifecycle <> 'retired'
          AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
          AND {readable("t")}"""

WEIGHT = (
    "coalesce((CAST(:pol_weights AS float8[]))[array_position(CAST(:pol_rels AS text[]), {rel})],"
    " CAST(:default_weight AS float8))"
)


def allowed(rel: str, denied: str) -> str:
    """SQL: a hop over ``rel`` passes the relationship filter and is not in the ``denied`` list."""
    return (
        f"(CAST(:rel_filter AS text[]) IS NULL OR {rel} = ANY(CAST(:rel_filter AS text[])))\n"
        f"          AND NOT ({rel} = ANY(CAST(:{denied} AS text[])))"
    )


PASSAGE_REL = "(CASE WHEN t.passage_kind = 'evidence' THEN 'DERIVED_FROM' ELSE 'PART_OF' END)"

WALK_SQL = text(
    rf"""/* sibyl:expand_neighbors */
WITH RECURSIVE walk(distance, ids, relationships, dir_ranks, weights, preds, visited, capped) AS (
    -- level 0: the resolved seeds; every level is ONE row holding its nodes as parallel arrays
    SELECT 0, CAST(:seed_ids AS text[]) COLLATE "C", CAST('{{}}' AS text[]) COLLATE "C",
           CAST('{{}}' AS int[]), CAST('{{}}' AS float8[]), CAST('{{}}' AS text[]) COLLATE "C",
           CAST(:seed_ids AS text[]) COLLATE "C", false
  UNION ALL
    SELECT lvl.distance + 1, nxt.ids, nxt.relationships, nxt.dir_ranks, nxt.weights, nxt.preds,
           lvl.visited || nxt.ids, nxt.capped
    FROM walk lvl
    CROSS JOIN LATERAL (
      -- the next level: kept nodes sorted by id, and whether any bound was hit on the way
      SELECT array_agg(kept.id ORDER BY kept.id) FILTER (WHERE kept.kept) AS ids,
             array_agg(kept.relationship ORDER BY kept.id) FILTER (WHERE kept.kept)
               AS relationships,
             array_agg(kept.dir_rank ORDER BY kept.id) FILTER (WHERE kept.kept) AS dir_ranks,
             array_agg(kept.weight ORDER BY kept.id) FILTER (WHERE kept.kept) AS weights,
             array_agg(kept.pred ORDER BY kept.id) FILTER (WHERE kept.kept) AS preds,
             coalesce(bool_or(kept.hop_capped OR kept.level_size > :level_cap), false)
               AS capped
      FROM (
        -- step 3: at most :level_cap nodes a level, by weight then id
        SELECT best.*,
               best.in_cap AND row_number() OVER (
                 ORDER BY NOT best.in_cap, best.weight DESC, best.id) <= :level_cap AS kept,
               count(*) FILTER (WHERE best.in_cap) OVER () AS level_size
        FROM (
          -- step 2: each unvisited node's best hop from the previous level: highest weight,
          -- then relationship name, outgoing before incoming, then predecessor id
          SELECT DISTINCT ON (h.id)
                 h.id, h.relationship, h.dir_rank, h.weight, h.pred,
                 h.ord <= :hop_cap AS in_cap,
                 bool_or(h.ord > :hop_cap) OVER () AS hop_capped
          FROM (
          SELECT f.id AS pred, arm.*
          FROM unnest(lvl.ids) AS f(id)
          -- step 1: every allowed hop from each frontier node f into a node t that is readable,
          -- not retired and inside `project`; at most :hop_cap + 1 rows per node and arm (the
          -- extra row only tells that the cap was hit)
          CROSS JOIN LATERAL (
            (  -- outgoing edges: f -rel-> t
              SELECT e.dst_id AS id, e.relationship, 0 AS dir_rank,
                     {WEIGHT.format(rel="e.relationship")} AS weight,
                     row_number() OVER (ORDER BY e.relationship, e.dst_id) AS ord
              FROM edges e
              JOIN entities t ON t.org_id = e.org_id AND t.id = e.dst_id
              WHERE e.org_id = :r_org AND e.src_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("e.relationship", "out_denied")}
                AND {ENTER}
              ORDER BY e.relationship, e.dst_id
              LIMIT :hop_cap + 1
            ) UNION ALL (  -- incoming edges: t -rel-> f
              SELECT e.src_id, e.relationship, 1,
                     {WEIGHT.format(rel="e.relationship")},
                     row_number() OVER (ORDER BY e.relationship, e.src_id)
              FROM edges e
              JOIN entities t ON t.org_id = e.org_id AND t.id = e.src_id
              WHERE CAST(:include_incoming AS boolean)
                AND e.org_id = :r_org AND e.dst_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("e.relationship", "in_denied")}
                AND {ENTER}
              ORDER BY e.relationship, e.src_id
              LIMIT :hop_cap + 1
            ) UNION ALL (  -- outgoing mentions: f mentions t
              SELECT m.dst_id, 'MENTIONS', 0,
                     {WEIGHT.format(rel="'MENTIONS'")},
                     row_number() OVER (ORDER BY m.dst_id)
              FROM mentions m
              JOIN entities t ON t.org_id = m.org_id AND t.id = m.dst_id
              WHERE m.org_id = :r_org AND m.src_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'MENTIONS'", "out_denied")}
                AND {ENTER}
              ORDER BY m.dst_id
              LIMIT :hop_cap + 1
            ) UNION ALL (  -- incoming mentions: t mentions f
              SELECT m.src_id, 'MENTIONS', 1,
                     {WEIGHT.format(rel="'MENTIONS'")},
                     row_number() OVER (ORDER BY m.src_id)
              FROM mentions m
              JOIN entities t ON t.org_id = m.org_id AND t.id = m.src_id
              WHERE CAST(:include_incoming AS boolean)
                AND m.org_id = :r_org AND m.dst_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'MENTIONS'", "in_denied")}
                AND {ENTER}
              ORDER BY m.src_id
              LIMIT :hop_cap + 1
            ) UNION ALL (  -- synthetic, first hop only: other members of a seed's communities
              SELECT c2.entity_id, 'SHARES_COMMUNITY', 0,
                     {WEIGHT.format(rel="'SHARES_COMMUNITY'")},
                     row_number() OVER (ORDER BY c2.entity_id, c2.community_id)
              FROM community_members c1
              JOIN community_members c2
                ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
              JOIN entities t ON t.org_id = c2.org_id AND t.id = c2.entity_id
              WHERE lvl.distance = 0
                AND c1.org_id = :r_org AND c1.entity_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'SHARES_COMMUNITY'", "out_denied")}
                AND {ENTER}
              ORDER BY c2.entity_id, c2.community_id
              LIMIT :hop_cap + 1
            ) UNION ALL (  -- passage to its parent: f -PART_OF|DERIVED_FROM-> t
              SELECT t.id, {PASSAGE_REL}, 0,
                     {WEIGHT.format(rel=PASSAGE_REL)},
                     CAST(1 AS bigint)
              FROM passages p
              JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
              WHERE f.id LIKE 'passage\_%'  -- only passages have a parent
                AND p.org_id = :r_org AND p.id = f.id
                AND {allowed(PASSAGE_REL, "out_denied")}
                AND {ENTER}
            ) UNION ALL (  -- a memory to its passages: p -PART_OF|DERIVED_FROM-> f
              SELECT p.id, {PASSAGE_REL}, 1,
                     {WEIGHT.format(rel=PASSAGE_REL)},
                     row_number() OVER (ORDER BY p.passage_index)
              FROM passages p
              JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
              WHERE CAST(:include_incoming AS boolean)
                -- only when relationship_types names PART_OF or DERIVED_FROM (§5, revised)
                AND CAST(:rel_filter AS text[]) IS NOT NULL
                AND p.org_id = :r_org AND p.parent_id = f.id
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed(PASSAGE_REL, "in_denied")}
                AND {ENTER}
              ORDER BY p.passage_index
              LIMIT :hop_cap + 1
            )
          ) arm
          OFFSET 0  -- a fence: the anti-join below runs once per level, not once per node
          ) h
          LEFT JOIN unnest(lvl.visited) AS v(id) ON v.id = h.id
          WHERE v.id IS NULL  -- never re-enter a node of an earlier level (true BFS distance)
          ORDER BY h.id, h.ord > :hop_cap, h.weight DESC, h.relationship, h.dir_rank, h.pred
        ) best
      ) kept
    ) nxt
    WHERE lvl.distance < :depth AND (nxt.ids IS NOT NULL OR nxt.capped)
),
flags AS (
    SELECT coalesce(bool_or(capped), false) AS capped FROM walk
),
nodes AS (
    SELECT lvl.distance, n.id, n.relationship, n.dir_rank, n.weight, n.pred
    FROM walk lvl
    CROSS JOIN LATERAL unnest(lvl.ids, lvl.relationships, lvl.dir_ranks, lvl.weights, lvl.preds)
      AS n(id, relationship, dir_rank, weight, pred)
    WHERE lvl.distance >= 1
),
top AS (
    -- rank on what the index holds (type, probed per node), so only the returned rows' bodies
    -- are read
    SELECT x.*
    FROM (
        SELECT w.id, w.distance, w.relationship, w.dir_rank, w.pred,
               least(greatest(w.weight * power(CAST(:decay AS float8), w.distance - 1),
                              CAST(:score_min AS float8)), CAST(:score_max AS float8)) AS score,
               coalesce((SELECT te.type FROM entities te
                         WHERE te.org_id = :r_org AND te.id = w.id), 'passage') AS type
        FROM nodes w
    ) x
    WHERE (CAST(:types AS text[]) IS NULL OR x.type = ANY(CAST(:types AS text[])))
    ORDER BY x.score DESC, x.distance, x.id
    LIMIT :limit + 1
)
SELECT f.capped, r.*
FROM flags f
LEFT JOIN LATERAL (
    SELECT w.id, w.distance, w.relationship, w.dir_rank, w.score, w.type,
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
    FROM top w
    LEFT JOIN entities te ON te.org_id = :r_org AND te.id = w.id
    LEFT JOIN passages pp ON pp.org_id = :r_org AND pp.id = w.id
    LEFT JOIN entities pe ON pe.org_id = :r_org AND pe.id = pp.parent_id
    ORDER BY w.score DESC, w.distance, w.id
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
