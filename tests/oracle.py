"""Reference oracle for ``expand_neighbors`` (CONTRACT.md §2, §4, §5).

This module is a plain-Python, deliberately naive implementation of the contract's *reference
semantics* for the walk. The service computes the same answer with a recursive CTE in PostgreSQL;
the tests load a random :class:`Graph` into the database, run both, and compare field by field.

It is written from the contract alone (never from ``app/``) and optimises for being obviously
right, not fast: it materialises every allowed hop of the whole graph, runs a textbook
breadth-first search over it, then picks each node's best hop by sorting.

Public API:

- data model: :class:`Ent`, :class:`Passage`, :class:`Graph`, :class:`Reader`;
- §2: :func:`readable_projects`, :func:`readable`;
- §4: :data:`WEIGHTS`, :func:`weight`, :func:`score`, :func:`follows`;
- §5: :func:`normalize_seeds`, :func:`expand`;
- generators for property tests: :func:`random_graph`, :func:`random_request`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# ---------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------


@dataclass
class Ent:
    """One memory (entity)."""

    id: str
    type: str
    name: str
    content: str
    scope: str  # 'project' | 'private' | 'org'
    project_id: str | None
    owner_id: str | None
    lifecycle: str  # 'active' | 'superseded' | 'retired'


@dataclass
class Passage:
    """One span of a parent memory, linked ``passage -link-> parent``."""

    id: str
    parent_id: str
    index: int
    link: str  # 'PART_OF' | 'DERIVED_FROM'
    content: str


@dataclass
class Graph:
    """Everything one org holds, in the shape the DB loader inserts."""

    org_id: str
    users: dict[str, str]  # user_id -> org role: owner|admin|member|viewer
    projects: dict[str, str]  # project_id -> visibility: private|org
    members: dict[tuple[str, str], str]  # (project_id, user_id) -> project role
    entities: dict[str, Ent]
    grants: set[tuple[str, str]]  # (entity_id, user_id)
    edges: set[tuple[str, str, str]]  # (src_id, relationship, dst_id)
    mentions: set[tuple[str, str]]  # (src_id, dst_id)
    passages: dict[str, Passage]
    communities: dict[str, list[str]] = field(default_factory=dict)  # id -> member entity ids


@dataclass(frozen=True)
class Reader:
    """The principal of a request: a user through an API key (optionally project-restricted)."""

    user_id: str
    key_projects: tuple[str, ...] | None = None  # None = key not restricted


# ---------------------------------------------------------------------------------------------
# §2 the read rule
# ---------------------------------------------------------------------------------------------

ORG_ROLES = ("owner", "admin", "member", "viewer")
PROJECT_ROLES = ("viewer", "contributor", "maintainer", "owner")


def readable_projects(g: Graph, reader: Reader) -> set[str]:
    """The reader's readable project set (§2).

    Org-visible projects, plus projects the user is a member of (any role), plus every project
    for org owners/admins; intersected with the key's project list when the key is restricted.
    A user who is not in the org reads no project at all.
    """
    role = g.users.get(reader.user_id)
    if role is None:
        return set()
    if role in ("owner", "admin"):
        base = set(g.projects)
    else:
        base = {p for p, vis in g.projects.items() if vis == "org"}
        base |= {p for (p, u) in g.members if u == reader.user_id and p in g.projects}
    if reader.key_projects is not None:
        base &= set(reader.key_projects)
    return base


def _entity_readable(g: Graph, reader: Reader, ent: Ent, projects: set[str]) -> bool:
    """§2 for one entity, given the reader's readable project set."""
    if reader.user_id not in g.users:
        return False  # not a member of this org: sees nothing
    if reader.key_projects is not None and (
        ent.project_id is None or ent.project_id not in projects
    ):
        return False  # a restricted key reads only rows inside its (readable) projects
    if ent.scope == "project":
        return ent.project_id is not None and ent.project_id in projects
    if ent.scope == "private":
        authorized = ent.owner_id == reader.user_id or (ent.id, reader.user_id) in g.grants
        return authorized and (ent.project_id is None or ent.project_id in projects)
    return ent.scope == "org"  # an unknown scope fails closed


