"""The benchmark's exactness check: the reference answer of a walk, recomputed in Python.

For a walk whose ``frontier_capped`` is false the service promises the answer of the contract's
reference semantics (rule: walk-reference-semantics), exactly. This module recomputes that answer
independently of the walk's SQL: it reads the raw links of the nodes it expands (every edge,
mention, community co-member and passage link, with no cap and in no particular order) and runs a
plain breadth-first search in Python: a node's distance is its fewest hops from any seed, its hop
the best one from a node one step closer (highest score, then relationship name, then outgoing
before incoming, then predecessor id), the answer the top ``limit`` by (score desc, distance,
id). Which nodes a reader may enter is the one read rule itself (the readable, not retired
memories of the org, read once with :func:`app.repo.readrule.readable`); a passage is as
readable as its parent.

The search stops after a level when ``limit + 1`` nodes already score at least what any deeper
node could (``max W × 0.72^d``; a deeper node ranks after an equal score): exact, and it keeps
the check fast on graphs with hubs. Links are read per level, for the whole frontier at once,
and kept for the next walks of the run.

Scope: the benchmark's requests (no ``relationship_types``, ``types`` or ``project``; incoming
hops on or off). It is a check of the benchmark only, compared on (id, relationship,
direction, distance, score) of every neighbour.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.reader import Reader
from app.repo.readrule import readable

WALKABLE_SQL = text(
    f"""/* sibyl:bench.exact_walkable */
SELECT t.id FROM entities t
WHERE t.org_id = :r_org AND t.lifecycle <> 'retired' AND {readable("t")}"""
)
LINKS_SQL = text(
    """/* sibyl:bench.exact_links */
