"""SQL of the community job (rule: communities-follow-readability): read one org's memories and
links, replace its communities.

This is a batch job run by an operator (``sibyl-pg communities rebuild``), not a read path: it
serves nothing to a reader, so it embeds no read rule. It reads every memory and link of one org;
which of them take part is decided by the rules of :mod:`app.domain.communities` (only links
whose two ends are non-retired, non-private memories of the same audience), and the walk still
applies the read rule to every community member it returns (``docs/communities.md``).

Every statement starts with a constant ``/* sibyl:communities.* */`` comment, binds its values
(arrays, not IN-lists) and is bounded by ``org_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.housekeeping import FLUSH_STATISTICS_SQL

# Two plain scans bounded by org_id, one table each: no join for a planner to get wrong on a
# freshly imported org (stale statistics once turned a joined version into a 2 s nested loop).
MEMORIES_SQL = text(
    """/* sibyl:communities.memories */
SELECT id, scope, project_id, lifecycle FROM entities WHERE org_id = :org"""
)

LINKS_SQL = text(
    """/* sibyl:communities.links */
SELECT src_id, dst_id FROM edges WHERE org_id = :org AND src_id <> dst_id
UNION ALL
SELECT src_id, dst_id FROM mentions WHERE org_id = :org AND src_id <> dst_id"""
)

# The org's community lock, EXCLUSIVE: one rebuild's replacement at a time, and retiring writes
# (which take it SHARED, sibyl:communities.mark*) wait for it to commit.
LOCK_SQL = text(
    """/* sibyl:communities.lock */
SELECT pg_advisory_xact_lock(hashtextextended('sibyl:communities:' || CAST(:org AS text), 0))"""
)

DELETE_MEMBERS_SQL = text(
    """/* sibyl:communities.delete_members */
DELETE FROM community_members WHERE org_id = :org"""
)

DELETE_COMMUNITIES_SQL = text(
    """/* sibyl:communities.delete */
DELETE FROM communities WHERE org_id = :org"""
)

INSERT_COMMUNITIES_SQL = text(
    """/* sibyl:communities.insert */
INSERT INTO communities (org_id, id, audience, size)
SELECT :org, c.id, c.audience, c.size
FROM unnest(CAST(:ids AS text[]), CAST(:audiences AS text[]), CAST(:sizes AS integer[]))
     AS c(id, audience, size)"""
)

INSERT_MEMBERS_SQL = text(
    """/* sibyl:communities.insert_members */
INSERT INTO community_members (org_id, community_id, entity_id)
SELECT :org, m.community_id, m.entity_id
FROM unnest(CAST(:community_ids AS text[]), CAST(:entity_ids AS text[]))
     AS m(community_id, entity_id)"""
)

# A write made these communities stale (rule: communities-follow-readability): they go, members with
# them (cascade).
RETIRE_SQL = text(
    """/* sibyl:communities.retire */
DELETE FROM communities c
WHERE c.org_id = :org
  AND c.id IN (SELECT m.community_id FROM community_members m
               WHERE m.org_id = :org AND m.entity_id = ANY(CAST(:ids AS text[])))"""
)

# The ends of the links :srcs -> :dsts (l.src, l.dst: memories a, b), and the condition that a
# link joins two memories of one audience, the links detection uses (docs/communities.md §2:
# both project-scoped in the same project, or both org-scoped; neither retired): shared by
# sibyl:communities.retire_links and sibyl:communities.mark_links.
_LINK_ENDS = """unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS l(src, dst)
    JOIN entities a ON a.org_id = :org AND a.id = l.src
    JOIN entities b ON b.org_id = :org AND b.id = l.dst"""
_SAME_AUDIENCE = """a.scope = b.scope AND a.scope IN ('project', 'org')
      AND (a.scope = 'org' OR a.project_id = b.project_id)
      AND a.lifecycle <> 'retired' AND b.lifecycle <> 'retired'"""

# A link takes part in detection only when its two ends lie in one audience (docs/communities.md
# §2: both project-scoped in the same project, or both org-scoped; neither retired). A link with
# a private, retired or other-audience end never formed a community, so writing or removing it
# retires none: a reader never sees a community vanish because of a memory it cannot read.
RETIRE_LINKS_SQL = text(
    f"""/* sibyl:communities.retire_links */
