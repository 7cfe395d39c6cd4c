"""``sibyl:search.promote``: the strongest typed neighbour of one memory that the bound reader may
read and that passes the request's filters (the pipeline lists it right after that memory)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.hops import LINKS, hop_source
from app.repo.readrule import readable


# One arm per (relationship, direction, lifecycle), strongest first; each probes the edge index
# for its first neighbour (by id) that passes every filter, the read rule included, so the LIMIT
# counts only rows the reader may see and a hub costs one index range start per arm, not its
# degree (a lifecycle is an arm of its own, so "active before superseded" needs no sort).
def _promote_arm(link: str, outgoing: str) -> str:
    far = LINKS[link].far
    return f"""(
            SELECT t.id, t.type
            {hop_source(link, org=":r_org", node=":memory", indent="            ")}
              AND a.outgoing = {outgoing}
              AND e.relationship = a.relationship AND t.id <> :memory
              AND NOT t.id = ANY(CAST(:skip AS text[]))
              AND t.lifecycle = a.lifecycle
              AND (CAST(:types AS text[]) IS NULL OR t.type = ANY(CAST(:types AS text[])))
              AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
              AND {readable("t")}
            ORDER BY {far}
            LIMIT 1
        )"""


PROMOTE_SQL = text(
    f"""/* sibyl:search.promote */
SELECT n.id, n.type, a.relationship, a.outgoing
FROM unnest(CAST(:relationships AS text[]), CAST(:weights AS float8[]),
            CAST(:outgoing AS boolean[]), CAST(:lifecycles AS text[]))
     WITH ORDINALITY AS a(relationship, weight, outgoing, lifecycle, ord)
CROSS JOIN LATERAL (
    {_promote_arm("edges_out", "true")}
    UNION ALL
    {_promote_arm("edges_in", "false")}
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
    """The first one-hop neighbour of ``memory`` over ``arms`` (``(relationship, policy weight,
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
