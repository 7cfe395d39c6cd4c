"""The walk of ``expand_neighbors``: seed resolution and one recursive CTE (rule:
walk-reference-semantics).

Read ``docs/walk-plans.md`` for a guided tour. In short, each row of the recursive CTE ``walk`` is
one BFS *level*, its nodes held as parallel arrays (ids, relationships, directions, weights,
predecessors), plus ``visited``: every node at distance ≤ that level, and the reader and the hop
cap (from the one-row CTE ``wr``), which every step reads. Keeping one row per level keeps the
work table small (a row per node carrying the visited set grows quadratically), and lets each
level anti-join its candidates against ``visited`` once, with a hash: a true breadth-first
distance, not a per-path one. A level is built in these steps (rule: bounded-walk):

1. ``h``: for each frontier node ``f``, its first ``:hub_degree + 1`` edges each way, read once
   into arrays (more than ``:hub_degree`` makes ``f`` a hub that way: counted before any rule),
   then one ``LATERAL`` union of hop arms (an ordinary node's edges both ways, a hub's edges one
   index range per tier, outgoing and incoming mentions, a seed's community co-members (first
   hop only), passage → parent, parent → passages when ``PART_OF``/``DERIVED_FROM`` is named),
   each in **weight order** (weight desc, relationship, neighbour id), numbered (``ord``) and
   stopped after ``hop_cap + 1`` rows. Each arm joins the entered node's ``entities`` row (a
   passage: its parent's) and applies the read rule, the lifecycle rule and the project
   confinement **before** any cap, so an unreadable memory is neither a result nor a route, and
   hidden rows never eat the budget. What makes an arm useless for a node is checked once, above
   the arm. One exception: an ordinary node's edges one way when it has at most ``hop_cap`` of
   them (most nodes), which no cap can cut, so the order they would be cut in does not matter:
   they come unprobed (type NULL) and each entered node is probed in step 3, in answer order,
   only as far as the level needs; a node that is not readable is then neither a result nor a
   route, as before.
2. ``best``: per unvisited node among rows ``ord <= hop_cap``, its best hop (highest weight,
   then relationship name, outgoing before incoming, then predecessor id). Readability belongs
   to the node, not the hop, so choosing the hop before the probe changes nothing.
3. ``first``, ``early``, ``lv``: the level in answer order (weight desc, id), each unprobed node
   probed as it is reached. ``first`` takes its first ``:limit + 1`` nodes of the asked types;
   at the last level that is the level, and before it (when no type is asked) it is all the
   answer needs when, with the scores held before, it makes ``:limit + 1`` scores no deeper node
   can beat (``early``: the walk stops after this level, and every node past them ranks after
   all of them). Otherwise ``lv`` reads on, one node more than it keeps: a level before the last
   keeps its best ``:level_cap`` nodes (and at least ``:limit + 1``) as the routes the next
   level expands. A walk from ordinary seeds usually stops after its first level, so most of
   its neighbours are never probed (docs/walk-plans.md).
4. ``cut``: the best (score, distance, id) a dropped row or node could have had (and, before the
   last level, any deeper node); ``held``: the best ``:limit + 1`` scores of the asked types so
   far; ``done``: the early stop, once no deeper node can beat them.

``flags`` turns the cuts into ``filters.frontier_capped``: false only when the answer's row
``:limit + 1`` ranks strictly before every cut's bound, i.e. when the answer is exactly the
reference one.

The final SELECT scores each node, filters ``types`` (the answer, never the route), orders by
score desc, distance, id and returns ``:limit + 1`` rows, so the caller can tell ``truncated``,
with each row's metadata as the response shows it (JSON text). For a node reached by the
synthetic ``SHARES_COMMUNITY`` hop it also names the community: the smallest community id the
node shares with its chosen predecessor (a seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.db import fetch_prepared
from app.repo.hops import (
    ENTER_LVL,
    PASSAGE_REL,
    SCORE,
    WEIGHT,
    allowed,
    hop_source,
)
from app.repo.hops import text_array as _text_array
from app.repo.readers import READER_BY_KEY, hash_key
from app.repo.readrule import readable, readable_by

# The seeds statement also switches this transaction to generic plans (``set_config(...,
# true)``: transaction-local), so the walk that follows is planned once per pooled connection and
# then only executed: its plan is made of per-node index probes whatever the org's size, and
# planning it took 20-30 ms a call (docs/walk-plans.md §1). Evaluated once per resolved seed;
# with none, no walk runs. The setting lasts until the transaction ends: a verb that sends other
# statements after a walk in the same transaction runs them on generic plans too (context sends
# its walks last).
SEEDS_SQL = text(
    f"""/* sibyl:expand_neighbors.seeds */
SELECT s.id, set_config('plan_cache_mode', 'force_generic_plan', true) AS plan_mode
FROM unnest(CAST(:seed_ids AS text[])) WITH ORDINALITY AS s(id, ord)
JOIN entities t ON t.org_id = :r_org
 AND t.id = CASE WHEN s.id LIKE 'passage\\_%'  -- a passage stands for its parent
                 THEN (SELECT p.parent_id FROM passages p WHERE p.org_id = :r_org AND p.id = s.id)
                 ELSE s.id END
WHERE {readable("t")}
  AND t.lifecycle <> 'retired'
  AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
