"""The walking skeleton on the real PEP corpus (../shared/data/peps), through REST."""

from __future__ import annotations

import pytest

from tests.builders import make_key

pytestmark = pytest.mark.corpus


async def post(client, key, path, body):
    return await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})


async def test_typing_reader_sees_pep_484_dependents_and_mentioners(client, pep_corpus):
    key = pep_corpus["user_typing_reader"]
    r = await post(
        client,
        key,
        "/api/search/expand",
        {
            "entity_ids": ["pep_0484"],
            "relationship_types": ["MENTIONS"],
            "limit": 24,
            "project": "proj_typing",
        },
    )
    body = r.json()
    assert body["origins"] == ["pep_0484"] and body["unresolved"] == []
    found = {(n["id"], n["direction"]) for n in body["neighbors"]}
    # PEP 544 and PEP 560 (typing) cite PEP 484, which does not cite them: incoming mentions
    assert {("pep_0544", "incoming"), ("pep_0560", "incoming")} <= found
    # PEP 483 and PEP 484 cite each other: outgoing wins the tie (§5)
    assert ("pep_0483", "outgoing") in found
    assert {n["project_id"] for n in body["neighbors"]} == {"proj_typing"}
    # PEP 749 requires PEP 649, which cites 484: a dependent two hops away
    deep = (
        await post(
            client,
            key,
            "/api/search/expand",
            {
                "entity_ids": ["pep_0484"],
                "relationship_types": ["DEPENDS_ON", "MENTIONS"],
                "depth": 2,
                "limit": 24,
            },
        )
    ).json()
    deep_found = {
        (n["id"], n["relationship"], n["direction"], n["distance"]) for n in deep["neighbors"]
    }
    assert ("pep_0749", "DEPENDS_ON", "incoming", 2) in deep_found
    for n in body["neighbors"] + deep["neighbors"]:
        assert n["project_id"] in ("proj_typing", "proj_core", "proj_governance", "proj_release")
    # without include_incoming, only what PEP 484 itself cites
    out = (
        await post(
            client,
            key,
            "/api/search/expand",
            {
                "entity_ids": ["pep_0484"],
                "relationship_types": ["MENTIONS"],
                "include_incoming": False,
                "limit": 24,
            },
        )
    ).json()
    assert out["neighbors"] and {n["direction"] for n in out["neighbors"]} == {"outgoing"}
    assert "pep_0544" not in {n["id"] for n in out["neighbors"]}


async def test_outsider_cannot_resolve_a_typing_pep(client, pep_corpus):
    key = pep_corpus["user_outsider"]
    body = (await post(client, key, "/api/search/expand", {"entity_ids": ["pep_0484"]})).json()
    assert body["origins"] == [] and body["unresolved"] == ["pep_0484"]
    assert body["neighbors"] == []
    # and from an org-visible PEP, typing PEPs are neither results nor routes
    body = (
        await post(
            client,
            key,
            "/api/search/expand",
            {
                "entity_ids": ["pep_0008"],
                "depth": 3,
                "limit": 24,
                "relationship_types": ["MENTIONS"],
            },
        )
    ).json()
    assert body["origins"] == ["pep_0008"]
    assert all(n["project_id"] not in ("proj_typing", "proj_packaging") for n in body["neighbors"])
    r = await post(client, key, "/api/search/slice", {"entity_id": "pep_0484"})
    assert (r.status_code, r.json()) == (404, {"detail": "Entity not found"})


async def test_fetch_slice_of_pep_484_returns_three_spans_with_breadcrumbs(client, pep_corpus):
    key = pep_corpus["user_typing_reader"]
    body = (await post(client, key, "/api/search/slice", {"entity_id": "pep_0484"})).json()
    assert body["parent_name"] == "PEP 484: Type Hints" and body["sliced"] is True
    assert body["total"] == 3 and [p["passage_index"] for p in body["passages"]] == [0, 1, 2]
    assert all(p["breadcrumb"] for p in body["passages"])
    assert body["passages"][0]["content"].startswith("# Abstract")
    assert body["passage_total"] >= 3


async def test_a_draft_pep_is_visible_only_to_its_author(engine, client, pep_corpus):
    author = await make_key(engine, "user_mark_shannon")
    r = await post(client, author, "/api/search/slice", {"entity_id": "pep_0653"})
    assert r.status_code == 200 and r.json()["parent_id"] == "pep_0653"
    for reader in ("user_org_admin", "user_outsider", "user_typing_reader"):
        r = await post(client, pep_corpus[reader], "/api/search/slice", {"entity_id": "pep_0653"})
        assert (r.status_code, r.json()) == (404, {"detail": "Entity not found"}), reader