SELECT e.src_id AS node, e.dst_id AS other, e.relationship AS rel, 0 AS dir, false AS child
FROM edges e WHERE e.org_id = :org AND e.src_id = ANY(CAST(:ids AS text[]))
UNION ALL
SELECT e.dst_id, e.src_id, e.relationship, 1, false
FROM edges e WHERE e.org_id = :org AND e.dst_id = ANY(CAST(:ids AS text[]))
UNION ALL
SELECT m.src_id, m.dst_id, 'MENTIONS', 0, false
FROM mentions m WHERE m.org_id = :org AND m.src_id = ANY(CAST(:ids AS text[]))
UNION ALL
SELECT m.dst_id, m.src_id, 'MENTIONS', 1, false
FROM mentions m WHERE m.org_id = :org AND m.dst_id = ANY(CAST(:ids AS text[]))
UNION ALL  -- a passage and its parent, both ways (the parent's kind names the link)
SELECT p.id, p.parent_id,
       CASE WHEN t.passage_kind = 'evidence' THEN 'DERIVED_FROM' ELSE 'PART_OF' END, 0, false
FROM passages p JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
WHERE p.org_id = :org AND p.id = ANY(CAST(:ids AS text[]))
UNION ALL
SELECT p.parent_id, p.id,
       CASE WHEN t.passage_kind = 'evidence' THEN 'DERIVED_FROM' ELSE 'PART_OF' END, 1, true
FROM passages p JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
WHERE p.org_id = :org AND p.parent_id = ANY(CAST(:ids AS text[]))"""
)
COMMUNITY_SQL = text(
    """/* sibyl:bench.exact_community */
SELECT DISTINCT c1.entity_id AS node, c2.entity_id AS other
FROM community_members c1
JOIN community_members c2 ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
WHERE c1.org_id = :org AND c1.entity_id = ANY(CAST(:ids AS text[]))
  AND c2.entity_id <> c1.entity_id"""
)
PASSAGE_PARENTS_SQL = text(
    """/* sibyl:bench.exact_passages */
SELECT p.id, p.parent_id FROM passages p
WHERE p.org_id = :org AND p.id = ANY(CAST(:ids AS text[]))"""
)

# (neighbour, relationship, direction: 0 outgoing, 1 incoming, a memory to its own passage)
Hop = tuple[str, str, int, bool]


@dataclass(frozen=True)
class ExactRow:
    """One neighbour of the reference answer (the fields compared with the service's)."""

    id: str
    relationship: str
    direction: str
    distance: int
    score: float


@dataclass
class ExactWalker:
    """The reference walk of one reader of one org, with its links cached across walks."""

    org: str
    walkable: set[str]
    links: dict[str, list[Hop]] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    async def load(cls, conn: AsyncConnection, reader: Reader) -> ExactWalker:
        """The walker of ``reader``: its walkable memories, read once."""
        rows = await conn.execute(WALKABLE_SQL, reader.params())
        return cls(org=reader.org_id, walkable={r.id for r in rows})

    def _enters(self, node: str) -> bool:
        """Readable and not retired; a passage through its parent."""
        if node in self.walkable:
            return True
        parent = self.parents.get(node)
        return parent is not None and parent in self.walkable

    async def _fetch(self, conn: AsyncConnection, nodes: list[str]) -> None:
        missing = [n for n in nodes if n not in self.links]
        if not missing:
            return
        found: dict[str, list[Hop]] = defaultdict(list)
        for r in await conn.execute(LINKS_SQL, {"org": self.org, "ids": missing}):
            found[r.node].append((r.other, r.rel, r.dir, r.child))
        others = {other for hops in found.values() for other, _, _, _ in hops}
        unknown = [o for o in others if o.startswith("passage_") and o not in self.parents]
        if unknown:
            rows = await conn.execute(PASSAGE_PARENTS_SQL, {"org": self.org, "ids": unknown})
            self.parents.update({r.id: r.parent_id for r in rows})
        for node in missing:
            self.links[node] = found.get(node, [])

    async def walk(
        self,
        conn: AsyncConnection,
        seeds: list[str],
        *,
        depth: int,
        limit: int,
        include_incoming: bool = True,
    ) -> tuple[list[ExactRow], bool]:
        """The reference answer from the resolved ``seeds``: its first ``limit`` rows and
        whether more existed (``truncated``)."""
        rules = policy.hop_rules(None)
        top = policy.max_weight(None)
        passages = [s for s in seeds if s.startswith("passage_") and s not in self.parents]
        if passages:
            rows = await conn.execute(PASSAGE_PARENTS_SQL, {"org": self.org, "ids": passages})
            self.parents.update({r.id: r.parent_id for r in rows})
        dist: dict[str, int] = dict.fromkeys(seeds, 0)
        found: list[ExactRow] = []
        frontier = list(dict.fromkeys(seeds))
        for d in range(1, depth + 1):
            await self._fetch(conn, frontier)
            best: dict[str, tuple[tuple[float, str, int, str], ExactRow]] = {}
            hops: list[tuple[str, str, str, int]] = []  # (pred, node, rel, dir)
            for pred in frontier:
                for other, rel, way, child in self.links[pred]:
                    if way == 1 and not include_incoming:
                        continue
                    if child:
                        continue  # memory -> its passages: only when relationship_types names it
                    if not rules.allows(rel, outgoing=way == 0):
                        continue
                    hops.append((pred, other, rel, way))
            if d == 1 and rules.allows(policy.SHARES_COMMUNITY, outgoing=True):
                memories = [s for s in frontier if not s.startswith("passage_")]
                if memories:
                    rows = await conn.execute(COMMUNITY_SQL, {"org": self.org, "ids": memories})
                    hops += [(r.node, r.other, policy.SHARES_COMMUNITY, 0) for r in rows]
            for pred, node, rel, way in hops:
                if node in dist or not self._enters(node):
                    continue
                score = policy.score(rel, d)
                key = (-score, rel, way, pred)
                held = best.get(node)
                if held is None or key < held[0]:
                    direction = "outgoing" if way == 0 else "incoming"
                    best[node] = (key, ExactRow(node, rel, direction, d, score))
            if not best:
                break
            for node in best:
                dist[node] = d
            found += [row for _, row in best.values()]
            frontier = sorted(best)
            bound = min(max(top * policy.DECAY**d, policy.SCORE_MIN), policy.SCORE_MAX)
            if sum(1 for r in found if r.score >= bound) > limit:
                break  # no deeper node can enter the first limit + 1
        found.sort(key=lambda r: (-r.score, r.distance, r.id))
        return found[:limit], len(found) > limit


def same_answer(service: list[Any], exact: list[ExactRow]) -> bool:
    """Whether the service's neighbours (objects with id, relationship, direction, distance,
    score) are the reference ones, in order (scores compared as the response rounds them)."""
    if len(service) != len(exact):
        return False
    return all(
        (s.id, s.relationship, s.direction, s.distance)
        == (e.id, e.relationship, e.direction, e.distance)
        and abs(s.score - round(e.score, 6)) < 1e-9
        for s, e in zip(service, exact, strict=True)
    )
