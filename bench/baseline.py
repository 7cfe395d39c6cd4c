"""The baseline walk of the benchmark: what a plain recursive CTE does (docs/benchmark.md).

Kept **only** in the benchmark, never on a service path. It is the textbook walk of
``../shared/notes/postgres-walks.md``: ``UNION ALL`` with a path array that stops cycles along
one path, and nothing else, so every path of length ≤ depth is enumerated; the answer is then
folded per node (fewest hops, then the best hop) and cut to ``limit``. It takes the same hops as
the service walk (edges both ways under the §4 direction rules, mentions, a seed's community
co-members on the first hop, passage ↔ parent) with the same read rule
(:func:`app.repo.readrule.readable`), lifecycle and project conditions inside every hop arm,
and it binds the very parameters of :func:`app.service.expand.walk_params`. What it lacks is
exactly what the service adds: a visited set (true breadth-first levels), the per-node cap
``:hop_cap`` and the per-level cap ``:level_cap``. So on an uncapped walk both return the same
nodes at the same distances (the smoke test checks it), and the ratio of their costs is the
price of path enumeration through hubs.

Run it with a statement timeout (:func:`run_baseline`): through hubs it can run for minutes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.hops import SCORE, hop_arm

_INCOMING = "CAST(:include_incoming AS boolean)"
_OWN_SPANS = "CAST(:rel_filter AS text[]) IS NOT NULL  -- own spans only when named"


def _arm(link: str, *where: str) -> str:
    """One hop arm from the path's last node ``w.id``, as the service's statements write it."""
    return hop_arm(link, org=":r_org", node="w.id", where=where, indent="            ")


BASELINE_SQL = text(
    f"""/* sibyl:bench.baseline_walk */
WITH RECURSIVE walk(id, distance, relationship, dir_rank, weight, pred, path) AS (
    SELECT s.id COLLATE "C", 0, CAST(NULL AS text) COLLATE "C", 0, CAST(1.0 AS float8),
           CAST(NULL AS text) COLLATE "C", CAST(ARRAY[s.id] AS text[]) COLLATE "C"
    FROM unnest(CAST(:seed_ids AS text[])) AS s(id)
  UNION ALL
    SELECT h.id, w.distance + 1, h.relationship, h.dir_rank, h.weight, w.id, w.path || h.id
    FROM walk w
    CROSS JOIN LATERAL (
            {_arm("edges_out")}
        UNION ALL
            {_arm("edges_in", _INCOMING)}
        UNION ALL
            {_arm("mentions_out")}
        UNION ALL
            {_arm("mentions_in", _INCOMING)}
        UNION ALL
            {_arm("community", "w.distance = 0", "c2.entity_id <> w.id")}
        UNION ALL
            {_arm("parent")}
        UNION ALL
            {_arm("passages", _INCOMING, _OWN_SPANS)}
    ) h
    WHERE w.distance < :depth
      AND h.id <> ALL (w.path)
),
best AS (  -- per node: fewest hops, then the best hop (as the service ranks hops)
    SELECT DISTINCT ON (w.id) w.id, w.distance, w.relationship, w.dir_rank, w.weight
    FROM walk w
    WHERE w.distance >= 1 AND w.id <> ALL (CAST(:seed_ids AS text[]))
    ORDER BY w.id, w.distance, w.weight DESC, w.relationship, w.dir_rank, w.pred
)
SELECT b.id, b.distance, b.relationship, b.dir_rank,
       {SCORE.format(weight="b.weight", distance="b.distance")} AS score,
       coalesce(te.name, pe.name) AS name
FROM best b
LEFT JOIN entities te ON te.org_id = :r_org AND te.id = b.id
LEFT JOIN passages pp ON pp.org_id = :r_org AND pp.id = b.id
LEFT JOIN entities pe ON pe.org_id = :r_org AND pe.id = pp.parent_id
ORDER BY score DESC, b.distance, b.id
LIMIT :limit + 1"""
)


async def run_baseline(
    conn: AsyncConnection, params: dict[str, Any], *, timeout_ms: int | None = None
) -> list[Any]:
    """Run the baseline walk with ``params`` (those of ``walk_params``); return its rows.

    ``timeout_ms`` sets ``statement_timeout`` for the rest of the transaction (``SET LOCAL``).
    """
    if timeout_ms is not None:
        await conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
    return list((await conn.execute(BASELINE_SQL, params)).all())
