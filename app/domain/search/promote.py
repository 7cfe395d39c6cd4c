"""Promotion: the best result's strongest typed neighbour is listed right after it.

The hops (:func:`promotion_arms`): every relationship of the policy (rule: relationship-policy)
weighing at least :attr:`SearchSettings.promote_min_weight` (0.90: DECIDES, DEPENDS_ON, REQUIRES,
BLOCKS, SUPERSEDES, SUPPORTS, VALIDATED_BY, USES_PROCEDURE, IMPLEMENTED), one direction each:
outgoing, as edges run from the dependent to what it rests on (what the best match depends on,
requires, decides, supports), except SUPERSEDES, which runs from newer to older: incoming, its
successor. Of those, the strongest by weight, then active before superseded, then id, that the
reader may read and that passes the request's filters (``sibyl:search.promote``; a hidden neighbour
is passed over exactly as an absent one). The promoted row carries its source's score and
``metadata.match.promoted_by``.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.reader import Reader
from app.domain.search.fuse import Folded, Promotion, Ranked
from app.domain.search.settings import SearchSettings
from app.repo import search as search_repo


def promotion_arms(min_weight: float) -> list[tuple[str, float, bool]]:
    """The hops a promotion takes, strongest first: ``(relationship, policy weight, outgoing?)``
    (see the module docstring)."""
    rules = policy.hop_rules(None)
    arms = [
        (rel, p.weight, rules.allows(rel, outgoing=True))
        for rel, p in policy.RELATIONSHIPS.items()
        if p.weight >= min_weight and rel not in (policy.MENTIONS, policy.SHARES_COMMUNITY)
    ]
    return sorted(arms, key=lambda a: (-a[1], a[0]))


def promote(folded: Folded, neighbor: search_repo.Neighbor) -> Folded:
    """``folded`` (not empty) with ``neighbor`` (one hop from the first entry's memory) listed
    second: taken from where it was (its collapsed hits kept), or added when no lane found it,
    with the first entry's score and ``promoted_by`` set."""
    first = folded[0][0]
    rest = [e for e in folded[1:] if e[0].memory_id != neighbor.id]
    found = [e for e in folded[1:] if e[0].memory_id == neighbor.id]
    base, collapsed = (
        found[0]
        if found
        else (
            Ranked(
                id=neighbor.id,
                parent_id=None,
                type=neighbor.type,
                lanes={},
                text_rank=None,
                score=0.0,
            ),
            [],
        )
    )
    by = Promotion(
        id=first.memory_id,
        relationship=neighbor.relationship,
        direction="outgoing" if neighbor.outgoing else "incoming",
    )
    moved = dataclasses.replace(base, score=first.score, promoted_by=by)
    return [folded[0], (moved, collapsed), *rest]


async def promote_first(
    conn: AsyncConnection,
    reader: Reader,
    folded: Folded,
    settings: SearchSettings,
    *,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
) -> Folded:
    """``folded`` with at most one neighbour promoted (see the module docstring): one
    ``sibyl:search.promote`` statement; none when promotion is off or the list is empty."""
    if not folded or not settings.promote:
        return folded
    neighbor = await search_repo.promoted(
        conn,
        reader_params=reader.params(),
        memory=folded[0][0].memory_id,
        arms=promotion_arms(settings.promote_min_weight),
        lifecycles=lifecycles,
        types=types,
        project=project,
    )
    return folded if neighbor is None else promote(folded, neighbor)