DELETE FROM communities c
WHERE c.org_id = :org
  AND c.id IN (
    SELECT m.community_id
    FROM {_LINK_ENDS}
    JOIN community_members m ON m.org_id = :org AND m.entity_id IN (l.src, l.dst)
    WHERE {_SAME_AUDIENCE})"""
)

# A memory that moved (scope, project or lifecycle): its links now count in its new audience and
# no longer in its old one, so the communities of its linked memories in either audience may have
# changed. Called once per audience (a private or retired placement has none).
RETIRE_NEIGHBOURS_SQL = text(
    """/* sibyl:communities.retire_neighbours */
DELETE FROM communities c
WHERE c.org_id = :org
  AND c.id IN (
    SELECT m.community_id
    FROM (SELECT e.dst_id AS id FROM edges e WHERE e.org_id = :org AND e.src_id = :id
          UNION SELECT e.src_id FROM edges e WHERE e.org_id = :org AND e.dst_id = :id
          UNION SELECT x.dst_id FROM mentions x WHERE x.org_id = :org AND x.src_id = :id
          UNION SELECT x.src_id FROM mentions x WHERE x.org_id = :org AND x.dst_id = :id) l
    JOIN entities b ON b.org_id = :org AND b.id = l.id
    JOIN community_members m ON m.org_id = :org AND m.entity_id = l.id
    WHERE b.lifecycle <> 'retired' AND b.scope = :scope
      AND (b.scope = 'org' OR b.project_id = :project))"""
)

# A write that retires (or may change) an org's communities records it (migration 0010), under
# the org's community lock in SHARED mode, as a statement of its own before it deletes any
# community: a rebuild replaces the org's communities under the same lock in EXCLUSIVE mode, and
# only when no record appeared since it began reading (docs/communities.md, "Rebuilt
# automatically"). So a write either waits for a rebuild's replacement and then deletes what it
# made stale, or commits its record first and the rebuild gives up (the org stays due).
_LOCK_SHARED = (
    "pg_advisory_xact_lock_shared(hashtextextended('sibyl:communities:' || CAST(:org AS text), 0))"
)
MARK_SQL = text(
    f"""/* sibyl:communities.mark */
INSERT INTO community_retirements (org_id)
SELECT :org FROM (SELECT {_LOCK_SHARED}) l"""
)

# The same, only when one of the memories takes part in detection (project or org scope, not
# retired) or sits in a community: deleting a private memory changes no community.
MARK_ENTITIES_SQL = text(
    f"""/* sibyl:communities.mark_entities */
INSERT INTO community_retirements (org_id)
SELECT :org FROM (SELECT {_LOCK_SHARED}) l
WHERE EXISTS (SELECT 1 FROM entities e
              WHERE e.org_id = :org AND e.id = ANY(CAST(:ids AS text[]))
                AND e.scope IN ('project', 'org') AND e.lifecycle <> 'retired')
   OR EXISTS (SELECT 1 FROM community_members m
              WHERE m.org_id = :org AND m.entity_id = ANY(CAST(:ids AS text[])))"""
)

# The same, only when a link of the pairs joins two memories of one audience (the links
# detection uses; sibyl:communities.retire_links): a link with a private end changes none.
MARK_LINKS_SQL = text(
    f"""/* sibyl:communities.mark_links */
INSERT INTO community_retirements (org_id)
SELECT :org FROM (SELECT {_LOCK_SHARED}) lk
WHERE EXISTS (SELECT 1 FROM {_LINK_ENDS} WHERE {_SAME_AUDIENCE})"""
)

RETIREMENTS_SQL = text(
    """/* sibyl:communities.retirements */
SELECT seq FROM community_retirements WHERE org_id = :org"""
)

# Under the exclusive lock, in a fresh snapshot: a record the rebuild did not see when it began
# (a write that committed, or was still running, while it read and detected).
RETIRED_SINCE_SQL = text(
    """/* sibyl:communities.retired_since */
SELECT EXISTS (SELECT 1 FROM community_retirements
               WHERE org_id = :org AND seq <> ALL(CAST(:seen AS bigint[])))"""
)

CLEAR_RETIREMENTS_SQL = text(
    """/* sibyl:communities.clear_retirements */
DELETE FROM community_retirements WHERE org_id = :org AND seq = ANY(CAST(:seen AS bigint[]))"""
)

DUE_ORGS_SQL = text(
    """/* sibyl:communities.due_orgs */
SELECT org_id, extract(epoch FROM clock_timestamp() - min(retired_at)) AS waited_s
FROM community_retirements GROUP BY org_id ORDER BY org_id"""
)

LINK_COUNT_SQL = text(
    """/* sibyl:communities.link_count */
