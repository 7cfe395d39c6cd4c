"""expand_neighbors cases the contract (§4, §5) names, over REST."""

from __future__ import annotations

import pytest

from app.core.settings import Settings
from app.domain.schemas import ExpandRequest
from app.repo.readers import reader_by_key
from app.service.expand import expand_neighbors
from tests.world import World


async def expand(client, key: str, **body):
    r = await client.post(
        "/api/search/expand", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    return r


def ids(resp) -> list[str]:
    return [n["id"] for n in resp.json()["neighbors"]]


async def test_types_filter_the_answer_not_the_route(engine, client):
    w = World().entity("a").entity("t", type_="task").entity("d", type_="decision")
    w.edge("a", "DEPENDS_ON", "t").edge("t", "DEPENDS_ON", "d")
    key = await w.load(engine)
    r = await expand(client, key, entity_ids=["a"], depth=2, types=["Decision"])
    assert ids(r) == ["d"]
    n = r.json()["neighbors"][0]
    assert (n["distance"], n["relationship"], n["direction"]) == (2, "DEPENDS_ON", "outgoing")
    assert r.json()["filters"]["types"] == ["decision"]


async def test_seeds_past_eight_are_unresolved_after_the_walked_misses(engine, client):
    w = World()
    for i in range(10):
        w.entity(f"s{i}")
    key = await w.load(engine)
    seeds = [" s0", "s1", "s0", "missing", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"]
    body = (await expand(client, key, entity_ids=seeds)).json()
    assert body["origins"] == ["s0", "s1", "s2", "s3", "s4", "s5", "s6"]
    # walked seeds that did not resolve come first, then the seeds past the cap, in order
    assert body["unresolved"] == ["missing", "s7", "s8", "s9"]
    assert body["filters"]["origin_limit"] == 8
    small = (await expand(client, key, entity_ids=["s0"])).json()
    assert "origin_limit" not in small["filters"]


@pytest.mark.parametrize(
    ("field", "sent", "applied"),
    [
        ("depth", -1, 1),
        ("depth", 0, 1),
        ("depth", 3, 3),
        ("depth", 4, 3),
        ("depth", 2**31, 3),
        ("limit", 0, 1),
        ("limit", 24, 24),
        ("limit", 25, 24),
        ("limit", -(2**40), 1),
        ("content_max_chars", -1, 0),
        ("content_max_chars", 50_001, 50_000),
        ("content_max_chars", None, 500),
        ("depth", None, 1),
        ("limit", None, 8),
    ],
)
async def test_bounds_are_clamped_and_echoed(engine, client, field, sent, applied):
    key = await World().entity("x").load(engine)
    body = (await expand(client, key, entity_ids=["x"], **{field: sent})).json()
    assert body["filters"][field] == applied
    if field in ("depth", "limit"):
        assert body[field] == applied


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"entity_ids": []}, 400),
        ({"entity_ids": ["  "]}, 400),
        ({"entity_ids": [""]}, 400),
        ({"entity_ids": [3]}, 400),
        ({"entity_ids": ["x", None]}, 400),
        ({"entity_ids": ["x"], "relationship_types": ["DEPENDS-ON"]}, 400),
        ({"entity_ids": ["x"], "types": ["a" * 65]}, 400),
        ({"entity_ids": ["x"], "project": " "}, 400),
        ({"entity_ids": "x"}, 422),
        ({"entity_ids": ["x"], "depth": "3"}, 422),
        ({"entity_ids": ["x"], "depth": 2.5}, 422),
        ({"entity_ids": ["x"], "limit": True}, 422),
        ({"entity_ids": ["x"], "include_incoming": "yes"}, 422),
        ({}, 422),
        ({"entity_ids": ["x"], "surprise": 1}, 422),
    ],
)
async def test_malformed_input(engine, client, body, status):
    key = await World().entity("x").load(engine)
    r = await expand(client, key, **body)
    assert r.status_code == status
    assert "detail" in r.json()
    assert "Traceback" not in r.text and "SELECT" not in r.text


async def test_supersedes_direction_rules(engine, client):
    w = World().entity("plan").entity("decision", type_="decision")
    w.edge("plan", "SUPERSEDES", "decision")
    key = await w.load(engine)
    # incoming SUPERSEDES is always followed: the decision finds the plan that supersedes it
    r = await expand(client, key, entity_ids=["decision"])
    assert ids(r) == ["plan"]
    assert r.json()["neighbors"][0]["direction"] == "incoming"
    # outgoing SUPERSEDES only when relationship_types names it
    assert ids(await expand(client, key, entity_ids=["plan"])) == []
    r = await expand(client, key, entity_ids=["plan"], relationship_types=["supersedes"])
    assert ids(r) == ["decision"]
    assert r.json()["neighbors"][0]["score"] == 0.95
    # no incoming when include_incoming is false
    assert ids(await expand(client, key, entity_ids=["decision"], include_incoming=False)) == []


async def test_outgoing_only_relationships_are_not_followed_backwards(engine, client):
    w = World().entity("a").entity("b").edge("a", "REQUIRES", "b").edge("a", "DECIDES", "b")
    key = await w.load(engine)
    assert ids(await expand(client, key, entity_ids=["b"])) == []
    r = await expand(client, key, entity_ids=["a"])
    assert [(n["id"], n["relationship"], n["score"]) for n in r.json()["neighbors"]] == [
        ("b", "DECIDES", 1.0)
    ]