def readable(g: Graph, reader: Reader, node_id: str) -> bool:
    """Whether ``node_id`` (an entity or a passage) is readable by ``reader`` (§2).

    A passage is exactly as readable as its parent. Absent ids are not readable. Lifecycle plays
    no part here (retired rows are handled by the walk, §5).
    """
    projects = readable_projects(g, reader)
    if node_id in g.entities:
        return _entity_readable(g, reader, g.entities[node_id], projects)
    if node_id in g.passages:
        parent = g.entities.get(g.passages[node_id].parent_id)
        return parent is not None and _entity_readable(g, reader, parent, projects)
    return False


# ---------------------------------------------------------------------------------------------
# §4 relationship policy
# ---------------------------------------------------------------------------------------------

UNKNOWN_WEIGHT = 0.64
DECAY = 0.72
SHARES_COMMUNITY = "SHARES_COMMUNITY"
MENTIONS = "MENTIONS"
SUPERSEDES = "SUPERSEDES"

WEIGHTS: dict[str, float] = {
    "DECIDES": 1.00,
    "DEPENDS_ON": 0.98,
    "REQUIRES": 0.98,
    "BLOCKS": 0.96,
    "SUPERSEDES": 0.95,
    "SUPPORTS": 0.94,
    "VALIDATED_BY": 0.94,
    "USES_PROCEDURE": 0.92,
    "IMPLEMENTED": 0.90,
    "ENCOUNTERED": 0.86,
    "REFERENCES": 0.86,
    "PRODUCES": 0.82,
    "TOUCHES": 0.82,
    "ABOUT": 0.78,
    "SHARES_COMMUNITY": 0.74,
    "BELONGS_TO": 0.72,
    "CONTAINS": 0.72,
    "DERIVED_FROM": 0.70,
    "DOCUMENTED_IN": 0.66,
    "CONTRADICTS": 0.64,
    "RELATED_TO": 0.64,
    "PART_OF": 0.64,
    "MENTIONS": 0.58,
}

#: Relationships followed in the outgoing direction only (never as an incoming hop).
OUTGOING_ONLY = frozenset({"DECIDES", "REQUIRES", "SUPPORTS"})

#: Every stored-edge relationship of §4 (SHARES_COMMUNITY is synthetic, MENTIONS has its table).
STORED_RELATIONSHIPS: tuple[str, ...] = tuple(
    r for r in WEIGHTS if r not in (SHARES_COMMUNITY, MENTIONS)
)

Direction = Literal["outgoing", "incoming"]


def weight(rel: str) -> float:
    """W[rel] from §4; unknown relationships weigh 0.64."""
    return WEIGHTS.get(rel, UNKNOWN_WEIGHT)


def score(rel: str, distance: int) -> float:
    """score(rel, d) = clamp(W[rel] * 0.72 ** (d - 1), 0.1, 1.0), as a Python float."""
    return min(max(weight(rel) * DECAY ** (distance - 1), 0.1), 1.0)


def follows(rel: str, direction: Direction, relationship_types: frozenset[str] | None) -> bool:
    """Whether a hop over ``rel`` in ``direction`` is allowed (§4 table + §5 filter).

    ``relationship_types`` is the already upper-cased filter, or None when not given. This does
    not look at ``include_incoming``; the caller drops incoming hops when it is false.
    """
    if relationship_types is not None and rel not in relationship_types:
        return False
    if direction == "incoming":
        return rel not in OUTGOING_ONLY
    if rel == SUPERSEDES:
        return relationship_types is not None  # outgoing only when the filter names it
    return True


# ---------------------------------------------------------------------------------------------
# §5 expand_neighbors
# ---------------------------------------------------------------------------------------------

ORIGIN_LIMIT = 8


@dataclass(frozen=True)
class Hop:
    """One allowed hop ``src -> dst`` of the walk graph."""

    src: str
    dst: str
    rel: str
    direction: Direction