ORDER BY s.ord"""
)

WEIGHTED = _text_array(policy.weighted_relationships())
"""The relationships whose weight is not the default one (a hub reads each alone)."""
_OUT_DEFAULT = policy.hop_order(policy.hop_rules(None), outgoing=True)
_IN_DEFAULT = policy.hop_order(policy.hop_rules(None), outgoing=False)
_DEFAULT_TIERS = {  # a hub's tiers and exact relationships when no relationship is named
    "out_tier_lo": _text_array(_OUT_DEFAULT.ranges()[0]),
    "out_tier_hi": _text_array(_OUT_DEFAULT.ranges()[1]),
    "out_exact": _text_array(_OUT_DEFAULT.exact),
    "in_tier_lo": _text_array(_IN_DEFAULT.ranges()[0]),
    "in_tier_hi": _text_array(_IN_DEFAULT.ranges()[1]),
    "in_exact": _text_array(_IN_DEFAULT.exact),
}


def _tiers(name: str) -> str:
    """SQL: the bound tier array ``name``, or (NULL: no relationship named) the default one."""
    return f"coalesce(CAST(:{name} AS text[]), {_DEFAULT_TIERS[name]})"


def _hub_arm(direction: str) -> str:
    """SQL: a hub's edges one way (more than ``:hub_degree`` of them), strongest first (rule:
    bounded-walk).

    ``out``: f -rel-> t over ``pk_edges``; ``in``: t -rel-> f over ``ix_edges_incoming``. One
    index range per tier (``:<dir>_tier_lo``/``:<dir>_tier_hi``: one relationship, or for the
    default weight every relationship between ``''`` and a bound above any name, the weighted
    ones skipped), strongest tier first, each range stopping at ``lvl.hop_cap + 1`` rows that pass
    the read rule, and the arm stops at ``lvl.hop_cap + 1`` rows: its work is bounded by the cap,
    not by the degree. The rows are those an ordinary node's arm gives, in the same order.
    """
    far = "dst_id" if direction == "out" else "src_id"
    weight = WEIGHT.format(rel="e.relationship")
    way = "outgoing" if direction == "out" else "incoming"
    return f"""(  -- a hub's {way} edges, one index range per tier
              SELECT x.id, x.relationship, {0 if direction == "out" else 1}, x.weight, x.type,
                     row_number() OVER (ORDER BY x.tier),
                     x.relationship = ANY({_tiers(f"{direction}_exact")})
              FROM (
                -- the tiers in order, each range in (relationship, neighbour) order: the rows
                -- come in weight order as they are read, and the arm stops at its
                -- (hop cap + 1)th (no sort, which would read the next tiers to close the
                -- last one's group: a whole range of the node for the default weight)
                SELECT r.tier, e.id, e.relationship, e.weight, e.type
                FROM unnest({_tiers(f"{direction}_tier_lo")},
                            {_tiers(f"{direction}_tier_hi")}) WITH ORDINALITY AS r(lo, hi, tier)
                CROSS JOIN LATERAL (
                  SELECT e.{far} AS id, e.relationship, {weight} AS weight, t.type
                  {hop_source(f"edges_{direction}", org="lvl.org_id", node="f.id", indent=" " * 18)}
                    AND e.relationship >= r.lo AND e.relationship <= r.hi
                    AND (r.lo = r.hi
                         OR NOT (e.relationship = ANY({WEIGHTED})))
                    AND {allowed("e.relationship", f"{direction}_denied")}
                    AND {ENTER_LVL}
                  ORDER BY e.relationship, e.{far}
                  LIMIT lvl.hop_cap + 1
                ) e
                ORDER BY r.tier
                LIMIT lvl.hop_cap + 1
              ) x
              WHERE raw.{direction}_hub  -- checked once per node, above the arm
            )"""


def _unprobed(direction: str) -> str:
    """SQL: an ordinary node's edges one way (``out`` or ``in``) where it has at most
    ``lvl.hop_cap`` of them, unprobed (type NULL, ``ord`` 1): see step 1 of the module
    docstring."""
    return f"""SELECT x.id, x.relationship, {0 if direction == "out" else 1},
                     {WEIGHT.format(rel="x.relationship")},
                     CAST(NULL AS text), CAST(1 AS bigint), false
              FROM unnest(raw.{direction}_ids, raw.{direction}_rels) AS x(id, relationship)
              WHERE NOT raw.{direction}_hub AND cardinality(raw.{direction}_ids) <= lvl.hop_cap
                AND {allowed("x.relationship", f"{direction}_denied")}"""


_IN_ANSWER_ORDER = f"""(SELECT * FROM best ORDER BY best.weight DESC, best.id) b
        CROSS JOIN LATERAL (  -- a node entered over an unprobed hop is probed as it is reached
          SELECT b.type WHERE b.type IS NOT NULL
          UNION ALL
          SELECT t.type FROM entities t
          WHERE b.type IS NULL AND t.org_id = lvl.org_id AND t.id = b.id AND {ENTER_LVL}
        ) e"""
"""SQL: the level's nodes (``best``) in answer order as ``b``, each with its type as ``e``: a node
entered over an unprobed hop (type NULL) probed with the read rule, lifecycle and project
confinement of step 1, one by one as the reading query takes rows (under its LIMIT); a node
that fails them gives no row. Read by ``first`` and by ``lv``."""
_DEEPER = SCORE.format(weight="CAST(:max_weight AS float8)", distance="lvl.distance + 2")
"""SQL: the best score any node at the next level's next distance could have."""


_PASSAGE_ARMS = rf""" UNION ALL (  -- passage to its parent: f -PART_OF|DERIVED_FROM-> t (always)
              SELECT t.id, {PASSAGE_REL}, 0,
                     {WEIGHT.format(rel=PASSAGE_REL)}, t.type,
                     CAST(1 AS bigint), true
              {hop_source("parent", org="lvl.org_id", node="f.id")}
                AND f.id LIKE 'passage\_%'  -- only passages have a parent
                AND {allowed(PASSAGE_REL, "out_denied")}
                AND {ENTER_LVL}
            ) UNION ALL (  -- a memory to its passages: p -PART_OF|DERIVED_FROM-> f
              SELECT p.id, p.relationship, 1, {WEIGHT.format(rel="p.relationship")}, 'passage',
                     row_number() OVER (ORDER BY p.id), true
              FROM (
                SELECT p.id, {PASSAGE_REL} AS relationship
                {hop_source("passages", org="lvl.org_id", node="f.id", indent=" " * 16)}
                  AND {allowed(PASSAGE_REL, "in_denied")}
                  AND {ENTER_LVL}
                ORDER BY p.id
                LIMIT lvl.hop_cap + 1
              ) p
              WHERE CAST(:include_incoming AS boolean)
                -- only when relationship_types names PART_OF or DERIVED_FROM (own-spans-on-request)
                AND CAST(:rel_filter AS text[]) IS NOT NULL
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
            )"""
"""SQL: the hop arms of passages (a passage to its parent, a memory to its passages), last of
step 1's arms. Only a walk from a passage seed or whose ``relationship_types`` names
``PART_OF`` or ``DERIVED_FROM`` can use them: every other walk is sent without them
(:func:`keyed_walk`), a smaller plan to start and no arm to rescan per node."""


def _walk_ctes(passages: bool) -> str:
    """SQL: the walk's CTEs (walk, nodes, top, flags); with ``passages``, :data:`_PASSAGE_ARMS`
    as the last hop arms (without: a walk that cannot enter a passage)."""
    passage_arms = _PASSAGE_ARMS if passages else ""
    return rf"""walk(distance, ids, relationships, dir_ranks, weights, preds, types, visited,
                    held, cut_score, cut_distance, cut_id, done,
                    org_id, user_id, readable_projects, k_projects, hop_cap) AS (
    -- level 0: the resolved seeds; every level is ONE row holding its nodes as parallel arrays,
    -- and the reader and the hop cap (`wr`), which every step reads
    SELECT 0, wr.seeds, CAST('{{}}' AS text[]) COLLATE "C",
           CAST('{{}}' AS int[]), CAST('{{}}' AS float8[]), CAST('{{}}' AS text[]) COLLATE "C",
           CAST('{{}}' AS text[]), wr.seeds,
           CAST('{{}}' AS float8[]), CAST(NULL AS float8), CAST(NULL AS int),
           CAST(NULL AS text) COLLATE "C", false,
           wr.org_id, wr.user_id, wr.readable_projects, wr.k_projects, wr.hop_cap
    FROM wr
  UNION ALL
    SELECT lvl.distance + 1, nxt.ids, nxt.relationships, nxt.dir_ranks, nxt.weights, nxt.preds,
           nxt.types, lvl.visited || coalesce(nxt.ids, CAST('{{}}' AS text[])), nxt.held,
           nxt.cut_score, nxt.cut_distance, nxt.cut_id, nxt.done,
           lvl.org_id, lvl.user_id, lvl.readable_projects, lvl.k_projects, lvl.hop_cap
    FROM walk lvl
    CROSS JOIN LATERAL (
      WITH h AS MATERIALIZED (
        -- step 1: the allowed hops from each frontier node f into a node t that is readable,
        -- not retired and inside `project`, each arm in weight order (weight desc,
        -- relationship, neighbour id), numbered (`ord`) and cut after lvl.hop_cap + 1 rows: the
        -- first lvl.hop_cap are entered, the next one only bounds what the cut may have dropped
        SELECT f.id AS pred, arm.*
        FROM unnest(CASE WHEN lvl.distance = 0 THEN lvl.ids  -- every seed; then the routes: a
                         ELSE lvl.ids[1:CAST(:level_cap AS int)] END)  -- level's first :level_cap
             AS f(id)
        CROSS JOIN LATERAL (
          -- f's first :hub_degree + 1 edges each way, read once (index only): more than
          -- :hub_degree makes f a hub that way. They are counted before any rule, so what a
          -- reader may not read never decides it; an ordinary node's edges are all here
          SELECT o.ids AS out_ids, o.rels AS out_rels,
                 coalesce(cardinality(o.ids), 0) > :hub_degree AS out_hub,
                 i.ids AS in_ids, i.rels AS in_rels,
                 coalesce(cardinality(i.ids), 0) > :hub_degree AS in_hub
          FROM (
            SELECT array_agg(e.dst_id) AS ids, array_agg(e.relationship) AS rels
            FROM (SELECT e.dst_id, e.relationship FROM edges e
                  WHERE e.org_id = lvl.org_id AND e.src_id = f.id
                  LIMIT :hub_degree + 1) e
          ) o
          CROSS JOIN (
            SELECT array_agg(e.src_id) AS ids, array_agg(e.relationship) AS rels
            FROM (SELECT e.src_id, e.relationship FROM edges e
                  WHERE CAST(:include_incoming AS boolean)
                    AND e.org_id = lvl.org_id AND e.dst_id = f.id
                  LIMIT :hub_degree + 1) e
          ) i
        ) raw
        CROSS JOIN LATERAL (
            (  -- an ordinary node's edges one way where it has more than lvl.hop_cap of them:
               -- each probed here, numbered per direction, cut after lvl.hop_cap + 1
              SELECT c.id, c.relationship, c.dir_rank, c.weight, c.type, c.ord, c.exact
              FROM (
                SELECT c.id, c.relationship, c.dir_rank, c.weight, t.type,
                       row_number() OVER (PARTITION BY c.dir_rank
                                          ORDER BY c.weight DESC, c.relationship, c.id) AS ord,
                       c.relationship = ANY(CASE WHEN c.dir_rank = 0
                                                 THEN {_tiers("out_exact")}
                                                 ELSE {_tiers("in_exact")} END) AS exact
                FROM (
                  SELECT x.id, x.relationship, 0 AS dir_rank,
                         {WEIGHT.format(rel="x.relationship")} AS weight
                  FROM unnest(raw.out_ids, raw.out_rels) AS x(id, relationship)
                  WHERE NOT raw.out_hub AND cardinality(raw.out_ids) > lvl.hop_cap
                    AND {allowed("x.relationship", "out_denied")}
                  UNION ALL
                  SELECT x.id, x.relationship, 1, {WEIGHT.format(rel="x.relationship")}
                  FROM unnest(raw.in_ids, raw.in_rels) AS x(id, relationship)
                  WHERE NOT raw.in_hub AND cardinality(raw.in_ids) > lvl.hop_cap
                    AND {allowed("x.relationship", "in_denied")}
                ) c
                JOIN entities t ON t.org_id = lvl.org_id AND t.id = c.id AND {ENTER_LVL}
              ) c
              WHERE c.ord <= lvl.hop_cap + 1
            )
            UNION ALL (  -- an ordinary node's edges one way where it has at most lvl.hop_cap of
              -- them: no cap can cut them, so they are not probed here but in answer order, only
              -- as far as the level needs (`first`, `lv`); type NULL marks them
              {_unprobed("out")}
              UNION ALL
              {_unprobed("in")}
            )
            UNION ALL
            {_hub_arm("out")}
            UNION ALL
            {_hub_arm("in")}
            UNION ALL (  -- outgoing mentions: f mentions t (one weight: index order)
              SELECT m.id, 'MENTIONS', 0, {WEIGHT.format(rel="'MENTIONS'")}, m.type,
                     row_number() OVER (ORDER BY m.id), true
              FROM (
                SELECT m.dst_id AS id, t.type
                {hop_source("mentions_out", org="lvl.org_id", node="f.id", indent=" " * 16)}
                  AND {ENTER_LVL}
                ORDER BY m.dst_id
                LIMIT lvl.hop_cap + 1
              ) m
              WHERE f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'MENTIONS'", "out_denied")}
            ) UNION ALL (  -- incoming mentions: t mentions f
              SELECT m.id, 'MENTIONS', 1, {WEIGHT.format(rel="'MENTIONS'")}, m.type,
                     row_number() OVER (ORDER BY m.id), true
              FROM (
                SELECT m.src_id AS id, t.type
                {hop_source("mentions_in", org="lvl.org_id", node="f.id", indent=" " * 16)}
                  AND {ENTER_LVL}
                ORDER BY m.src_id
                LIMIT lvl.hop_cap + 1
              ) m
              WHERE CAST(:include_incoming AS boolean)
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'MENTIONS'", "in_denied")}
            ) UNION ALL (  -- synthetic, first hop only: other members of a seed's communities
              SELECT c.id, 'SHARES_COMMUNITY', 0, {WEIGHT.format(rel="'SHARES_COMMUNITY'")},
                     c.type, row_number() OVER (ORDER BY c.id), true
              FROM (
                SELECT DISTINCT c2.entity_id AS id, t.type
                {hop_source("community", org="lvl.org_id", node="f.id", indent=" " * 16)}
                  AND c2.entity_id <> f.id  -- not its own co-member
                  AND {ENTER_LVL}
                ORDER BY c2.entity_id
                LIMIT lvl.hop_cap + 1
              ) c
              WHERE lvl.distance = 0
                AND f.id NOT LIKE 'passage\_%'  -- only memories have these links
                AND {allowed("'SHARES_COMMUNITY'", "out_denied")}
            ){passage_arms}
        ) arm
      ),
      best AS (
        -- step 2: each unvisited node's best hop from the previous level: highest weight,
        -- then relationship name, outgoing before incoming, then predecessor id
        SELECT DISTINCT ON (c.id) c.id, c.relationship, c.dir_rank, c.weight, c.pred, c.type
        FROM (SELECT * FROM h WHERE h.ord <= lvl.hop_cap OFFSET 0) c  -- a fence: anti-join once
        LEFT JOIN unnest(lvl.visited) AS v(id) ON v.id = c.id
        WHERE v.id IS NULL  -- never re-enter a node of an earlier level (true BFS distance)
        ORDER BY c.id, c.weight DESC, c.relationship, c.dir_rank, c.pred
      ),
      first AS MATERIALIZED (
        -- step 3a: at the last level, or before it when no type is asked, the first :limit + 1
        -- nodes of the asked types in answer order (weight desc, id). A node entered over an
        -- unprobed hop (type NULL) is probed here, one by one in that order, only until the
        -- LIMIT is reached: the read rule, lifecycle and project confinement of step 1
        SELECT b.id, b.relationship, b.dir_rank, b.weight, b.pred, e.type
        FROM {_IN_ANSWER_ORDER}
        WHERE (lvl.distance + 1 = :depth OR CAST(:types AS text[]) IS NULL)
          AND (CAST(:types AS text[]) IS NULL OR e.type = ANY(CAST(:types AS text[])))
        LIMIT :limit + 1
      ),
      early AS (
        -- whether `first` is the whole level the answer needs: at the last level, or when (no
        -- type asked) it holds no node, or its nodes with those held before make :limit + 1
        -- scores no deeper node can beat: the walk stops after this level (`done`), and no node
        -- past them can be in the answer (each ranks after all of them)
        SELECT lvl.distance + 1 = :depth
            OR (CAST(:types AS text[]) IS NULL
                AND (NOT EXISTS (SELECT 1 FROM first)
                     OR coalesce((
                          SELECT x.score FROM (
                            SELECT u.score FROM unnest(lvl.held) AS u(score)
                            UNION ALL
                            SELECT {SCORE.format(weight="f.weight", distance="lvl.distance + 1")}
                            FROM first f
                          ) x
                          ORDER BY x.score DESC
                          OFFSET :limit LIMIT 1
                        ) >= {_DEEPER}, false))) AS yes
      ),
      lv AS (
        -- step 3: the level in answer order (weight desc, id), one node more than it keeps
        -- (that one bounds the cut). The last level keeps only the best :limit + 1 nodes of
        -- the asked types (nothing deeper can use the others, and any other ranks after
        -- them); an earlier level keeps the best :level_cap nodes of any type as routes (the
        -- next level expands them), and at least :limit + 1 as answers (a level cap under the
        -- limit stops the walk going deeper, never drops a node already found). Where `early`
        -- says `first` is all the answer needs, the level is `first`; else its nodes are probed
        -- in the same order until the level's keep + 1 are found
        SELECT k.keep, b.ids, b.relationships, b.dir_ranks, b.weights, b.preds, b.types
        FROM (SELECT CASE WHEN lvl.distance + 1 < :depth THEN greatest(:level_cap, :limit + 1)
                          ELSE :limit + 1 END AS keep) k
        CROSS JOIN LATERAL (
          -- in the order of the rows below (one sort of the level, no sort per array)
          SELECT array_agg(b.id) AS ids, array_agg(b.relationship) AS relationships,
                 array_agg(b.dir_rank) AS dir_ranks, array_agg(b.weight) AS weights,
                 array_agg(b.pred) AS preds, array_agg(b.type) AS types
          FROM (
            SELECT f.* FROM first f WHERE (SELECT yes FROM early)
            UNION ALL
            (SELECT b.id, b.relationship, b.dir_rank, b.weight, b.pred, e.type
             FROM {_IN_ANSWER_ORDER}
             WHERE NOT (SELECT yes FROM early)  -- never the last level: routes of any type
             LIMIT k.keep + 1)
          ) b
        ) b
      ),
      held AS (
        -- the best :limit + 1 scores of the asked types so far (for the early stop), best first
        SELECT array_agg(x.score) AS scores
        FROM (
          SELECT x.score FROM (
            SELECT u.score FROM unnest(lvl.held) AS u(score)
            UNION ALL
            SELECT {SCORE.format(weight="k.weight", distance="lvl.distance + 1")}
            FROM lv CROSS JOIN LATERAL unnest(lv.weights[1:lv.keep], lv.types[1:lv.keep])
              AS k(weight, type)
            WHERE CAST(:types AS text[]) IS NULL OR k.type = ANY(CAST(:types AS text[]))
          ) x
          ORDER BY x.score DESC
          LIMIT :limit + 1
        ) x
      ),
      cut AS (
        -- step 4, what the caps of this level may have dropped, as the best (score,
        -- distance, id) a dropped node could have: the row after an arm's lvl.hop_cap (its id
        -- bounds the dropped ones only when no other relationship of its weight follows it),
        -- the first node past those kept before the last level, and then any deeper node
        -- (also when a level cap under the limit left nodes out of the routes)
        SELECT c.score, c.distance, c.id
        FROM (
          SELECT {SCORE.format(weight="h.weight", distance="lvl.distance + 1")} AS score,
                 lvl.distance + 1 AS distance,
                 CASE WHEN h.exact THEN h.id ELSE '' END COLLATE "C" AS id
          FROM h WHERE h.ord > lvl.hop_cap
          UNION ALL
          SELECT {SCORE.format(weight="lv.weights[lv.keep + 1]", distance="lvl.distance + 1")},
                 lvl.distance + 1, lv.ids[lv.keep + 1]
          FROM lv WHERE lvl.distance + 1 < :depth AND cardinality(lv.ids) > lv.keep
          UNION ALL
          SELECT {_DEEPER}, lvl.distance + 2, '' COLLATE "C"
          FROM lv
          WHERE lvl.distance + 1 < :depth
            AND (cardinality(lv.ids) > least(lv.keep, :level_cap)
                 OR EXISTS (SELECT 1 FROM h WHERE h.ord > lvl.hop_cap))
        ) c
        ORDER BY c.score DESC, c.distance, c.id
        LIMIT 1
      )
      SELECT lv.ids[1:lv.keep] AS ids, lv.relationships[1:lv.keep] AS relationships,
             lv.dir_ranks[1:lv.keep] AS dir_ranks, lv.weights[1:lv.keep] AS weights,
             lv.preds[1:lv.keep] AS preds, lv.types[1:lv.keep] AS types,
             coalesce(held.scores, CAST('{{}}' AS float8[])) AS held,
             cut.score AS cut_score, cut.distance AS cut_distance, cut.id AS cut_id,
             -- the early stop: nothing entered, or :limit + 1 nodes held that no deeper node
             -- can beat (a node at distance d + 1 scores at most score(:max_weight, d + 1);
             -- on a tie the shallower node wins)
             lv.ids IS NULL OR coalesce(cardinality(held.scores) > :limit
               AND held.scores[:limit + 1] >= {_DEEPER}, false) AS done
      FROM lv
      CROSS JOIN held
      LEFT JOIN cut ON true
    ) nxt
    WHERE lvl.distance < :depth AND NOT lvl.done
),
nodes AS (
    SELECT lvl.distance, n.id, n.relationship, n.dir_rank, n.pred, n.type,
           {SCORE.format(weight="n.weight", distance="lvl.distance")} AS score
    FROM walk lvl
    CROSS JOIN LATERAL unnest(lvl.ids, lvl.relationships, lvl.dir_ranks, lvl.weights, lvl.preds,
                              lvl.types)
      AS n(id, relationship, dir_rank, weight, pred, type)
    WHERE lvl.distance >= 1
),
top AS (
    -- the answer: score desc, distance, id; :limit + 1 rows so the caller can tell `truncated`
    SELECT w.*, row_number() OVER (ORDER BY w.score DESC, w.distance, w.id) AS rn
    FROM (
        SELECT n.* FROM nodes n
        WHERE CAST(:types AS text[]) IS NULL OR n.type = ANY(CAST(:types AS text[]))
        ORDER BY n.score DESC, n.distance, n.id
        LIMIT :limit + 1
    ) w
),
flags AS (
    -- frontier_capped: a cap dropped a hop and the answer's row :limit + 1 (or, short of it,
    -- the end of the answer) does not rank strictly before the best node it may have dropped
    SELECT c.cut_score IS NOT NULL AND NOT coalesce(
             k.score > c.cut_score OR (k.score = c.cut_score AND (k.distance < c.cut_distance
               OR (k.distance = c.cut_distance AND k.id < c.cut_id))), false) AS capped,
           c.cut_score IS NOT NULL AS caps_cut  -- a cap dropped something (harmless or not)
    FROM (SELECT 1) one
    LEFT JOIN (
        SELECT lvl.cut_score, lvl.cut_distance, lvl.cut_id FROM walk lvl
        WHERE lvl.cut_score IS NOT NULL
        ORDER BY lvl.cut_score DESC, lvl.cut_distance, lvl.cut_id
        LIMIT 1
    ) c ON true
    LEFT JOIN top k ON k.rn = :limit + 1
)"""


WALK_CTES = _walk_ctes(passages=True)
"""The walk's CTEs (walk, nodes, top, flags), shared by WALK_SQL and KEYED_WALK_SQL."""


def _walk_answer(passages: bool) -> str:
    """SQL: the walk's answer, the rows of ``top`` with what the response shows of each;
    without ``passages`` (a walk that cannot enter a passage: :data:`_PASSAGE_ARMS`) every row
    is a memory, and the passage columns are NULL."""
    if passages:
        memory_or_passage = """coalesce(te.name, pp.name) AS name,
           coalesce(te.project_id, pp.project_id) AS project_id,
           coalesce(te.lifecycle, pp.lifecycle) AS lifecycle,
           coalesce(te.content_prefix, pp.content_prefix) AS content_prefix,"""
        metadata = """coalesce(te.metadata, jsonb_build_object('breadcrumb', pp.breadcrumb,
                                                         'passage_total', pp.passage_total))"""
        prefix = "coalesce(te.content_prefix, pp.content_prefix)"
        passage_columns = "pp.passage_index, pp.parent_id, pp.breadcrumb, pp.passage_total"
        passage_join = r"""
    LEFT JOIN LATERAL (  -- a passage and its parent
      SELECT left(pp.content, :preview_chars + 1) AS content_prefix, pp.passage_index,
             pp.parent_id, pp.breadcrumb, pe.name, pe.project_id, pe.lifecycle, pe.passage_total
      FROM passages pp
      JOIN entities pe ON pe.org_id = pp.org_id AND pe.id = pp.parent_id
      WHERE w.id LIKE 'passage\_%' AND pp.org_id = wr.org_id AND pp.id = w.id
      OFFSET 0  -- a fence: not pulled up, so the LIKE gates the probes (a one-time filter)
    ) pp ON true"""
    else:
        memory_or_passage = """te.name, te.project_id, te.lifecycle, te.content_prefix,"""
        metadata = "te.metadata"
        prefix = "te.content_prefix"
        passage_columns = (
            "CAST(NULL AS int) AS passage_index, CAST(NULL AS text) AS parent_id,\n"
            "           CAST(NULL AS text) AS breadcrumb, CAST(NULL AS int) AS passage_total"
        )
        passage_join = ""
    return rf"""LEFT JOIN LATERAL (
    SELECT w.rn, w.id, w.distance, w.relationship, w.dir_rank, w.score, w.type,
           {memory_or_passage}
           -- the neighbour's metadata as the response shows it, as JSON text: a memory's own
           -- (a passage: its breadcrumb and its parent's passage count), the community behind
           -- a synthetic hop, and whether the preview was cut
           CAST({metadata}
                || coalesce(c.community, CAST('{{}}' AS jsonb))
                || jsonb_build_object('content_truncated', char_length(
                     {prefix}) > :preview_chars)
                AS text) AS metadata,
           {passage_columns}
    FROM top w
    CROSS JOIN wr
    LEFT JOIN LATERAL (  -- a memory (never a passage id: each table checks its prefix)
      SELECT te.name, te.project_id, te.lifecycle, te.metadata,
             -- the preview's first characters only: a long body is not decompressed whole
             -- (its full length is never needed: it fits iff the prefix is at most
             -- :preview_chars)
             left(te.content, :preview_chars + 1) AS content_prefix
      FROM entities te
      WHERE w.id NOT LIKE 'passage\_%' AND te.org_id = wr.org_id AND te.id = w.id
      OFFSET 0  -- a fence: not pulled up, so the LIKE gates the probes (a passage id probes
                -- no memory)
    ) te ON true{passage_join}
    LEFT JOIN LATERAL (
      -- the community behind a synthetic hop: the smallest one the node shares with its
      -- predecessor (a seed); both ends already passed the read rule
      SELECT jsonb_build_object('community_id', min(c1.community_id)) AS community
      FROM community_members c1
      JOIN community_members c2
        ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
      WHERE w.relationship = 'SHARES_COMMUNITY' AND w.distance = 1
        AND c1.org_id = wr.org_id AND c1.entity_id = w.pred AND c2.entity_id = w.id
      HAVING min(c1.community_id) IS NOT NULL
    ) c ON true
    ORDER BY w.rn
) r ON true"""


WALK_ANSWER = _walk_answer(passages=True)
"""The walk's answer (the rows of ``top`` with what the response shows of each), shared by
WALK_SQL and KEYED_WALK_SQL."""


WALK_SQL = text(
    f"""/* sibyl:expand_neighbors */
WITH RECURSIVE wr AS (
    -- the reader, the resolved seeds and the hop cap, as bound
    SELECT CAST(:r_org AS text) COLLATE "C" AS org_id, CAST(:r_user AS text) AS user_id,
           CAST(:r_projects AS text[]) AS readable_projects,
           CASE WHEN CAST(:r_restricted AS boolean) THEN CAST('{{}}' AS text[]) END AS k_projects,
           CAST(:seed_ids AS text[]) COLLATE "C" AS seeds, CAST(:hop_cap AS int) AS hop_cap
),
{WALK_CTES}
SELECT f.capped, f.caps_cut, r.*
FROM flags f
{WALK_ANSWER}"""
)


# The REST and MCP expand in ONE statement: the reader row of the API key, the seeds it may
# walk from, and the walk, as WALK_SQL with the reader, the seeds and the hop cap (`wr`) computed
# by the statement's own `rd` and `sd` instead of bound. One statement is one snapshot, so it
# needs no transaction, and it is sent on connections whose plan mode is generic
# (app.core.db.statement_engine): it is planned once per connection, then only executed. No cache
# of keys: a revoked or unknown key has no `rd` row, so the statement returns no row at all and
# reads nothing (401); a key without the `read` scope has no seeds (NULL), so nothing is read
# either (403). The read rule gates the seeds and every step of the walk exactly as in WALK_SQL
# (the same fragment; the walk reads the reader from its own rows). The hop cap is sized from
# the resolved seeds as app.service.expand.walk_params sizes it (`:walk_hop_cap`: the configured
# cap, or NULL).
def _keyed_walk_sql(passages: bool) -> str:
    """SQL: the keyed walk (see above), with the passage arms (:data:`_PASSAGE_ARMS`) and the
    answer's passage columns, or, for a walk that cannot enter a passage, without them."""
    ctes = _walk_ctes(passages)
    shape = (
        ""
        if passages
        else (
            "\n-- memories only: no passage seed and no PART_OF/DERIVED_FROM asked, so the passage"
            "\n-- arms are left out"
        )
    )
    return f"""/* sibyl:expand_neighbors.keyed */{shape}
WITH RECURSIVE rd AS MATERIALIZED (
{READER_BY_KEY}
),
sd AS MATERIALIZED (
    -- the seeds the key's reader may walk from (existing, readable, not retired, inside
    -- `project`), in request order; NULL without the `read` scope; and the hop cap they size
    SELECT x.seeds,
           coalesce(CAST(:walk_hop_cap AS int), :limit + 1 + cardinality(x.seeds)) AS hop_cap
    FROM (
      SELECT CASE WHEN 'read' = ANY(rd.scopes) THEN ARRAY(
               SELECT s.id
               FROM unnest(CAST(:seed_ids AS text[])) WITH ORDINALITY AS s(id, ord)
               CROSS JOIN LATERAL (
                 -- one index probe per seed (a passage stands for its parent), whatever the
                 -- org's size: this statement's plan is generic and made for an average org,
                 -- so no join here may become a scan of the org (the sub-select and LIMIT 1,
                 -- one row of the primary key anyway, keep both probes per seed)
                 SELECT 1 FROM entities t
                 WHERE t.org_id = rd.org_id
                   AND t.id = CASE WHEN s.id LIKE 'passage\\_%'  -- a passage: its parent
                                   THEN (SELECT p.parent_id FROM passages p
                                         WHERE p.org_id = rd.org_id AND p.id = s.id)
                                   ELSE s.id END
                   AND {readable_by("t", "rd")}
                   AND t.lifecycle <> 'retired'
                   AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
                 LIMIT 1
               ) t
               ORDER BY s.ord) END AS seeds
      FROM rd
      OFFSET 0  -- a fence: the seeds are resolved once, not once per use of x.seeds
    ) x
),
wr AS (
    SELECT rd.org_id, rd.user_id, rd.readable_projects, rd.k_projects,
           sd.seeds COLLATE "C" AS seeds,
           sd.hop_cap
    FROM rd CROSS JOIN sd
),
{ctes}
SELECT CASE WHEN r.rn IS NULL OR r.rn = 1 THEN rd.scopes END AS scopes,  -- once, not per row
       CASE WHEN r.rn IS NULL OR r.rn = 1 THEN sd.seeds END AS seeds,
       f.capped, r.*
FROM rd
CROSS JOIN sd
CROSS JOIN flags f
{_walk_answer(passages)}"""


KEYED_WALK_SQL = text(_keyed_walk_sql(passages=True))
KEYED_WALK_MEMORIES_SQL = text(_keyed_walk_sql(passages=False))
"""KEYED_WALK_SQL without the passage arms: what REST and MCP send for a walk that cannot enter a
passage (no passage seed, no ``relationship_types`` naming ``PART_OF`` or ``DERIVED_FROM``;
:func:`keyed_walk`). The same answers: those arms give no row to such a walk."""


# KEYED_WALK_SQL as the driver receives it ($1, $2, ...) and its parameters' names in that order,
# compiled once: the verb sent most is handed to the driver as is, skipping the per-call
# compilation lookup and parameter processing of a text() statement (~0.3 ms of CPU a request on
# a slow host), and run as the driver's own prepared statement (app.core.db.fetch_prepared: its
# errors are SQLAlchemy's as before).
def _for_driver(statement: TextClause) -> tuple[str, tuple[str, ...]]:
    """``statement`` as the driver receives it, and its parameters' names in ``$n`` order."""
    compiled = statement.compile(dialect=PGDialect_asyncpg())
    return str(compiled), tuple(compiled.positiontup or ())


_KEYED_DRIVER = {
    True: _for_driver(KEYED_WALK_SQL),
    False: _for_driver(KEYED_WALK_MEMORIES_SQL),
}


class WalkRow(NamedTuple):
    """One neighbor row of the walk, before presentation (preview, names) by the domain.

    A named tuple: built from the answer's columns by position, once per returned row of every
    expand (a frozen dataclass and a column lookup by name cost ~0.4 ms a request)."""

    id: str
    distance: int
    relationship: str
    outgoing: bool
    score: float
    type: str
    name: str
    project_id: str | None
    lifecycle: str
    metadata: str
    """The metadata the response shows, as a JSON object's text (made by the statement: the
    memory's own, or a passage's breadcrumb and count; ``community_id`` behind a synthetic hop;
    ``content_truncated``)."""
    content_prefix: str
    content_length: int  # len(content_prefix): more than the budget iff the body does not fit
    passage_index: int | None
    parent_id: str | None
    breadcrumb: str | None
    passage_total: int | None


# The columns of WALK_ANSWER (`r.*`), in order: the last columns of both walk statements.
ANSWER_COLUMNS = (
    "rn",
    "id",
    "distance",
    "relationship",
    "dir_rank",
    "score",
    "type",
    "name",
    "project_id",
    "lifecycle",
    "content_prefix",
    "metadata",
    "passage_index",
    "parent_id",
    "breadcrumb",
    "passage_total",
)


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


class WalkAnswer(NamedTuple):
    """What one walk returns: its rows and what its caps did."""

    rows: list[WalkRow]
    """Up to ``limit + 1`` neighbor rows, in answer order (score desc, distance, id)."""
    capped: bool
    """``filters.frontier_capped``: a cap dropped a hop that could have changed the answer."""
    caps_cut: bool
    """A cap dropped at least one hop or node, whether or not it could change the answer (the
    benchmark's "capped walks": ``caps_cut`` and not ``capped`` means the caps bit and the
    answer is still the exact one)."""


async def walk(conn: AsyncConnection, *, params: dict[str, object]) -> WalkAnswer:
    """Run the walk with all of its bound ``params``; return its rows and cap flags."""
    rows = (await conn.execute(WALK_SQL, params)).all()
    if not rows:
        return WalkAnswer([], False, False)
    return WalkAnswer(
        _walk_rows(rows, rows[0]._fields), bool(rows[0].capped), bool(rows[0].caps_cut)
    )


@dataclass(frozen=True)
class KeyedWalk:
    """What :data:`KEYED_WALK_SQL` answers: the scopes of the key (None: unknown or revoked),
    the seeds it may walk from (request order; empty without the ``read`` scope), the rows."""

    scopes: frozenset[str] | None
    seeds: list[str]
    rows: list[WalkRow]
    capped: bool


def can_enter_passages(params: dict[str, object]) -> bool:
    """Whether a walk with bound ``params`` may reach a passage: from a passage seed (a
    ``passage_`` id), or over the arm from a memory to its passages, which runs only when
    ``relationship_types`` is given (``rel_filter``: it must name ``PART_OF`` or
    ``DERIVED_FROM``, rule own-spans-on-request). Passages are reached no other way (edges,
    mentions and communities hold memories only)."""
    seeds = params["seed_ids"]
    assert isinstance(seeds, list)
    return params["rel_filter"] is not None or any(s.startswith("passage_") for s in seeds)


async def keyed_walk(conn: AsyncConnection, *, key: str, params: dict[str, object]) -> KeyedWalk:
    """One statement: authenticate ``key``, resolve the seeds ``params["seed_ids"]`` and walk
    from them, with the walk's bound ``params`` minus the reader's (:func:`walk_params` of
    :mod:`app.service.expand` with ``reader=None``) and ``walk_hop_cap`` (None: sized from the
    resolved seeds)."""
    bound = {**params, "key_hash": hash_key(key)}
    sql, order = _KEYED_DRIVER[can_enter_passages(params)]
    fields, rows = await fetch_prepared(conn, sql, [bound[n] for n in order])
    if not rows:
        return KeyedWalk(None, [], [], False)
    first = rows[0]  # the key's scopes and the seeds come with the first row only
    scopes, seeds, capped = first[0], first[1], first[2]  # KEYED_WALK_SQL's first columns
    return KeyedWalk(frozenset(scopes), list(seeds or []), _walk_rows(rows, fields), bool(capped))


def _walk_rows(rows: Sequence[Sequence[Any]], fields: tuple[str, ...]) -> list[WalkRow]:
    """The neighbour rows of a walk's answer, whose columns are named ``fields`` (the one row
    of an empty answer has no id)."""
    if not rows:
        return []
    start = len(fields) - len(ANSWER_COLUMNS)
    if fields[start:] != ANSWER_COLUMNS:  # the SQL and this reader disagree: a bug
        raise RuntimeError(f"unexpected walk columns {fields}")
    out: list[WalkRow] = []
    for r in rows:
        (
            _rn,
            id_,
            distance,
            rel,
            dir_rank,
            score,
            type_,
            name,
            project_id,
            lifecycle,
            prefix,
            metadata,
            passage_index,
            parent_id,
            breadcrumb,
            passage_total,
        ) = r[start:]
        if id_ is None:
            continue
        out.append(
            WalkRow(
                id_,
                distance,
                rel,
                dir_rank == 0,  # outgoing
                score,
                type_,
                name,
                project_id,
                lifecycle,
                metadata,
                prefix,
                # content_prefix holds :preview_chars + 1 characters of a longer body: as a
                # length, its own tells whether the body fits (app.domain.preview.preview_prefix)
                len(prefix),
                passage_index,
                parent_id,
                breadcrumb,
                passage_total,
            )
        )
    return out
