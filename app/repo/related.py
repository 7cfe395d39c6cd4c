"""The related memories of a context pack: one statement for every item at once (rule:
context-budget-whole).

For each item ``f`` of ``:item_ids`` (memories and passages), its one-hop neighbors as a depth-1
``expand_neighbors`` walk from ``f`` alone would find them, by the same hop arms, the same read
rule (:func:`app.repo.readrule.readable`, through :data:`app.repo.walk.ENTER`), the same weights
and per-arm cap (``:hop_cap``: ``SIBYL_WALK_HOP_CAP``, none by default; rows examined in the
walk's order, strongest hop first, so a cap drops the weakest hops; rule: bounded-walk), and the
same best-hop rule (highest weight, then relationship name, outgoing before incoming): from a
memory, its edges and mentions both ways and its communities' other members (under ``:rel_filter``
and the direction rules ``:out_denied`` / ``:in_denied``), never its own passages (one
``fetch_slice`` away); from a passage, its parent (always allowed, rule: own-spans-on-request). Per
item, the best ``:related_limit`` by score (= weight at distance 1) desc, then id; never the item
itself.

Cost: one statement for the whole pack instead of one walk per item; each arm is an index probe
per item, bounded by ``:hop_cap`` rows when set (else by the item's degree).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.walk import ENTER, PASSAGE_REL, WEIGHT, allowed

RELATED_SQL = text(
    rf"""/* sibyl:context.related */
SELECT f.id AS item_id, r.id, r.relationship, r.dir_rank, r.weight,
       t.type, t.name, t.lifecycle
FROM unnest(CAST(:item_ids AS text[])) AS f(id)
CROSS JOIN LATERAL (
    SELECT b.*
    FROM (
        -- each neighbor's best hop from f: highest weight, then relationship, outgoing first
        SELECT DISTINCT ON (h.id) h.id, h.relationship, h.dir_rank, h.weight
        FROM (
            (  -- outgoing edges: f -rel-> t
              SELECT e.dst_id AS id, e.relationship, 0 AS dir_rank,
                     {WEIGHT.format(rel="e.relationship")} AS weight
              FROM edges e
              JOIN entities t ON t.org_id = e.org_id AND t.id = e.dst_id
              WHERE e.org_id = :r_org AND e.src_id = f.id
                AND f.id NOT LIKE 'passage\_%'
                AND {allowed("e.relationship", "out_denied")}
                AND {ENTER}
              ORDER BY weight DESC, e.relationship, e.dst_id  -- a cap drops the weakest hops
              LIMIT :hop_cap
            ) UNION ALL (  -- incoming edges: t -rel-> f
              SELECT e.src_id, e.relationship, 1, {WEIGHT.format(rel="e.relationship")}
              FROM edges e
              JOIN entities t ON t.org_id = e.org_id AND t.id = e.src_id
              WHERE e.org_id = :r_org AND e.dst_id = f.id
                AND f.id NOT LIKE 'passage\_%'
                AND {allowed("e.relationship", "in_denied")}
                AND {ENTER}
              ORDER BY 4 DESC, e.relationship, e.src_id  -- by weight first, as above
              LIMIT :hop_cap
            ) UNION ALL (  -- outgoing mentions: f mentions t
              SELECT m.dst_id, 'MENTIONS', 0, {WEIGHT.format(rel="'MENTIONS'")}
              FROM mentions m
              JOIN entities t ON t.org_id = m.org_id AND t.id = m.dst_id
              WHERE m.org_id = :r_org AND m.src_id = f.id
                AND f.id NOT LIKE 'passage\_%'
                AND {allowed("'MENTIONS'", "out_denied")}
                AND {ENTER}
              ORDER BY m.dst_id
              LIMIT :hop_cap
            ) UNION ALL (  -- incoming mentions: t mentions f
              SELECT m.src_id, 'MENTIONS', 1, {WEIGHT.format(rel="'MENTIONS'")}
              FROM mentions m
              JOIN entities t ON t.org_id = m.org_id AND t.id = m.src_id
              WHERE m.org_id = :r_org AND m.dst_id = f.id
                AND f.id NOT LIKE 'passage\_%'
                AND {allowed("'MENTIONS'", "in_denied")}
                AND {ENTER}
              ORDER BY m.src_id
              LIMIT :hop_cap
            ) UNION ALL (  -- the other members of f's communities
              SELECT c2.entity_id, 'SHARES_COMMUNITY', 0,
                     {WEIGHT.format(rel="'SHARES_COMMUNITY'")}
              FROM community_members c1
              JOIN community_members c2
                ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id
              JOIN entities t ON t.org_id = c2.org_id AND t.id = c2.entity_id
              WHERE c1.org_id = :r_org AND c1.entity_id = f.id
                AND f.id NOT LIKE 'passage\_%'
                AND {allowed("'SHARES_COMMUNITY'", "out_denied")}
                AND {ENTER}
              ORDER BY c2.entity_id, c2.community_id
              LIMIT :hop_cap
            ) UNION ALL (  -- a passage to its parent (always allowed)
              SELECT t.id, {PASSAGE_REL}, 0, {WEIGHT.format(rel=PASSAGE_REL)}
              FROM passages p
              JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
              WHERE f.id LIKE 'passage\_%'
                AND p.org_id = :r_org AND p.id = f.id
                AND {ENTER}
            )
        ) h
        WHERE h.id <> f.id
        ORDER BY h.id, h.weight DESC, h.relationship, h.dir_rank
    ) b
    ORDER BY b.weight DESC, b.id
    LIMIT :related_limit
) r
JOIN entities t ON t.org_id = :r_org AND t.id = r.id
ORDER BY f.id, r.weight DESC, r.id"""
)


@dataclass(frozen=True)
class RelatedRow:
    """One related memory of one item (``weight``: the policy weight of its best hop)."""

    item_id: str
    id: str
    relationship: str
    outgoing: bool
    weight: float
    type: str
    name: str
    lifecycle: str


async def related(
    conn: AsyncConnection, *, params: dict[str, object]
) -> dict[str, list[RelatedRow]]:
    """Run the statement with its bound ``params`` (reader, ``item_ids``, hop rules, policy
    arrays, ``project``, ``hop_cap``, ``related_limit``); the rows by item id, best first."""
    out: dict[str, list[RelatedRow]] = {}
    for r in (await conn.execute(RELATED_SQL, params)).all():
        out.setdefault(r.item_id, []).append(
            RelatedRow(
                item_id=r.item_id,
                id=r.id,
                relationship=r.relationship,
                outgoing=r.dir_rank == 0,
                weight=r.weight,
                type=r.type,
                name=r.name,
                lifecycle=r.lifecycle,
            )
        )
    return out
