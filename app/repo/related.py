"""The related memories of a context pack: one statement for every item at once (rule:
context-budget-whole).

For each item ``f`` of ``:item_ids`` (memories and passages), its one-hop neighbors as a depth-1
``expand_neighbors`` walk from ``f`` alone would find them, by the same hop arms, the same read
rule (:func:`app.repo.readrule.readable`, through :data:`app.repo.hops.ENTER`), the same weights
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

from app.repo.hops import ENTER, PASSAGE_REL, WEIGHT, hop_arm, hop_source

_MEMORY = "f.id NOT LIKE 'passage\\_%'"  # only memories have these links


def _arm(link: str, *order: str) -> str:
    """One arm from the item ``f``: at most ``:hop_cap`` rows, strongest hop first."""
    return hop_arm(
        link,
        org=":r_org",
        node="f.id",
        where=[_MEMORY],
        tail=[f"ORDER BY {', '.join(order)}", "LIMIT :hop_cap"],
    )


RELATED_SQL = text(
    f"""/* sibyl:context.related */
SELECT f.id AS item_id, r.id, r.relationship, r.dir_rank, r.weight,
       t.type, t.name, t.lifecycle
FROM unnest(CAST(:item_ids AS text[])) AS f(id)
CROSS JOIN LATERAL (
    SELECT b.*
    FROM (
        -- each neighbor's best hop from f: highest weight, then relationship, outgoing first
        SELECT DISTINCT ON (h.id) h.id, h.relationship, h.dir_rank, h.weight
        FROM (
            (  -- outgoing edges: f -rel-> t (a cap drops the weakest hops)
              {_arm("edges_out", "weight DESC", "e.relationship", "e.dst_id")}
            ) UNION ALL (  -- incoming edges: t -rel-> f
              {_arm("edges_in", "weight DESC", "e.relationship", "e.src_id")}
            ) UNION ALL (  -- outgoing mentions: f mentions t
              {_arm("mentions_out", "m.dst_id")}
            ) UNION ALL (  -- incoming mentions: t mentions f
              {_arm("mentions_in", "m.src_id")}
            ) UNION ALL (  -- the other members of f's communities
              {_arm("community", "c2.entity_id", "c2.community_id")}
            ) UNION ALL (  -- a passage to its parent (always allowed)
              SELECT t.id, {PASSAGE_REL}, 0, {WEIGHT.format(rel=PASSAGE_REL)}
              {hop_source("parent", org=":r_org", node="f.id")}
                AND f.id LIKE 'passage\\_%'
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
