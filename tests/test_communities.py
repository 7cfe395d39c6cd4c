"""Communities (issue 6): detection per audience, the SHARES_COMMUNITY hop of the walk, the CLI.

Real PostgreSQL. Detection tests build small graphs and run the real rebuild; walk tests insert
community rows directly (the walk must hold whatever the tables say) and check distance 1 only,
``relationship_types``, ``project`` confinement, the read rule, the hop cap and
``metadata.community_id``; the corpus test runs the rebuild on the PEP corpus.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from app.cli.main import cli
from app.core.db import make_engine, write_tx
from app.core.settings import Settings
from app.domain import communities
from app.domain.schemas import ExpandRequest, ExpandResponse
from app.repo.communities import MemoryRow
from app.repo.readers import reader_by_key, reader_by_user
from app.service.expand import expand_neighbors
from tests import oracle
from tests.builders import load_graph

SC = "SHARES_COMMUNITY"


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def _ent(
    eid: str,
    *,
    scope: str = "project",
    project: str | None = "proj_a",
    owner: str | None = None,
    lifecycle: str = "active",
) -> oracle.Ent:
    return oracle.Ent(
        id=eid,
        type="note",
        name=f"note {eid}",
        content=f"body of {eid}",
        scope=scope,
        project_id=None if scope == "org" else project,
        owner_id=owner,
        lifecycle=lifecycle,
    )


def _graph(
    org_id: str,
    entities: list[oracle.Ent],
    *,
    edges: set[tuple[str, str, str]] | None = None,
    mentions: set[tuple[str, str]] | None = None,
    communities_: dict[str, list[str]] | None = None,
    users: dict[str, str] | None = None,
    members: dict[tuple[str, str], str] | None = None,
) -> oracle.Graph:
    return oracle.Graph(
        org_id=org_id,
        users=users or {f"u_{org_id}": "admin"},
        projects={"proj_a": "private", "proj_b": "private"},
        members=members or {},
        entities={e.id: e for e in entities},
        grants=set(),
        edges=edges or set(),
        mentions=mentions or set(),
        passages={},
        communities=communities_ or {},
    )


def _clique(ids: list[str], rel: str = "DEPENDS_ON") -> set[tuple[str, str, str]]:
    return {(a, rel, b) for i, a in enumerate(ids) for b in ids[i + 1 :]}


async def _rebuild(engine: AsyncEngine, org_id: str) -> communities.RebuildSummary:
    async with write_tx(engine) as conn:
        return await communities.rebuild(conn, org_id=org_id)


async def _stored(engine: AsyncEngine, org_id: str) -> dict[str, list[str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT c.id, c.audience, c.size, m.entity_id FROM communities c"
                " JOIN community_members m ON m.org_id = c.org_id AND m.community_id = c.id"
                " WHERE c.org_id = :o ORDER BY c.id, m.entity_id"
            ),
            {"o": org_id},
        )
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r.id, []).append(r.entity_id)
            assert r.size >= 2
        return out


async def _expand(
    engine: AsyncEngine,
    user_id: str,
    settings: Settings | None = None,
    **req: object,
) -> ExpandResponse:
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=user_id)
        assert reader is not None
        return await expand_neighbors(conn, reader, ExpandRequest(**req), settings=settings)


def _ids(resp: ExpandResponse, rel: str | None = None) -> list[str]:
    return [n.id for n in resp.neighbors if rel is None or n.relationship == rel]


# ------------------------------------------------------------------------------------------------
# detection: the bridge case and the audience rule
# ------------------------------------------------------------------------------------------------

GROUP_A = ["a1", "a2", "a3"]
GROUP_B = ["b1", "b2", "b3"]
# The bridge x is linked to all six with weight 5 (four relationships and a mention each): when x
# takes part, Louvain deterministically puts all seven in one community.
BRIDGE_RELS = ("DEPENDS_ON", "REFERENCES", "ABOUT", "RELATED_TO")


def _bridge_graph(org_id: str, bridge: oracle.Ent) -> oracle.Graph:
    groups = GROUP_A + GROUP_B
    edges = _clique(GROUP_A) | _clique(GROUP_B)
    edges |= {("x", rel, n) for n in groups for rel in BRIDGE_RELS}
    mentions = {(n, "x") for n in groups}
    owner = f"u_{org_id}"
    return _graph(
        org_id,
        [*(_ent(e) for e in groups), bridge],
        edges=edges,
        mentions=mentions,
        users={owner: "member"},
    )


@pytest.mark.parametrize(
    "bridge",
    [
        pytest.param({"scope": "private", "project": "proj_a"}, id="private-in-project"),
        pytest.param({"scope": "private", "project": None}, id="private-no-project"),
        pytest.param({"scope": "project", "project": "proj_b"}, id="other-project"),
        pytest.param({"scope": "org", "project": None}, id="org-scope"),
        pytest.param({"scope": "project", "lifecycle": "retired"}, id="retired"),
    ],
)
async def test_a_bridge_outside_the_audience_never_joins_two_groups(engine, org_id, bridge):
    bridge_ent = _ent("x", owner=f"u_{org_id}", **bridge)
    await load_graph(engine, _bridge_graph(org_id, bridge_ent))
    summary = await _rebuild(engine, org_id)
    assert await _stored(engine, org_id) == {
        "community_proj_a_0001": GROUP_A,
        "community_proj_a_0002": GROUP_B,
    }
    assert summary.count == 2
    assert (summary.size_min, summary.size_median, summary.size_max) == (3, 3.0, 3)
    assert [a.audience for a in summary.audiences] == ["proj_a"]
    assert summary.modularity == pytest.approx(0.5)  # two disjoint triangles


async def test_a_project_bridge_may_join_them(engine, org_id):
    await load_graph(engine, _bridge_graph(org_id, _ent("x")))
    summary = await _rebuild(engine, org_id)
    assert await _stored(engine, org_id) == {"community_proj_a_0001": [*GROUP_A, *GROUP_B, "x"]}
    assert summary.count == 1 and summary.members == 7


async def test_rebuild_is_per_audience_deterministic_and_replaces(engine, org_id):
    ents = [
        *(_ent(f"p{i}") for i in range(4)),
        *(_ent(f"q{i}", project="proj_b") for i in range(3)),
        *(_ent(f"o{i}", scope="org") for i in range(3)),
        _ent("lonely"),
    ]
    edges = (
        _clique(["p0", "p1"])
        | _clique(["p2", "p3"])
        | _clique(["q0", "q1", "q2"])
        | _clique(["o0", "o1", "o2"])
        # across audiences: ignored
        | {("p0", "DEPENDS_ON", "q0"), ("o0", "DEPENDS_ON", "p2"), ("q1", "ABOUT", "o1")}
        | {("lonely", "DEPENDS_ON", "lonely")}  # a self-edge makes no community
    )
    await load_graph(engine, _graph(org_id, ents, edges=edges))
    first = await _rebuild(engine, org_id)
    want = {
        "community_org_0001": ["o0", "o1", "o2"],
        "community_proj_a_0001": ["p0", "p1"],
        "community_proj_a_0002": ["p2", "p3"],
        "community_proj_b_0001": ["q0", "q1", "q2"],
    }
    assert await _stored(engine, org_id) == want
    assert [a.audience for a in first.audiences] == ["org", "proj_a", "proj_b"]
    assert first.render().startswith(f"{org_id}: 4 communities, 10 members")
    # Same graph, same communities; the old rows are replaced, not added to.
    await _rebuild(engine, org_id)
    assert await _stored(engine, org_id) == want
    # A memory made private drops out at the next rebuild.
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE entities SET scope = 'private' WHERE org_id = :o AND id = 'p3'"),
            {"o": org_id},
        )
    await _rebuild(engine, org_id)
    assert "community_proj_a_0002" not in await _stored(engine, org_id)


def test_detect_counts_only_links_inside_one_audience():
    mem = [
        MemoryRow("a", "project", "P", "active"),
        MemoryRow("b", "project", "Q", "active"),
        MemoryRow("c", "private", "P", "active"),
        MemoryRow("d", "private", None, "active"),
        MemoryRow("e", "org", None, "active"),
        MemoryRow("f", "project", "org", "active"),
        MemoryRow("g", "project", "org", "superseded"),
        MemoryRow("h", "org", None, "active"),
        MemoryRow("i", "org", None, "active"),
        MemoryRow("j", "project", "P", "retired"),
    ]
    links = [("a", "b"), ("a", "c"), ("c", "d"), ("a", "e"), ("a", "j"), ("a", "zz")]
    links += [("f", "g"), ("h", "i"), ("i", "h"), ("h", "h")]
    found = communities.detect(mem, links)
    assert [(c.id, c.audience, c.members) for c in found.communities] == [
        ("community_org_0001", "org", ("h", "i")),
        ("community_project=org_0001", "project=org", ("f", "g")),
    ]
    assert [(a.audience, a.memories, a.links) for a in found.audiences] == [
        ("org", 2, 1),
        ("project=org", 2, 1),
    ]
    assert found == communities.detect(list(reversed(mem)), list(reversed(links)))


# ------------------------------------------------------------------------------------------------
# the walk: SHARES_COMMUNITY hops
# ------------------------------------------------------------------------------------------------


@pytest.fixture
async def walk_org(engine, org_id) -> dict[str, str]:
    """Seed ``s`` (proj_a) with co-members c1..c3 (proj_a) and ``c0`` (proj_b); s -DEPENDS_ON-> x,
    and x shares a community with y. ``t`` has six co-members m0 (proj_b), m1..m5 (proj_a).
    Users: ``both`` reads proj_a and proj_b, ``a_only`` reads proj_a."""
    both, a_only = f"both_{org_id}", f"aonly_{org_id}"
    ents = [
        _ent("s"),
        _ent("c0", project="proj_b"),
        *(_ent(f"c{i}") for i in (1, 2, 3)),
        _ent("x"),
        _ent("y"),
        _ent("t"),
        _ent("m0", project="proj_b"),
        *(_ent(f"m{i}") for i in range(1, 6)),
    ]
    g = _graph(
        org_id,
        ents,
        edges={("s", "DEPENDS_ON", "x")},
        communities_={
            "community_s": ["s", "c0", "c1", "c2", "c3"],
            "community_0": ["s", "c2"],  # c2 shares two communities with s: the smallest names it
            "community_x": ["x", "y"],
            "community_t": ["t", "m0", "m1", "m2", "m3", "m4", "m5"],
        },
        users={both: "member", a_only: "member"},
        members={
            ("proj_a", both): "viewer",
            ("proj_b", both): "viewer",
            ("proj_a", a_only): "viewer",
        },
    )
    await load_graph(engine, g)
    return {"both": both, "a_only": a_only}


async def test_community_hop_only_at_distance_one(engine, walk_org):
    for depth in (1, 2, 3):
        resp = await _expand(engine, walk_org["both"], entity_ids=["s"], depth=depth, limit=24)
        assert _ids(resp) == ["x", "c0", "c1", "c2", "c3"], depth  # 0.98 first, then 0.74 by id
        assert all(n.distance == 1 for n in resp.neighbors)
        assert "y" not in _ids(resp)  # x's community is not followed from distance 1
    # From x as a seed, y is a co-member.
    resp = await _expand(engine, walk_org["both"], entity_ids=["x"], depth=3)
    # s's co-members c0..c3 are not reached: s is at distance 1, not a seed.
    assert [(n.id, n.relationship, n.distance) for n in resp.neighbors] == [
        ("s", "DEPENDS_ON", 1),
        ("y", SC, 1),
    ]


async def test_community_hop_fields_and_community_id(engine, walk_org):
    resp = await _expand(engine, walk_org["both"], entity_ids=["s"], limit=24)
    by_id = {n.id: n for n in resp.neighbors}
    for cid in ("c0", "c1", "c3"):
        n = by_id[cid]
        assert (n.relationship, n.direction, n.distance, n.score) == (SC, "outgoing", 1, 0.74)
        assert n.metadata["community_id"] == "community_s"
    assert by_id["c2"].metadata["community_id"] == "community_0"  # smallest shared
    assert "community_id" not in by_id["x"].metadata


async def test_community_hop_obeys_relationship_types(engine, walk_org):
    user = walk_org["both"]
    cases = {
        None: ["x", "c0", "c1", "c2", "c3"],
        ("DEPENDS_ON",): ["x"],
        ("shares_community",): ["c0", "c1", "c2", "c3"],
        (SC, "DEPENDS_ON"): ["x", "c0", "c1", "c2", "c3"],
        ("MENTIONS",): [],
    }
    for rels, want in cases.items():
        resp = await _expand(
            engine,
            user,
            entity_ids=["s"],
            depth=3,
            limit=24,
            relationship_types=list(rels) if rels else None,
        )
        assert _ids(resp) == want, rels


async def test_community_hop_obeys_project_confinement(engine, walk_org):
    user = walk_org["both"]
    resp = await _expand(engine, user, entity_ids=["s"], project="proj_a", limit=24)
    assert _ids(resp) == ["x", "c1", "c2", "c3"]  # c0 sits in proj_b
    resp = await _expand(engine, user, entity_ids=["s"], project="proj_b", limit=24)
    assert resp.origins == [] and resp.unresolved == ["s"] and resp.neighbors == []


async def test_community_hop_obeys_the_read_rule(engine, org_id, walk_org):
    allowed = await _expand(engine, walk_org["both"], entity_ids=["s", "t"], limit=24)
    assert {"c0", "m0"} <= set(_ids(allowed))

    capped = Settings(walk_hop_cap=2)
    requests = [
        ({"entity_ids": ["s"], "limit": 24, "depth": 2}, None),
        ({"entity_ids": ["s", "t"], "limit": 24}, None),
        ({"entity_ids": ["t"], "relationship_types": [SC]}, capped),  # hidden rows eat no budget
    ]
    denied = [await _expand(engine, walk_org["a_only"], settings=s, **req) for req, s in requests]
    for resp in denied:
        assert not {"c0", "m0"} & set(_ids(resp))
    assert _ids(denied[2]) == ["m1", "m2"] and denied[2].filters["frontier_capped"] is True

    # What the denied reader gets is exactly what they would get if c0 and m0 did not exist.
    async with engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM entities WHERE org_id = :o AND id IN ('c0', 'm0')"), {"o": org_id}
        )
    absent = [await _expand(engine, walk_org["a_only"], settings=s, **req) for req, s in requests]
    assert [r.model_dump() for r in denied] == [r.model_dump() for r in absent]


async def test_a_community_larger_than_the_hop_cap_is_cut_by_entity_id(engine, walk_org):
    user = walk_org["both"]
    for cap, want, was_capped in (
        (1, ["m0"], True),
        (3, ["m0", "m1", "m2"], True),
        (5, ["m0", "m1", "m2", "m3", "m4"], True),
        (6, ["m0", "m1", "m2", "m3", "m4", "m5"], False),
    ):
        resp = await _expand(
            engine, user, settings=Settings(walk_hop_cap=cap), entity_ids=["t"], limit=24
        )
        assert _ids(resp) == want, cap
        assert resp.filters["frontier_capped"] is was_capped, cap


# ------------------------------------------------------------------------------------------------
# the PEP corpus
# ------------------------------------------------------------------------------------------------


@pytest.fixture
async def pep_communities(engine, pep_corpus):
    """Communities of org_python, rebuilt for the test and removed afterwards (other tests
    share the corpus)."""
    summary = await _rebuild(engine, "org_python")
    yield summary
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM communities WHERE org_id = 'org_python'"))


@pytest.mark.corpus
async def test_pep_0484_community_for_the_typing_reader(engine, pep_corpus, pep_communities):
    summary = pep_communities
    assert summary.count > 0 and "proj_typing" in {a.audience for a in summary.audiences}
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT m2.community_id, m2.entity_id, e.project_id, e.scope"
                " FROM community_members m1"
                " JOIN community_members m2"
                "   ON m2.org_id = m1.org_id AND m2.community_id = m1.community_id"
                " JOIN entities e ON e.org_id = m2.org_id AND e.id = m2.entity_id"
                " WHERE m1.org_id = 'org_python' AND m1.entity_id = 'pep_0484'"
                " ORDER BY m2.entity_id"
            )
        )
        members = rows.all()
        assert {(r.project_id, r.scope) for r in members} == {("proj_typing", "project")}
        (community,) = {r.community_id for r in members}
        others = [r.entity_id for r in members if r.entity_id != "pep_0484"]
        assert others

        typing = await reader_by_key(conn, key=pep_corpus["user_typing_reader"])
        assert typing is not None
        resp = await expand_neighbors(
            conn, typing, ExpandRequest(entity_ids=["pep_0484"], relationship_types=[SC], limit=24)
        )
        assert resp.origins == ["pep_0484"]
        assert _ids(resp) == others[:24]
        assert resp.truncated is (len(others) > 24)
        for n in resp.neighbors:
            assert (n.relationship, n.distance, n.project_id) == (SC, 1, "proj_typing")
            assert n.metadata["community_id"] == community

        outsider = await reader_by_key(conn, key=pep_corpus["user_outsider"])
        assert outsider is not None
        resp = await expand_neighbors(
            conn, outsider, ExpandRequest(entity_ids=["pep_0484"], relationship_types=[SC])
        )
        assert resp.unresolved == ["pep_0484"] and resp.neighbors == []


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------


def _load_group_a(database_url: str, org: str) -> None:
    """GROUP_A as one linked clique in ``org`` (from a sync test: its own engine and loop)."""

    async def setup() -> None:
        eng = make_engine(database_url)
        try:
            g = _graph(org, [_ent(e) for e in GROUP_A], edges=_clique(GROUP_A))
            await load_graph(eng, g)
        finally:
            await eng.dispose()

    asyncio.run(setup())


def test_cli_communities_rebuild(database_url):
    org = "org_cli_communities"
    _load_group_a(database_url, org)
    runner = CliRunner()
    result = runner.invoke(cli, ["communities", "rebuild", "--org", org])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{org}: 1 communities, 3 members")
    assert "proj_a: 1 communities over 3 linked memories (3 linked pairs)" in result.stdout
    result = runner.invoke(cli, ["communities", "rebuild", "--org", "org_does_not_exist"])
    assert result.exit_code == 1


def test_cli_rebuild_survives_a_memory_deleted_while_it_runs(database_url, monkeypatch):
    # New-user trial, 2026-11-30: a delete committed between the rebuild's read of the org and
    # its insert of the memberships failed the command (a foreign-key violation, exit 1). The
    # rebuild is idempotent, so the command runs it again and stores what is there now.
    import app.repo.communities as community_repo

    org = "org_cli_race"
    _load_group_a(database_url, org)
    real_links = community_repo.links
    deleted: list[str] = []

    async def links_then_delete(conn, *, org_id):
        found = await real_links(conn, org_id=org_id)
        if org_id == org and not deleted:  # once: a concurrent writer deletes a3 and commits
            eng = make_engine(database_url)
            try:
                async with write_tx(eng) as other:
                    await other.execute(
                        text("DELETE FROM entities WHERE org_id = :o AND id = 'a3'"), {"o": org}
                    )
            finally:
                await eng.dispose()
            deleted.append("a3")
        return found

    monkeypatch.setattr(community_repo, "links", links_then_delete)
    result = CliRunner().invoke(cli, ["communities", "rebuild", "--org", org])
    assert deleted == ["a3"]
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{org}: 1 communities, 2 members")
