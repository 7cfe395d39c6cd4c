"""Community detection behind the synthetic ``SHARES_COMMUNITY`` hop (rules: relationship-policy,
walk-reference-semantics, communities-follow-readability).

The rules (``docs/communities.md`` argues them):

- **Audiences.** Detection runs separately per audience, never across two: each project's
  ``scope='project'`` memories form one audience (labelled by the project id), the org's
  ``scope='org'`` memories another (labelled ``org``; a project whose id is literally ``org`` is
  labelled ``project=org``, a label no id can take). Private memories never take part, and neither
  do retired ones (rule: retired-not-walked). Every memory of one audience is readable by
  exactly the same readers (rule: readable-project-set), so a community, and every link that formed
  it, is readable by anyone who can read one of its members.
- **Graph.** Per audience, an undirected weighted graph: one node per memory with a link to
  another memory of its audience; the weight of a pair is the number of stored edges (any
  relationship, either direction) plus mentions (either direction) between them. Self-links are
  ignored. Nodes and edges are inserted in id order, so a run is reproducible.
- **Algorithm.** Louvain modularity optimisation (``networkx.community.louvain_communities``)
  with resolution :data:`RESOLUTION`, threshold :data:`THRESHOLD` and fixed seed :data:`SEED`:
  the same graph always gives the same communities.
- **Storage.** Only communities of :data:`MIN_SIZE` or more members are stored. Within an
  audience they are numbered from 1 in the order of their smallest member id, and named
  ``community_<audience>_<nnnn>`` (four digits at least). A rebuild replaces all of an org's
  communities in the caller's transaction.

The walk reads the stored tables and applies the read rule, lifecycle and project confinement to
every member it returns, so a community that has gone stale (a member retired or made private
since the last rebuild) still never shows an unreadable memory.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import causes
from app.repo import communities as repo

ORG_AUDIENCE = "org"
RESOLUTION = 1.0
THRESHOLD = 1e-7
SEED = 20240606
MIN_SIZE = 2


def audience_of(scope: str, project_id: str | None, lifecycle: str) -> str | None:
    """The audience label of a memory with this ``scope``, ``project_id`` and ``lifecycle``;
    None when it takes no part in detection (private or retired memories, anything malformed)."""
    if lifecycle == "retired":
        return None
    if scope == "org" and project_id is None:
        return ORG_AUDIENCE
    if scope == "project" and project_id is not None:
        return project_id if project_id != ORG_AUDIENCE else f"project={project_id}"
    return None


def community_id(audience: str, n: int) -> str:
    """The stored id of the ``n``-th (1-based) community of ``audience``."""
    return f"community_{audience}_{n:04d}"


@dataclass(frozen=True)
class AudienceSummary:
    """What detection found in one audience."""

    audience: str
    memories: int  # nodes: memories with at least one link inside the audience
    links: int  # distinct linked pairs
    communities: int  # stored (size >= MIN_SIZE)
    modularity: float | None  # of the full Louvain partition; None without links


@dataclass(frozen=True)
class Detection:
    """The result of :func:`detect`: communities to store, per-audience and overall figures."""

    communities: list[repo.CommunityRow]
    audiences: list[AudienceSummary]
    modularity: float | None  # of the union of all audience partitions on the union graph


@dataclass(frozen=True)
class RebuildSummary:
    """The outcome of one org's rebuild (printed by ``sibyl-pg communities rebuild``)."""

    org_id: str
    count: int
    members: int
    size_min: int | None
    size_median: float | None
    size_max: int | None
    modularity: float | None
    seconds: float
    audiences: list[AudienceSummary] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "org_id": self.org_id,
            "count": self.count,
            "members": self.members,
            "sizes": {"min": self.size_min, "median": self.size_median, "max": self.size_max},
            "modularity": self.modularity,
            "seconds": round(self.seconds, 3),
            "audiences": [vars(a) for a in self.audiences],
        }

    def render(self) -> str:
        """A few human-readable lines."""

        def mod(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.4f}"

        sizes = (
            f"sizes min {self.size_min} / median {self.size_median:g} / max {self.size_max}"
            if self.count
            else "sizes n/a"
        )
        lines = [
            f"{self.org_id}: {self.count} communities, {self.members} members, {sizes}, "
            f"modularity {mod(self.modularity)}, {self.seconds:.2f}s"
        ]
        lines += [
            f"  {a.audience}: {a.communities} communities over {a.memories} linked memories "
            f"({a.links} linked pairs), modularity {mod(a.modularity)}"
            for a in self.audiences
        ]
        return "\n".join(lines)


def _graphs(
    memories: Iterable[repo.MemoryRow], links: Iterable[tuple[str, str]]
) -> dict[str, nx.Graph]:
    """One weighted undirected graph per audience; links across audiences are dropped."""
    label = {m.id: audience_of(m.scope, m.project_id, m.lifecycle) for m in memories}
    weights: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for src_id, dst_id in links:
        src, dst = label.get(src_id), label.get(dst_id)
        if src is None or src != dst or src_id == dst_id:
            continue
        a, b = sorted((src_id, dst_id))
        weights[src][(a, b)] += 1
    graphs: dict[str, nx.Graph] = {}
    for audience in sorted(weights):
        pairs = weights[audience]
        g = nx.Graph()
        g.add_nodes_from(sorted({n for pair in pairs for n in pair}))
        g.add_weighted_edges_from((a, b, float(w)) for (a, b), w in sorted(pairs.items()))
        graphs[audience] = g
    return graphs