def normalize_seeds(entity_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Strip, drop exact duplicates keeping order; split into (walked, overflow) at 8.

    Raises ValueError on an empty list or a blank id (the service answers 400 there).
    """
    if not entity_ids:
        raise ValueError("entity_ids must not be empty")
    seen: set[str] = set()
    ordered: list[str] = []
    for raw in entity_ids:
        sid = raw.strip()
        if not sid:
            raise ValueError("blank entity id")
        if sid not in seen:
            seen.add(sid)
            ordered.append(sid)
    return ordered[:ORIGIN_LIMIT], ordered[ORIGIN_LIMIT:]


def _node_project(g: Graph, node_id: str) -> str | None:
    """project_id of an entity, or of a passage's parent."""
    if node_id in g.entities:
        return g.entities[node_id].project_id
    return g.entities[g.passages[node_id].parent_id].project_id


def _node_lifecycle(g: Graph, node_id: str) -> str:
    """Lifecycle of an entity, or of a passage's parent."""
    if node_id in g.entities:
        return g.entities[node_id].lifecycle
    return g.entities[g.passages[node_id].parent_id].lifecycle


def _node_type(g: Graph, node_id: str) -> str:
    """Entity type, or ``passage`` for a passage."""
    return g.entities[node_id].type if node_id in g.entities else "passage"


def walkable_nodes(g: Graph, reader: Reader, project: str | None) -> set[str]:
    """Nodes the walk may visit: readable, not retired, and inside ``project`` when named."""
    nodes: set[str] = set()
    for node_id in [*g.entities, *g.passages]:
        if node_id in g.passages and g.passages[node_id].parent_id not in g.entities:
            continue  # orphan passage: treated as absent
        if not readable(g, reader, node_id):
            continue
        if _node_lifecycle(g, node_id) == "retired":
            continue
        if project is not None and _node_project(g, node_id) != project:
            continue
        nodes.add(node_id)
    return nodes


def allowed_hops(
    g: Graph,
    nodes: set[str],
    seeds: Iterable[str],
    *,
    include_incoming: bool,
    relationship_types: frozenset[str] | None,
) -> set[Hop]:
    """Every allowed hop whose both ends are in ``nodes`` (§5 reference semantics)."""
    # Directed links: (src, rel, dst) from stored edges, mentions and passage links.
    links: list[tuple[str, str, str]] = list(g.edges)
    links += [(s, MENTIONS, d) for (s, d) in g.mentions]
    links += [(p.id, p.link, p.parent_id) for p in g.passages.values()]

    hops: set[Hop] = set()
    for src, rel, dst in links:
        if src not in nodes or dst not in nodes:
            continue
        if follows(rel, "outgoing", relationship_types):
            hops.add(Hop(src, dst, rel, "outgoing"))
        if include_incoming and follows(rel, "incoming", relationship_types):
            if src in g.passages and relationship_types is None:
                # §5 (revised): a memory -> its own passages hop only when relationship_types
                # names PART_OF or DERIVED_FROM (follows() checked the name is in the filter).
                continue
            hops.add(Hop(dst, src, rel, "incoming"))

    # Community co-membership: a synthetic first hop, from a seed only.
    if relationship_types is None or SHARES_COMMUNITY in relationship_types:
        for seed in seeds:
            for members in g.communities.values():
                if seed not in members:
                    continue
                for other in members:
                    if other != seed and other in nodes:
                        hops.add(Hop(seed, other, SHARES_COMMUNITY, "outgoing"))
    return hops


def _neighbor(g: Graph, node_id: str, hop: Hop, distance: int) -> dict[str, Any]:
    """The compared fields of one neighbor row."""
    passage = g.passages.get(node_id)
    return {
        "id": node_id,
        "type": _node_type(g, node_id),
        "relationship": hop.rel,
        "direction": hop.direction,
        "distance": distance,
        "score": score(hop.rel, distance),
        "parent_entity_id": passage.parent_id if passage else None,
        "passage_index": passage.index if passage else None,
        "project_id": _node_project(g, node_id),
        "lifecycle": _node_lifecycle(g, node_id),
        # The community a SHARES_COMMUNITY hop went through: the smallest one shared with the
        # predecessor (the service reports it as metadata.community_id).
        "community_id": (
            min(c for c, ms in g.communities.items() if hop.src in ms and node_id in ms)
            if hop.rel == SHARES_COMMUNITY
            else None
        ),
    }


def expand(
    g: Graph,
    reader: Reader,
    entity_ids: Sequence[str],
    *,
    depth: int = 1,
    limit: int = 8,
    include_incoming: bool = True,
    relationship_types: Sequence[str] | None = None,
    types: Sequence[str] | None = None,
    project: str | None = None,
) -> dict[str, Any]:
    """The reference answer of ``expand_neighbors`` (§5).

    ``depth`` and ``limit`` are assumed already clamped. Returns ``origins``, ``unresolved``,
    ``neighbors`` (dicts with id, type, relationship, direction, distance, score,
    parent_entity_id, passage_index, project_id, lifecycle, community_id), ``total`` and
    ``truncated``.
    """
    rel_filter = (
        None if relationship_types is None else frozenset(r.upper() for r in relationship_types)
    )
    type_filter = None if types is None else frozenset(t.lower() for t in types)

    walked, overflow = normalize_seeds(entity_ids)
    nodes = walkable_nodes(g, reader, project)
    # A seed resolves iff it exists, is readable, is not retired and lies in `project`:
    # exactly membership in the walkable node set.
    origins = [s for s in walked if s in nodes]
    unresolved = [s for s in walked if s not in nodes] + overflow
    result: dict[str, Any] = {
        "origins": origins,
        "unresolved": unresolved,
        "neighbors": [],
        "total": 0,
        "truncated": False,
    }
    if not origins:
        return result

    hops = allowed_hops(
        g, nodes, origins, include_incoming=include_incoming, relationship_types=rel_filter
    )

    # Textbook BFS: distance = fewest hops from any seed.
    dist: dict[str, int] = dict.fromkeys(origins, 0)
    frontier = set(origins)
    for d in range(1, depth + 1):
        reached = {h.dst for h in hops if h.src in frontier and h.dst not in dist}
        for node_id in reached:
            dist[node_id] = d
        frontier = reached

    # Best hop from a node at distance - 1: highest score, then relationship name,
    # then outgoing before incoming, then predecessor id.
    rows: list[dict[str, Any]] = []
    for node_id, d in dist.items():
        if d == 0:
            continue
        candidates = [h for h in hops if h.dst == node_id and dist.get(h.src) == d - 1]
        best = min(
            candidates,
            key=lambda h: (
                -score(h.rel, d),
                h.rel,
                0 if h.direction == "outgoing" else 1,
                h.src,
            ),
        )
        row = _neighbor(g, node_id, best, d)
        if type_filter is None or row["type"] in type_filter:
            rows.append(row)

    rows.sort(key=lambda r: (-r["score"], r["distance"], r["id"]))
    result["neighbors"] = rows[:limit]
    result["total"] = len(result["neighbors"])
    result["truncated"] = len(rows) > limit
    return result


# ---------------------------------------------------------------------------------------------
# Random graphs and requests for property tests
# ---------------------------------------------------------------------------------------------

ENTITY_TYPES = ("decision", "task", "note", "artifact", "document", "observation", "plan")
UNKNOWN_RELATIONSHIP = "FOLLOWS_UP"
EDGE_RELATIONSHIPS: tuple[str, ...] = (*STORED_RELATIONSHIPS, UNKNOWN_RELATIONSHIP)

#: Ids that are prefixes of each other and sort differently under C and natural-language
#: collations (punctuation, case).
PREFIX_IDS = ("a", "a-b", "ab", "a_b", "A", "a.b", "a:b", "a-", "aB", "b", "B", "a-b-c", "abc")


def random_graph(
    rng: random.Random,
    *,
    n_entities: int | None = None,
    n_users: int | None = None,
    n_projects: int | None = None,
    org_id: str = "org_oracle",
) -> tuple[Graph, list[Reader]]:
    """A small random org graph (5-30 entities) that stresses §2/§4/§5, plus readers for it.

    Every quantity not given is drawn from ``rng``; the same seed always yields the same graph.
    """
    n_entities = n_entities if n_entities is not None else rng.randint(5, 30)
    n_users = n_users if n_users is not None else rng.randint(2, 5)
    n_projects = n_projects if n_projects is not None else rng.randint(1, 4)

    # Users: make sure every org role is drawn often enough across graphs.
    user_ids = [f"user_{i}" for i in range(n_users)]
    roles = list(ORG_ROLES)
    rng.shuffle(roles)
    users = {
        u: (roles[i] if i < len(roles) and rng.random() < 0.7 else rng.choice(ORG_ROLES))
        for i, u in enumerate(user_ids)
    }

    projects = {f"proj_{i}": rng.choice(("private", "org")) for i in range(n_projects)}
    project_ids = sorted(projects)

    members: dict[tuple[str, str], str] = {}
    for p in project_ids:
        for u in user_ids:
            if rng.random() < 0.4:
                members[(p, u)] = rng.choice(PROJECT_ROLES)

    # Entity ids: a few prefix-family ids, the rest "<type>_<hex>"-like.
    n_prefix = rng.randint(0, min(len(PREFIX_IDS), n_entities))
    ids = rng.sample(PREFIX_IDS, n_prefix)
    while len(ids) < n_entities:
        candidate = f"{rng.choice(ENTITY_TYPES)}_{rng.getrandbits(24):06x}"
        if candidate not in ids:
            ids.append(candidate)

    entities: dict[str, Ent] = {}
    for eid in ids:
        scope = rng.choice(("project", "project", "private", "org"))
        if scope == "project":
            project_id: str | None = rng.choice(project_ids)
        elif scope == "private":
            project_id = rng.choice([None, *project_ids])
        else:
            project_id = None
        owner_id = rng.choice(user_ids) if rng.random() < 0.85 else None
        lifecycle = rng.choices(("active", "superseded", "retired"), weights=(7, 2, 1))[0]
        etype = rng.choice(ENTITY_TYPES)
        entities[eid] = Ent(
            id=eid,
            type=etype,
            name=f"{etype} {eid}",
            content=f"body of {eid}",
            scope=scope,
            project_id=project_id,
            owner_id=owner_id,
            lifecycle=lifecycle,
        )

    grants: set[tuple[str, str]] = set()
    for eid, ent in entities.items():
        for u in user_ids:
            if rng.random() < (0.25 if ent.scope == "private" else 0.05):
                grants.add((eid, u))

    edges: set[tuple[str, str, str]] = set()

    def pick_rel() -> str:
        return rng.choice(EDGE_RELATIONSHIPS)

    for _ in range(rng.randint(n_entities, 3 * n_entities)):
        edges.add((rng.choice(ids), pick_rel(), rng.choice(ids)))
    # A cycle through a handful of nodes.
    cycle = rng.sample(ids, rng.randint(2, min(5, len(ids))))
    for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        edges.add((a, pick_rel(), b))
    # Self-edges.
    for _ in range(rng.randint(0, 3)):
        x = rng.choice(ids)
        edges.add((x, pick_rel(), x))
    # Parallel edges of different relationships (both ways).
    for _ in range(rng.randint(1, 3)):
        a, b = rng.choice(ids), rng.choice(ids)
        for rel in rng.sample(EDGE_RELATIONSHIPS, 3):
            edges.add((a, rel, b) if rng.random() < 0.5 else (b, rel, a))
    # A hub.
    hub = rng.choice(ids)
    for other in rng.sample(ids, min(len(ids), rng.randint(4, 12))):
        edges.add((hub, pick_rel(), other) if rng.random() < 0.5 else (other, pick_rel(), hub))
    # Every relationship at least once in a while, and SUPERSEDES often.
    for rel in rng.sample(EDGE_RELATIONSHIPS, rng.randint(2, 6)):
        edges.add((rng.choice(ids), rel, rng.choice(ids)))
    for _ in range(rng.randint(1, 3)):
        edges.add((rng.choice(ids), SUPERSEDES, rng.choice(ids)))

    mentions: set[tuple[str, str]] = set()
    for _ in range(rng.randint(0, n_entities)):
        mentions.add((rng.choice(ids), rng.choice(ids)))

    passages: dict[str, Passage] = {}
    for parent in rng.sample(ids, rng.randint(0, max(1, len(ids) // 3))):
        link = rng.choice(("PART_OF", "DERIVED_FROM"))
        for i in range(rng.randint(1, 4)):
            pid = f"passage_{parent}_{i}" if rng.random() < 0.5 else f"passage_{parent}-{i}"
            if pid in passages:
                pid = f"passage_{rng.getrandbits(40):010x}"
            passages[pid] = Passage(
                id=pid, parent_id=parent, index=i, link=link, content=f"span {i} of {parent}"
            )

    communities: dict[str, list[str]] = {}
    for c in range(rng.randint(0, 3)):
        p = rng.choice(project_ids)
        in_project = [eid for eid, ent in entities.items() if ent.project_id == p]
        if len(in_project) >= 2:
            communities[f"community_{c}"] = sorted(
                rng.sample(in_project, rng.randint(2, len(in_project)))
            )

    graph = Graph(
        org_id=org_id,
        users=users,
        projects=projects,
        members=members,
        entities=entities,
        grants=grants,
        edges=edges,
        mentions=mentions,
        passages=passages,
        communities=communities,
    )

    readers: list[Reader] = []
    for u in user_ids:
        readers.append(Reader(u))
        if rng.random() < 0.5:
            pool = [*project_ids, "proj_nope"]
            chosen = rng.sample(pool, rng.randint(1, min(2, len(pool))))
            readers.append(Reader(u, tuple(sorted(chosen))))
    return graph, readers


#: Relationship names a request may filter on (some in odd case, one unknown to the graph).
REQUEST_RELATIONSHIPS: tuple[str, ...] = (
    *EDGE_RELATIONSHIPS,
    MENTIONS,
    SHARES_COMMUNITY,
    "NEVER_STORED",
)


def random_request(rng: random.Random, g: Graph, reader: Reader | None = None) -> dict[str, Any]:
    """Keyword arguments for :func:`expand` (and the service) over graph ``g``.

    Covers every depth, both include_incoming values, relationship/type filters (with odd case),
    project None / real / nonexistent, and seeds that exist, are absent, are passages, repeat
    with surrounding whitespace, or number more than 8. When ``reader`` is given, most existing
    seeds are drawn among the nodes that reader may walk (so fewer requests resolve nothing),
    and a named project is usually the first seed's.
    """
    entity_ids = list(g.entities)
    passage_ids = list(g.passages)
    walkable = (
        [n for n in [*entity_ids, *passage_ids] if n in walkable_nodes(g, reader, None)]
        if reader is not None
        else []
    )

    seeds: list[str] = []
    for _ in range(rng.choice((1, 1, 2, 3, 5, 9, 12))):
        kind = rng.random()
        if kind < 0.6 and walkable:
            seeds.append(rng.choice(walkable))
        elif kind < 0.7 and passage_ids:
            seeds.append(rng.choice(passage_ids))
        elif kind < 0.8:
            seeds.append(rng.choice(("nope", "passage_nope", "a-b-c-d", "Z")))
        else:
            seeds.append(rng.choice(entity_ids))
    if rng.random() < 0.3:  # duplicates with surrounding whitespace
        dup = rng.choice(seeds)
        seeds.insert(rng.randint(0, len(seeds)), rng.choice((f" {dup}", f"{dup} ", f"\t{dup} ")))

    relationship_types: list[str] | None = None
    if rng.random() < 0.5:
        names = rng.sample(REQUEST_RELATIONSHIPS, rng.randint(1, 6))
        if rng.random() < 0.4:
            names.append(rng.choice((SUPERSEDES, MENTIONS, "PART_OF", SHARES_COMMUNITY)))
        relationship_types = [n.lower() if rng.random() < 0.2 else n for n in names]

    types: list[str] | None = None
    if rng.random() < 0.35:
        pool = [*ENTITY_TYPES, "passage", "person"]
        types = [t.capitalize() if rng.random() < 0.2 else t for t in rng.sample(pool, 2)]

    project: str | None = None
    roll = rng.random()
    first = seeds[0].strip()
    first_project = _node_project(g, first) if first in walkable else None
    if roll < 0.2 and first_project is not None:
        project = first_project
    elif roll < 0.3 and g.projects:
        project = rng.choice(sorted(g.projects))
    elif roll < 0.36:
        project = "proj_nope"

    return {
        "entity_ids": seeds,
        "depth": rng.randint(1, 3),
        "limit": rng.choice((1, 2, 3, 5, 8, 8, 16, 24)),
        "include_incoming": rng.random() < 0.7,
        "relationship_types": relationship_types,
        "types": types,
        "project": project,
    }
