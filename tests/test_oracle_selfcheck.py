"""Hand-computed cases proving the ``expand_neighbors`` reference oracle itself right (no DB).

Every expected value below was worked out by hand from CONTRACT.md §2, §4 and §5; none is
produced by running the oracle. The last tests only check that the random generators produce
well-formed graphs and requests.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from typing import Any

import pytest

try:
    from tests.oracle import (
        Ent,
        Graph,
        Passage,
        Reader,
        expand,
        random_graph,
        random_request,
        readable,
        readable_projects,
        score,
    )
except ImportError:  # pragma: no cover - tests/ is not a package: pytest puts it on sys.path
    from oracle import (  # type: ignore[no-redef]
        Ent,
        Graph,
        Passage,
        Reader,
        expand,
        random_graph,
        random_request,
        readable,
        readable_projects,
        score,
    )

U = Reader("u")  # an org member; the default reader of the cases below


def ent(
    eid: str,
    *,
    type: str = "task",
    scope: str = "project",
    project_id: str | None = "p",
    owner_id: str | None = "u",
    lifecycle: str = "active",
) -> Ent:
    """An entity; by default an active task in the org-visible project ``p``, owned by ``u``."""
    if scope == "org":
        project_id = None
    return Ent(eid, type, eid.upper(), f"body {eid}", scope, project_id, owner_id, lifecycle)


def graph(
    entities: list[Ent],
    edges: Iterable[tuple[str, str, str]] = (),
    **kw: Any,
) -> Graph:
    """A one-org graph: users u (member) and other (member), projects p (org) and q (private)."""
    return Graph(
        org_id="org_t",
        users=kw.pop("users", {"u": "member", "other": "member"}),
        projects=kw.pop("projects", {"p": "org", "q": "private"}),
        members=kw.pop("members", {}),
        entities={e.id: e for e in entities},
        grants=set(kw.pop("grants", ())),
        edges=set(edges),
        mentions=set(kw.pop("mentions", ())),
        passages={p.id: p for p in kw.pop("passages", ())},
        communities=kw.pop("communities", {}),
    )


def hops(res: dict[str, Any]) -> list[tuple[str, str, str, int, float]]:
    """(id, relationship, direction, distance, score) of each neighbor, in answer order."""
    return [
        (n["id"], n["relationship"], n["direction"], n["distance"], n["score"])
        for n in res["neighbors"]
    ]


def ids(res: dict[str, Any]) -> list[str]:
    return [n["id"] for n in res["neighbors"]]


# --- §4 scores ---------------------------------------------------------------------------------


def test_score_formula() -> None:
    assert score("DECIDES", 1) == 1.0
    assert score("DEPENDS_ON", 2) == 0.98 * 0.72
    assert score("MENTIONS", 3) == 0.58 * 0.72**2
    assert score("FOLLOWS_UP", 1) == 0.64  # unknown relationship
    assert score("DECIDES", 20) == 0.1  # clamped from below


# --- §2 read rule ------------------------------------------------------------------------------


def test_readable_projects_by_role_membership_and_key() -> None:
    g = graph(
        [],
        users={"adm": "admin", "own": "owner", "m": "member", "v": "viewer"},
        projects={"p": "org", "q": "private", "r": "private"},
        members={("q", "m"): "viewer"},
    )
    assert readable_projects(g, Reader("adm")) == {"p", "q", "r"}
    assert readable_projects(g, Reader("own")) == {"p", "q", "r"}
    assert readable_projects(g, Reader("m")) == {"p", "q"}  # org-visible + member of q
    assert readable_projects(g, Reader("v")) == {"p"}
    assert readable_projects(g, Reader("m", ("q", "r"))) == {"q"}  # intersected with the key
    assert readable_projects(g, Reader("adm", ("r",))) == {"r"}
    assert readable_projects(g, Reader("stranger")) == set()


def test_entity_read_rule() -> None:
    g = graph(
        [
            ent("proj_q", project_id="q"),
            ent("priv_mine_q", scope="private", project_id="q"),
            ent("priv_other_q", scope="private", project_id="q", owner_id="other"),
            ent("priv_other_p", scope="private", project_id="p", owner_id="other"),
            ent("priv_granted", scope="private", project_id=None, owner_id="other"),
            ent("orgwide", scope="org"),
        ],
        members={("q", "u"): "owner"},
        grants={("priv_granted", "u")},
    )
    assert readable(g, U, "proj_q")  # member of private project q
    assert readable(g, U, "priv_mine_q")
    assert not readable(g, U, "priv_other_q")  # membership (even owner role) never suffices
    assert not readable(g, U, "priv_other_p")
    assert readable(g, U, "priv_granted")
    assert readable(g, U, "orgwide")
    assert not readable(g, U, "nope")
    # A private memory of mine in a project I cannot read is not readable.
    assert not readable(g, Reader("other"), "proj_q")
    assert not readable(g, Reader("other"), "priv_other_q")
    # A key restricted to projects reads only rows inside them, whatever their scope.
    key_p = Reader("u", ("p",))
    assert not readable(g, key_p, "orgwide")
    assert not readable(g, key_p, "priv_granted")
    assert not readable(g, key_p, "proj_q")
    assert readable(g, Reader("u", ("q",)), "priv_mine_q")
    # Someone outside the org reads nothing, not even org-scope rows.
    assert not readable(g, Reader("stranger"), "orgwide")


def test_passage_is_exactly_as_readable_as_its_parent() -> None:
    parts = [Passage(f"passage_d_{i}", "d", i, "PART_OF", f"s{i}") for i in range(2)]
    g = graph([ent("d", scope="private", owner_id="other", type="document")], passages=parts)
    assert not readable(g, U, "passage_d_0")
    res = expand(g, U, ["passage_d_0"])
    assert res["origins"] == []
    assert res["unresolved"] == ["passage_d_0"]

    g.grants.add(("d", "u"))
    assert readable(g, U, "passage_d_0")
    res = expand(g, U, ["passage_d_0"], depth=2)
    assert res["origins"] == ["passage_d_0"]
    # A passage -> its parent hop is always allowed; the parent -> its passages hop only when
    # relationship_types names PART_OF or DERIVED_FROM (§5, revised).
    assert hops(res) == [("d", "PART_OF", "outgoing", 1, 0.64)]
    res = expand(g, U, ["passage_d_0"], depth=2, relationship_types=["PART_OF"])
    # d1: the parent, by the outgoing PART_OF link; d2: the sibling span, incoming from d.
    assert hops(res) == [
        ("d", "PART_OF", "outgoing", 1, 0.64),
        ("passage_d_1", "PART_OF", "incoming", 2, 0.64 * 0.72),
    ]
    sibling = res["neighbors"][1]
    assert sibling["type"] == "passage"
    assert sibling["parent_entity_id"] == "d"
    assert sibling["passage_index"] == 1
    assert sibling["project_id"] == "p"  # the parent's
    assert sibling["lifecycle"] == "active"
    assert res["neighbors"][0]["parent_entity_id"] is None
    assert res["neighbors"][0]["passage_index"] is None


def test_passages_as_neighbors_of_their_parent() -> None:
    spans = [Passage(f"passage_o_{i}", "o", i, "DERIVED_FROM", "x") for i in range(2)]
    g = graph([ent("o", type="observation", lifecycle="superseded")], passages=spans)
    # Not by default (§5, revised): widening a memory into its spans is fetch_slice's job.
    assert expand(g, U, ["o"])["neighbors"] == []
    res = expand(g, U, ["o"], relationship_types=["DERIVED_FROM"])
    assert hops(res) == [
        ("passage_o_0", "DERIVED_FROM", "incoming", 1, 0.70),
        ("passage_o_1", "DERIVED_FROM", "incoming", 1, 0.70),
    ]
    assert [n["lifecycle"] for n in res["neighbors"]] == ["superseded", "superseded"]
    assert [n["project_id"] for n in res["neighbors"]] == ["p", "p"]
    # The spans sit on the incoming side: an outgoing-only walk does not see them.
    assert (
        expand(g, U, ["o"], include_incoming=False, relationship_types=["DERIVED_FROM"])[
            "neighbors"
        ]
        == []
    )
    # Filtering on another relationship name hides them too.
    assert expand(g, U, ["o"], relationship_types=["PART_OF"])["neighbors"] == []
    # A passage whose parent is retired is not a seed.
    g.entities["o"].lifecycle = "retired"
    assert expand(g, U, ["passage_o_0"])["unresolved"] == ["passage_o_0"]


# --- §5 the walk -------------------------------------------------------------------------------


def test_unreadable_node_is_not_a_route() -> None:
    g = graph(
        [ent("A"), ent("B", scope="private", owner_id="other"), ent("C")],
        [("A", "DEPENDS_ON", "B"), ("B", "DEPENDS_ON", "C")],
    )
    assert expand(g, U, ["A"], depth=3)["neighbors"] == []
    g.grants.add(("B", "u"))
    assert hops(expand(g, U, ["A"], depth=3)) == [
        ("B", "DEPENDS_ON", "outgoing", 1, 0.98),
        ("C", "DEPENDS_ON", "outgoing", 2, 0.98 * 0.72),
    ]


def test_types_filter_the_answer_not_the_route() -> None:
    g = graph(
        [ent("A"), ent("T", type="task"), ent("D", type="decision")],
        [("A", "DEPENDS_ON", "T"), ("T", "DEPENDS_ON", "D")],
    )
    res = expand(g, U, ["A"], depth=2, types=["Decision"])  # lower-cased
    assert hops(res) == [("D", "DEPENDS_ON", "outgoing", 2, 0.98 * 0.72)]
    assert res["total"] == 1
    assert res["truncated"] is False


def test_supersedes_directions() -> None:
    g = graph([ent("plan"), ent("dec", type="decision")], [("plan", "SUPERSEDES", "dec")])
    # Outgoing SUPERSEDES is followed only when relationship_types names it.
    assert expand(g, U, ["plan"])["neighbors"] == []
    assert expand(g, U, ["plan"], relationship_types=["DEPENDS_ON"])["neighbors"] == []
    assert hops(expand(g, U, ["plan"], relationship_types=["supersedes"])) == [
        ("dec", "SUPERSEDES", "outgoing", 1, 0.95)
    ]
    # Incoming SUPERSEDES always (subject to include_incoming and the filter).
    assert hops(expand(g, U, ["dec"])) == [("plan", "SUPERSEDES", "incoming", 1, 0.95)]
    assert expand(g, U, ["dec"], include_incoming=False)["neighbors"] == []
    assert expand(g, U, ["dec"], relationship_types=["BLOCKS"])["neighbors"] == []


def test_outgoing_only_relationships() -> None:
    for rel in ("DECIDES", "REQUIRES", "SUPPORTS"):
        g = graph([ent("x"), ent("y")], [("x", rel, "y")])
        assert ids(expand(g, U, ["x"])) == ["y"]
        assert expand(g, U, ["y"])["neighbors"] == [], rel
    g = graph([ent("x"), ent("y")], [("x", "FOLLOWS_UP", "y")])  # unknown: both, W = 0.64
    assert hops(expand(g, U, ["y"])) == [("x", "FOLLOWS_UP", "incoming", 1, 0.64)]


def test_mentions_are_hops_both_ways() -> None:
    g = graph([ent("x"), ent("y")], mentions={("x", "y")})
    assert hops(expand(g, U, ["x"])) == [("y", "MENTIONS", "outgoing", 1, 0.58)]
    assert hops(expand(g, U, ["y"])) == [("x", "MENTIONS", "incoming", 1, 0.58)]
    assert expand(g, U, ["y"], relationship_types=["DEPENDS_ON"])["neighbors"] == []


def test_retired_is_neither_seed_result_nor_route_superseded_is_all_three() -> None:
    g = graph(
        [ent("A"), ent("R", lifecycle="retired"), ent("S", lifecycle="superseded"), ent("C")],
        [("A", "BLOCKS", "R"), ("R", "BLOCKS", "C"), ("A", "ABOUT", "S")],
    )
    res = expand(g, U, ["A", "R"], depth=3)
    assert res["origins"] == ["A"]
    assert res["unresolved"] == ["R"]
    assert hops(res) == [("S", "ABOUT", "outgoing", 1, 0.78)]
    assert res["neighbors"][0]["lifecycle"] == "superseded"

    g.edges.add(("S", "BLOCKS", "C"))
    res = expand(g, U, ["S"], depth=2)
    assert res["origins"] == ["S"]
    assert hops(res) == [
        ("C", "BLOCKS", "outgoing", 1, 0.96),
        ("A", "ABOUT", "incoming", 1, 0.78),
    ]


def test_best_hop_tie_breaks() -> None:
    # Highest score wins over relationship name.
    g = graph([ent("A"), ent("X")], [("A", "RELATED_TO", "X"), ("A", "BLOCKS", "X")])
    assert hops(expand(g, U, ["A"])) == [("X", "BLOCKS", "outgoing", 1, 0.96)]
    # Equal scores: relationship name, plain str order (unknown FOLLOWS_UP weighs 0.64 too).
    g = graph([ent("A"), ent("X")], [("A", "RELATED_TO", "X"), ("X", "FOLLOWS_UP", "A")])
    assert hops(expand(g, U, ["A"])) == [("X", "FOLLOWS_UP", "incoming", 1, 0.64)]
    g = graph([ent("A"), ent("X")], [("X", "ENCOUNTERED", "A"), ("A", "REFERENCES", "X")])
    assert hops(expand(g, U, ["A"])) == [("X", "ENCOUNTERED", "incoming", 1, 0.86)]
    # Same relationship both ways: outgoing before incoming.
    g = graph([ent("A"), ent("X")], [("A", "BLOCKS", "X"), ("X", "BLOCKS", "A")])
    assert hops(expand(g, U, ["A"])) == [("X", "BLOCKS", "outgoing", 1, 0.96)]
    # Fewest hops beat a better score: X is at distance 1 by MENTIONS, not 2 by DECIDES.
    g = graph(
        [ent("A"), ent("M"), ent("X")],
        [("A", "DECIDES", "M"), ("M", "DECIDES", "X")],
        mentions={("A", "X")},
    )
    assert hops(expand(g, U, ["A"], depth=2)) == [
        ("M", "DECIDES", "outgoing", 1, 1.0),
        ("X", "MENTIONS", "outgoing", 1, 0.58),
    ]
    # The best hop comes from a node at distance - 1 only: C -DECIDES-> X is a hop between two
    # distance-2 nodes and does not count; X's hop is B -RELATED_TO-> X.
    g = graph(
        [ent("A"), ent("B"), ent("C"), ent("X")],
        [
            ("A", "BLOCKS", "B"),
            ("B", "BLOCKS", "C"),
            ("B", "RELATED_TO", "X"),
            ("C", "DECIDES", "X"),
        ],
    )
    assert hops(expand(g, U, ["A"], depth=2)) == [
        ("B", "BLOCKS", "outgoing", 1, 0.96),
        ("C", "BLOCKS", "outgoing", 2, 0.96 * 0.72),
        ("X", "RELATED_TO", "outgoing", 2, 0.64 * 0.72),
    ]
    # Two seeds reach X with the same hop: the answer is the same whichever predecessor wins.
    g = graph([ent("s1"), ent("s2"), ent("X")], [("s2", "BLOCKS", "X"), ("s1", "BLOCKS", "X")])
    assert hops(expand(g, U, ["s2", "s1"])) == [("X", "BLOCKS", "outgoing", 1, 0.96)]


def test_order_limit_truncated() -> None:
    g = graph(
        [ent("S"), ent("x"), ent("y"), ent("z1"), ent("m"), ent("a0")],
        [
            ("S", "DECIDES", "m"),  # m: d1, 1.0
            ("S", "BLOCKS", "y"),  # y: d1, 0.96
            ("S", "BELONGS_TO", "z1"),  # z1: d1, 0.72
            ("m", "DECIDES", "a0"),  # a0: d2, 1.0 * 0.72 == 0.72: after z1 by distance
            ("x", "MENTIONS", "S"),  # x: d1, 0.58, incoming
        ],
    )
    expected = [
        ("m", "DECIDES", "outgoing", 1, 1.0),
        ("y", "BLOCKS", "outgoing", 1, 0.96),
        ("z1", "BELONGS_TO", "outgoing", 1, 0.72),
        ("a0", "DECIDES", "outgoing", 2, 0.72),
        ("x", "MENTIONS", "incoming", 1, 0.58),
    ]
    res = expand(g, U, ["S"], depth=2, limit=24)
    assert hops(res) == expected
    assert (res["total"], res["truncated"]) == (5, False)
    res = expand(g, U, ["S"], depth=2, limit=5)
    assert (res["total"], res["truncated"]) == (5, False)
    res = expand(g, U, ["S"], depth=2, limit=2)
    assert hops(res) == expected[:2]
    assert (res["total"], res["truncated"]) == (2, True)
    # Depth 1 drops a0.
    assert ids(expand(g, U, ["S"], depth=1)) == ["m", "y", "z1", "x"]


def test_prefix_ids_sort_in_plain_str_order() -> None:
    family = ["ab", "a_b", "a.b", "a-b", "a", "A"]
    g = graph([ent("S"), *map(ent, family)], [("S", "DEPENDS_ON", f) for f in family])
    # ASCII: 'A' (65) < 'a' (97); "a" is a prefix of the rest; '-' 45 < '.' 46 < '_' 95 < 'b' 98.
    assert ids(expand(g, U, ["S"], limit=24)) == ["A", "a", "a-b", "a.b", "a_b", "ab"]
    # And as seeds, prefixes of each other resolve independently.
    res = expand(g, U, ["a", "a-", "a-b"])
    assert res["origins"] == ["a", "a-b"]
    assert res["unresolved"] == ["a-"]


def test_seed_normalisation_and_overflow() -> None:
    es = [ent(f"e{i}") for i in range(9)]
    g = graph(es, [("e0", "BLOCKS", "e1"), ("e6", "BLOCKS", "e7")])
    res = expand(
        g,
        U,
        ["e0", " e0 ", "nope", "e1", "e2", "e3", "e4", "e5", "e6", "\te7", "e8", "nope"],
    )
    # Stripped and deduplicated: e0 nope e1 e2 e3 e4 e5 e6 | e7 e8 (the first 8 are walked).
    assert res["origins"] == ["e0", "e1", "e2", "e3", "e4", "e5", "e6"]
    assert res["unresolved"] == ["nope", "e7", "e8"]
    # A walked seed is never a neighbor (e1 is reachable from e0). A seed past the cap is not
    # walked and not a seed, so it may be a neighbor (interpretation, see the oracle's report).
    assert hops(res) == [("e7", "BLOCKS", "outgoing", 1, 0.96)]
    with pytest.raises(ValueError):
        expand(g, U, ["e0", "  "])
    with pytest.raises(ValueError):
        expand(g, U, [])


def test_no_resolved_seed_no_walk() -> None:
    g = graph([ent("A"), ent("B")], [("A", "BLOCKS", "B")])
    res = expand(g, U, ["nope", "passage_nope"])
    assert res == {
        "origins": [],
        "unresolved": ["nope", "passage_nope"],
        "neighbors": [],
        "total": 0,
        "truncated": False,
    }


def test_project_confines_seeds_and_walk() -> None:
    g = graph(
        [ent("A"), ent("B", project_id="q"), ent("C"), ent("O", scope="org")],
        [("A", "BLOCKS", "B"), ("B", "BLOCKS", "C"), ("A", "ABOUT", "O")],
        members={("q", "u"): "viewer"},
    )
    # B 0.96 (d1), O 0.78 (d1), C 0.96 * 0.72 = 0.6912 (d2).
    assert ids(expand(g, U, ["A"], depth=2)) == ["B", "O", "C"]
    res = expand(g, U, ["A", "B"], depth=3, project="p")
    assert res["origins"] == ["A"]
    assert res["unresolved"] == ["B"]
    assert res["neighbors"] == []  # C only through B (project q); O has no project
    res = expand(g, U, ["A"], project="proj_nope")
    assert (res["origins"], res["unresolved"]) == ([], ["A"])


def test_shares_community_is_a_first_hop_from_seeds_only() -> None:
    g = graph(
        [ent("A"), ent("B"), ent("C"), ent("X"), ent("H", scope="private", owner_id="other")],
        [("X", "DEPENDS_ON", "A")],
        communities={"c1": ["A", "B", "C", "H"]},
    )
    # H is a member too, but unreadable.
    assert hops(expand(g, U, ["A"])) == [
        ("X", "DEPENDS_ON", "incoming", 1, 0.98),
        ("B", "SHARES_COMMUNITY", "outgoing", 1, 0.74),
        ("C", "SHARES_COMMUNITY", "outgoing", 1, 0.74),
    ]
    # Not from a node the walk reached: A is at distance 1, so B and C are not at distance 2.
    assert hops(expand(g, U, ["X"], depth=3)) == [("A", "DEPENDS_ON", "outgoing", 1, 0.98)]
    assert ids(expand(g, U, ["A"], relationship_types=["DEPENDS_ON"])) == ["X"]
    assert ids(expand(g, U, ["A"], relationship_types=["shares_community"])) == ["B", "C"]
    # Direction does not matter: it is followed when include_incoming is false.
    assert ids(expand(g, U, ["A"], include_incoming=False)) == ["B", "C"]


def test_self_edges_and_cycles() -> None:
    g = graph(
        [ent("A"), ent("B"), ent("C")],
        [("A", "BLOCKS", "A"), ("A", "BLOCKS", "B"), ("B", "BLOCKS", "C"), ("C", "BLOCKS", "A")],
    )
    assert hops(expand(g, U, ["A"], depth=3)) == [
        ("B", "BLOCKS", "outgoing", 1, 0.96),
        ("C", "BLOCKS", "incoming", 1, 0.96),
    ]
    assert hops(expand(g, U, ["A"], depth=3, include_incoming=False)) == [
        ("B", "BLOCKS", "outgoing", 1, 0.96),
        ("C", "BLOCKS", "outgoing", 2, 0.96 * 0.72),
    ]


# --- generators --------------------------------------------------------------------------------

ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
NAME_RE = re.compile(r"[A-Za-z0-9_]{1,64}")


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_and_requests_are_well_formed(seed: int) -> None:
    rng = random.Random(seed)
    g, readers = random_graph(rng)
    assert 5 <= len(g.entities) <= 30
    for e in g.entities.values():
        assert ID_RE.fullmatch(e.id) and not e.id.startswith("passage_")
        assert e.type == e.type.lower()
        assert (e.scope == "org") == (e.project_id is None) or e.scope == "private"
        assert e.project_id is None or e.project_id in g.projects
        assert e.owner_id is None or e.owner_id in g.users
    for p in g.passages.values():
        assert ID_RE.fullmatch(p.id) and p.id.startswith("passage_")
        assert p.parent_id in g.entities and p.link in ("PART_OF", "DERIVED_FROM")
    for pid in {p.parent_id for p in g.passages.values()}:
        indices = sorted(p.index for p in g.passages.values() if p.parent_id == pid)
        assert indices == list(range(len(indices)))
    for s, rel, d in g.edges:
        assert s in g.entities and d in g.entities and NAME_RE.fullmatch(rel)
    for members in g.communities.values():
        assert len({g.entities[m].project_id for m in members}) == 1
    assert readers and all(r.user_id in g.users for r in readers)
    for i in range(6):
        req = random_request(rng, g, readers[i % len(readers)] if i % 2 else None)
        assert 1 <= req["depth"] <= 3 and 1 <= req["limit"] <= 24
        for r in readers:
            res = expand(g, r, **req)
            assert res["total"] == len(res["neighbors"]) <= req["limit"]
            assert not set(res["origins"]) & set(ids(res))