def _modularity(g: nx.Graph, partition: list[set[str]]) -> float | None:
    if g.number_of_edges() == 0:
        return None
    return float(nx.community.modularity(g, partition, weight="weight", resolution=RESOLUTION))


def detect(memories: Iterable[repo.MemoryRow], links: Iterable[tuple[str, str]]) -> Detection:
    """Detect communities among ``memories`` linked by ``links`` (``(src_id, dst_id)`` pairs, one
    per stored edge or mention), audience by audience; pure, no database.

    A link counts only when both ends are ``memories`` of one audience (:func:`audience_of`): a
    link to a private, retired or unknown memory, or across audiences, is ignored. Returns the
    communities of at least :data:`MIN_SIZE` members (members in id order, communities named by
    :func:`community_id`), per-audience figures and the overall modularity.
    """
    graphs = _graphs(memories, links)
    rows: list[repo.CommunityRow] = []
    summaries: list[AudienceSummary] = []
    union_graph = nx.Graph()
    union_partition: list[set[str]] = []
    for audience, g in graphs.items():
        partition = nx.community.louvain_communities(
            g, weight="weight", resolution=RESOLUTION, threshold=THRESHOLD, seed=SEED
        )
        kept = sorted(
            (tuple(sorted(c)) for c in partition if len(c) >= MIN_SIZE), key=lambda m: m[0]
        )
        rows += [
            repo.CommunityRow(id=community_id(audience, n), audience=audience, members=members)
            for n, members in enumerate(kept, start=1)
        ]
        summaries.append(
            AudienceSummary(
                audience=audience,
                memories=g.number_of_nodes(),
                links=g.number_of_edges(),
                communities=len(kept),
                modularity=_modularity(g, partition),
            )
        )
        union_graph.update(g)
        union_partition += [set(c) for c in partition]
    return Detection(
        communities=rows, audiences=summaries, modularity=_modularity(union_graph, union_partition)
    )


class CommunitiesChanged(Exception):
    """A write changed the org's communities while a rebuild read and detected them: the
    rebuild replaced nothing (the org stays due; run it again)."""


LOCK_WAIT_MS = 1_000
"""How long a rebuild waits for the writes holding the org's community lock (a long import
holds it to its commit); past it, it gives up like an overtaken rebuild. Later retiring writes
queue behind a waiting rebuild, so this is also the longest they wait for it to get the lock."""


async def _lock(conn: AsyncConnection, org_id: str) -> None:
    """The org's community lock, or :class:`CommunitiesChanged` after :data:`LOCK_WAIT_MS`."""
    try:
        await repo.lock_org(conn, org_id=org_id, wait_ms=LOCK_WAIT_MS)
    except DBAPIError as error:
        if not any(getattr(seen, "sqlstate", None) == "55P03" for seen in causes(error)):
            raise
        raise CommunitiesChanged(org_id) from None


async def rebuild(
    conn: AsyncConnection, *, org_id: str, hold_writes: bool = False
) -> RebuildSummary:
    """Recompute and replace every community of ``org_id`` in the caller's transaction (READ
    COMMITTED, as :func:`app.core.db.write_tx`).

    Reads the org's retirement records, memories and links without holding writes back, runs
    :func:`detect` in a worker thread, then takes the org's community lock (retiring writes
    wait from here to the commit) and stores the result, unless a retirement was recorded since
    it began: then it raises :class:`CommunitiesChanged` and the caller rolls back (a write's
    change may be missing from what was read). On success the records it saw are deleted: the
    org is no longer due. An org without links (or an unknown org id) ends with no communities.
    A lock held by writes for more than :data:`LOCK_WAIT_MS` raises :class:`CommunitiesChanged`
    too (the caller rolls back; the org stays due).

    ``hold_writes``: take the lock first instead, so the writes that would retire communities
    wait for the whole rebuild (it cannot be overtaken): for an org whose writes never leave a
    rebuild a gap (a breaker's 20 writes a second kept its communities retired for as long).
    """
    started = time.perf_counter()
    if hold_writes:
        await _lock(conn, org_id)
    seen = await repo.retirements(conn, org_id=org_id)
    memories = await repo.memories(conn, org_id=org_id)
    links = await repo.links(conn, org_id=org_id)
    found = await asyncio.to_thread(detect, memories, links)  # Louvain: CPU, off the event loop
    if not hold_writes:
        await _lock(conn, org_id)
    if await repo.retired_since(conn, org_id=org_id, seen=seen):
        raise CommunitiesChanged(org_id)
    await repo.replace_communities(conn, org_id=org_id, communities=found.communities)
    await repo.clear_retirements(conn, org_id=org_id, seen=seen)
    sizes = [len(c.members) for c in found.communities]
    return RebuildSummary(
        org_id=org_id,
        count=len(sizes),
        members=sum(sizes),
        size_min=min(sizes) if sizes else None,
        size_median=float(statistics.median(sizes)) if sizes else None,
        size_max=max(sizes) if sizes else None,
        modularity=found.modularity,
        seconds=time.perf_counter() - started,
        audiences=found.audiences,
    )