async def test_retired_is_neither_result_nor_route_and_superseded_is_both(engine, client):
    w = World().entity("a").entity("r", lifecycle="retired").entity("b")
    w.entity("s", lifecycle="superseded").entity("c")
    w.edge("a", "DEPENDS_ON", "r").edge("r", "DEPENDS_ON", "b")
    w.edge("a", "BLOCKS", "s").edge("s", "BLOCKS", "c")
    key = await w.load(engine)
    body = (await expand(client, key, entity_ids=["a", "r"], depth=3)).json()
    assert body["origins"] == ["a"]
    assert body["unresolved"] == ["r"]
    assert [(n["id"], n["lifecycle"], n["distance"]) for n in body["neighbors"]] == [
        ("s", "superseded", 1),
        ("c", "active", 2),
    ]


async def test_prefix_ids_order_bytewise(engine, client):
    w = World().entity("hub")
    for node in ("ab", "a-b", "a", "a_b", "A", "a.b"):
        w.entity(node).edge("hub", "RELATED_TO", node)
    key = await w.load(engine)
    assert ids(await expand(client, key, entity_ids=["hub"], limit=24)) == [
        "A",
        "a",
        "a-b",
        "a.b",
        "a_b",
        "ab",
    ]
    assert ids(await expand(client, key, entity_ids=["a-b"])) == ["hub"]


async def test_limit_truncated_and_total(engine, client):
    w = World().entity("hub")
    for i in range(5):
        w.entity(f"n{i}").edge("hub", "RELATED_TO", f"n{i}")
    key = await w.load(engine)
    body = (await expand(client, key, entity_ids=["hub"], limit=3)).json()
    assert (body["total"], body["truncated"], body["limit"]) == (3, True, 3)
    body = (await expand(client, key, entity_ids=["hub"], limit=5)).json()
    assert (body["total"], body["truncated"]) == (5, False)


async def test_preview_and_passage_fields(engine, client):
    body_text = "\n\n".join(f"# Part {i}\n\n" + "lorem ipsum " * 90 for i in range(4))
    w = World().entity("doc", type_="document", content=body_text)
    key = await w.load(engine)
    body = (
        await expand(
            client,
            key,
            entity_ids=["doc"],
            relationship_types=["PART_OF"],
            content_max_chars=20,
            limit=24,
        )
    ).json()
    spans = body["neighbors"]
    assert spans and all(n["type"] == "passage" for n in spans)
    for n in spans:
        assert n["relationship"] == "PART_OF" and n["direction"] == "incoming"
        assert n["parent_entity_id"] == "doc" and n["widen_with"] == "fetch_slice"
        assert isinstance(n["passage_index"], int)
        assert n["metadata"]["content_truncated"] is True
        assert n["content"].endswith("...") and len(n["content"]) <= 23
    # and back up: from a passage, its parent is an outgoing PART_OF hop
    up = (await expand(client, key, entity_ids=[spans[0]["id"]], include_incoming=False)).json()
    assert [(n["id"], n["relationship"], n["direction"]) for n in up["neighbors"]] == [
        ("doc", "PART_OF", "outgoing")
    ]
    assert up["neighbors"][0]["widen_with"] is None


async def test_default_expand_returns_none_of_the_seeds_own_passages(engine, client):
    body_text = "\n\n".join(f"# Part {i}\n\n" + "lorem ipsum " * 90 for i in range(4))
    w = World().entity("doc", type_="document", content=body_text).entity("other")
    w.edge("doc", "REFERENCES", "other")
    key = await w.load(engine)
    # default: the graph around the seed, not its own spans (§5, revised)
    body = (await expand(client, key, entity_ids=["doc"], depth=3, limit=24)).json()
    assert ids_of(body) == ["other"]
    # another relationship named: still no spans
    body = (await expand(client, key, entity_ids=["doc"], relationship_types=["REFERENCES"])).json()
    assert ids_of(body) == ["other"]
    # naming PART_OF widens the memory into its spans
    body = (await expand(client, key, entity_ids=["doc"], relationship_types=["part_of"])).json()
    assert body["neighbors"] and all(n["parent_entity_id"] == "doc" for n in body["neighbors"])
    # a passage still reaches its parent by default, but not its sibling spans
    span = body["neighbors"][0]["id"]
    up = (await expand(client, key, entity_ids=[span], depth=2, limit=24)).json()
    assert ids_of(up) == ["doc", "other"]


def ids_of(body: dict) -> list[str]:
    return [n["id"] for n in body["neighbors"]]


async def test_capped_walk_is_deterministic_and_says_so(engine):
    w = World().entity("hub")
    for i in range(30):
        w.entity(f"n{i:02d}").edge("hub", "RELATED_TO", f"n{i:02d}")
    key = await w.load(engine)
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
        assert reader is not None
        req = ExpandRequest(entity_ids=["hub"], limit=24)
        capped = Settings(walk_hop_cap=5)
        first = await expand_neighbors(conn, reader, req, settings=capped)
        again = await expand_neighbors(conn, reader, req, settings=capped)
        full = await expand_neighbors(conn, reader, req)
    assert first.filters["frontier_capped"] is True
    assert [n.id for n in first.neighbors] == ["n00", "n01", "n02", "n03", "n04"]
    assert first == again
    # the default caps cut too (hop cap 26 < 30): RELATED_TO has the default weight, which any
    # relationship without a §4 weight shares, so a dropped row bounds the cut by its weight
    # only and the flag says it may have cut (tests/test_walk_caps.py: hidden edges that make a
    # node a hub must not change the flag)
    assert full.filters["frontier_capped"] is True and full.total == 24 and full.truncated
    assert [n.id for n in full.neighbors] == [f"n{i:02d}" for i in range(24)]