SELECT (SELECT count(*) FROM edges WHERE org_id = :org)
     + (SELECT count(*) FROM mentions WHERE org_id = :org) AS links"""
)

HAS_COMMUNITIES_SQL = text(
    """/* sibyl:communities.any */
SELECT EXISTS (SELECT 1 FROM communities WHERE org_id = :org)"""
)

# After a rebuild (a bulk rewrite of both tables): fresh statistics and visibility map, since the
# servers may run without autovacuum; VACUUM cannot run inside a transaction block.
VACUUM_SQL = text("/* sibyl:communities.vacuum */ VACUUM (ANALYZE) communities, community_members")

ORG_IDS_SQL = text(
    """/* sibyl:communities.orgs */
SELECT id FROM orgs ORDER BY id"""
)


@dataclass(frozen=True)
class MemoryRow:
    """What detection needs to know of one memory: its id, scope, project and lifecycle."""

    id: str
    scope: str
    project_id: str | None
    lifecycle: str


@dataclass(frozen=True)
class CommunityRow:
    """A community to store: its id, audience label and member ids."""

    id: str
    audience: str
    members: tuple[str, ...]


LOCK_WAIT_SQL = text(
    """/* sibyl:communities.lock_wait */
SELECT set_config('lock_timeout', CAST(CAST(:wait_ms AS integer) AS text), true)"""
)


LOCK_WAIT_RESET_SQL = text(
    "/* sibyl:communities.lock_wait_reset */ SET LOCAL lock_timeout TO DEFAULT"
)


async def lock_org(conn: AsyncConnection, *, org_id: str, wait_ms: int | None = None) -> None:
    """Take the org's rebuild lock for the rest of the transaction, waiting at most ``wait_ms``
    (None: as long as it takes) for the writes holding it shared: past it PostgreSQL's lock
    timeout (SQLSTATE 55P03) aborts the transaction. While a rebuild waits for the lock, every
    later write that would take it shared queues behind it, so a rebuild must not wait long
    for a long transaction (an import) that holds it."""
    if wait_ms is None:
        await conn.execute(LOCK_SQL, {"org": org_id})
        return
    await conn.execute(LOCK_WAIT_SQL, {"wait_ms": wait_ms})
    await conn.execute(LOCK_SQL, {"org": org_id})
    await conn.execute(LOCK_WAIT_RESET_SQL)  # the rest of the transaction waits as configured


async def memories(conn: AsyncConnection, *, org_id: str) -> list[MemoryRow]:
    """Every memory of ``org_id`` (passages are not memories), in no particular order."""
    rows = await conn.execute(MEMORIES_SQL, {"org": org_id})
    return [MemoryRow(r.id, r.scope, r.project_id, r.lifecycle) for r in rows]


async def links(conn: AsyncConnection, *, org_id: str) -> list[tuple[str, str]]:
    """Every stored edge and mention of ``org_id`` as ``(src_id, dst_id)``, self-links left out
    (one pair per stored row: two relationships between the same ends give two pairs)."""
    return [(r.src_id, r.dst_id) for r in await conn.execute(LINKS_SQL, {"org": org_id})]


async def replace_communities(
    conn: AsyncConnection, *, org_id: str, communities: Sequence[CommunityRow]
) -> None:
    """Delete every community of ``org_id`` and insert ``communities`` (in the caller's
    transaction, so readers see the old set or the new one, never a mix)."""
    await conn.execute(DELETE_MEMBERS_SQL, {"org": org_id})
    await conn.execute(DELETE_COMMUNITIES_SQL, {"org": org_id})
    if not communities:
        return
    await conn.execute(
        INSERT_COMMUNITIES_SQL,
        {
            "org": org_id,
            "ids": [c.id for c in communities],
            "audiences": [c.audience for c in communities],
            "sizes": [len(c.members) for c in communities],
        },
    )
    await conn.execute(
        INSERT_MEMBERS_SQL,
        {
            "org": org_id,
            "community_ids": [c.id for c in communities for _ in c.members],
            "entity_ids": [m for c in communities for m in c.members],
        },
    )


async def org_ids(conn: AsyncConnection) -> list[str]:
    """Every org id, in id order."""
    return [r.id for r in await conn.execute(ORG_IDS_SQL)]


async def mark(conn: AsyncConnection, *, org_id: str) -> None:
    """Record that this transaction may change ``org_id``'s communities (:data:`MARK_SQL`):
    the org is due a rebuild, and a rebuild replacing them now gives up."""
    await conn.execute(MARK_SQL, {"org": org_id})


async def retire(conn: AsyncConnection, *, org_id: str, entity_ids: Sequence[str]) -> int:
    """Delete every community of ``org_id`` with a member among ``entity_ids`` (their
    memberships go with them), recorded first (:data:`MARK_ENTITIES_SQL`); return how many
    were deleted."""
    await conn.execute(MARK_ENTITIES_SQL, {"org": org_id, "ids": list(entity_ids)})
    result = await conn.execute(RETIRE_SQL, {"org": org_id, "ids": list(entity_ids)})
    return int(result.rowcount or 0)


async def retire_links(
    conn: AsyncConnection, *, org_id: str, pairs: Sequence[tuple[str, str]]
) -> int:
    """Delete every community of ``org_id`` with a member at either end of a link of ``pairs``
    (source, target) whose two ends lie in one audience (:data:`RETIRE_LINKS_SQL`); return how
    many were deleted."""
    if not pairs:
        return 0
    params = {"org": org_id, "srcs": [a for a, _ in pairs], "dsts": [b for _, b in pairs]}
    await conn.execute(MARK_LINKS_SQL, params)
    result = await conn.execute(RETIRE_LINKS_SQL, params)
    return int(result.rowcount or 0)


async def retire_neighbours(
    conn: AsyncConnection,
    *,
    org_id: str,
    entity_id: str,
    scope: str,
    project_id: str | None,
    lifecycle: str,
) -> int:
    """Delete every community of ``org_id`` holding a memory linked to ``entity_id`` (either
    way) that lies in the audience of the placement (``scope``, ``project_id``, ``lifecycle``):
    none for a private or retired placement (:data:`RETIRE_NEIGHBOURS_SQL`)."""
    if scope not in ("project", "org") or lifecycle == "retired":
        return 0
    await mark(conn, org_id=org_id)
    params = {"org": org_id, "id": entity_id, "scope": scope, "project": project_id}
    result = await conn.execute(RETIRE_NEIGHBOURS_SQL, params)
    return int(result.rowcount or 0)


async def has_communities(conn: AsyncConnection, *, org_id: str) -> bool:
    """True when ``org_id`` has any community (a bulk write skips retiring otherwise)."""
    return bool((await conn.execute(HAS_COMMUNITIES_SQL, {"org": org_id})).scalar())


async def vacuum(conn: AsyncConnection) -> None:
    """``VACUUM (ANALYZE)`` the community tables; ``conn`` must be in autocommit mode (and be
    the connection that wrote them: its pending row counts are flushed first, see
    :data:`app.repo.housekeeping.FLUSH_STATISTICS_SQL`)."""
    await conn.execute(text(FLUSH_STATISTICS_SQL))
    await conn.execute(VACUUM_SQL)


async def retirements(conn: AsyncConnection, *, org_id: str) -> list[int]:
    """The records of ``org_id``'s retirements committed so far (a rebuild's starting point)."""
    return [int(r.seq) for r in await conn.execute(RETIREMENTS_SQL, {"org": org_id})]


async def retired_since(conn: AsyncConnection, *, org_id: str, seen: Sequence[int]) -> bool:
    """Whether a retirement of ``org_id`` other than ``seen`` is recorded (call it holding the
    org's lock, :func:`lock_org`, in a READ COMMITTED transaction: a fresh snapshot)."""
    params = {"org": org_id, "seen": list(seen)}
    return bool((await conn.execute(RETIRED_SINCE_SQL, params)).scalar())


async def clear_retirements(conn: AsyncConnection, *, org_id: str, seen: Sequence[int]) -> None:
    """Delete the records ``seen`` of ``org_id`` (a rebuild that saw them replaced the org's
    communities)."""
    if seen:
        await conn.execute(CLEAR_RETIREMENTS_SQL, {"org": org_id, "seen": list(seen)})


async def due_orgs(conn: AsyncConnection) -> dict[str, float]:
    """The orgs with a retirement recorded since their last rebuild, by id, each with how long
    (seconds) its oldest such record has waited."""
    return {r.org_id: float(r.waited_s) for r in await conn.execute(DUE_ORGS_SQL)}


async def link_count(conn: AsyncConnection, *, org_id: str) -> int:
    """The stored edges and mentions of ``org_id`` (what detection reads)."""
    return int((await conn.execute(LINK_COUNT_SQL, {"org": org_id})).scalar() or 0)
