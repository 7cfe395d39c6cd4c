"""Every rule of contract §2 as a pair, on both read paths of the walking skeleton.

For each protected row there is a reader who may see it (it comes back: as a neighbor and by
``fetch_slice``) and a reader who may not, whose answers are compared with the answers the same
reader gets in a *control org* built identically except that the row does not exist: they must
be byte-identical (absent and denied are indistinguishable, and an unreadable row is not a route).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import import_dicts, make_key

LONG = "\n\n".join(
    f"## Part {i}\n\n" + " ".join(f"word{i}_{j}" for j in range(150)) for i in range(6)
)


def records(org: str, sfx: str, omit: str | None) -> list[dict]:
    """A small org exercising every §2 rule; ``omit`` leaves one entity out (the control)."""

    def u(name: str) -> str:
        return f"user_{name}_{sfx}"

    users = {
        "ann": "member",
        "bob": "member",
        "cat": "member",
        "dan": "admin",
        "eve": "member",
        "fay": "member",
    }
    out: list[dict] = [{"kind": "org", "id": org, "name": "Rules"}]
    out += [
        {"kind": "user", "id": u(n), "org": org, "handle": n, "role": r} for n, r in users.items()
    ]
    out += [
        {"kind": "project", "id": "p1", "org": org, "name": "Private one", "visibility": "private"},
        {"kind": "project", "id": "p2", "org": org, "name": "Open two", "visibility": "org"},
        {"kind": "member", "project": "p1", "user": u("ann"), "role": "contributor"},
        {"kind": "member", "project": "p1", "user": u("bob"), "role": "owner"},
        {"kind": "member", "project": "p1", "user": u("cat"), "role": "viewer"},
        {"kind": "member", "project": "p1", "user": u("fay"), "role": "viewer"},
    ]

    def ent(
        id_: str,
        *,
        scope: str,
        project: str | None,
        owner: str = "ann",
        content: str = "",
        type_: str = "note",
    ) -> dict:
        rec = {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": type_,
            "name": f"Name of {id_}",
            "content": content or f"Body of {id_}.",
            "scope": scope,
            "owner": u(owner),
        }
        if project:
            rec["project"] = project
        return rec

    entities = [
        ent("hub_p1", scope="project", project="p1"),
        ent("hub_p2", scope="project", project="p2"),
        ent("priv_in_p1", scope="private", project="p1"),
        ent("beyond_priv", scope="project", project="p1"),
        ent("org_note", scope="org", project=None),
        ent("p1_doc", scope="project", project="p1"),
        ent("p2_doc", scope="project", project="p2"),
        ent("priv_loose", scope="private", project=None),
        ent("long_priv", scope="private", project="p1", content=LONG, type_="document"),
    ]
    out += [e for e in entities if e["id"] != omit]
    present = {e["id"] for e in entities if e["id"] != omit}
    for hub in ("hub_p1", "hub_p2"):
        for e in entities:
            if e["id"] not in (hub, "beyond_priv") and e["id"] in present:
                out.append(
                    {
                        "kind": "edge",
                        "org": org,
                        "src": hub,
                        "dst": e["id"],
                        "relationship": "RELATED_TO",
                    }
                )
    if {"priv_in_p1", "beyond_priv"} <= present:
        out.append(
            {
                "kind": "edge",
                "org": org,
                "src": "beyond_priv",
                "dst": "priv_in_p1",
                "relationship": "DEPENDS_ON",
            }
        )
    if "priv_in_p1" in present:
        out.append({"kind": "grant", "entity": "priv_in_p1", "user": u("fay")})
    if "priv_loose" in present:
        out.append({"kind": "grant", "entity": "priv_loose", "user": u("eve")})
    return out


@dataclass(frozen=True)
class Case:
    row: str
    allowed: tuple[str, ...]
    denied: tuple[str, ...]
    why: str


# reader names: a user name, or "bob@p1" for bob with a key restricted to project p1.
CASES = [
    Case(
        "priv_in_p1",
        ("ann", "fay"),
        ("bob", "cat", "dan"),
        "private in a project: owner or grant (and project readable); membership alone and org "
        "admin never",
    ),
    Case(
        "priv_loose",
        ("ann", "eve"),
        ("bob", "dan", "ann@p1"),
        "private without project: owner or grant; never through a project-restricted key",
    ),
    Case("org_note", ("eve", "bob"), ("bob@p1",), "org scope vs project-restricted key"),
    Case("p2_doc", ("eve", "cat"), ("bob@p1",), "org-visible project vs restricted key"),
    Case("p1_doc", ("cat", "dan", "bob@p1"), ("eve",), "private project: members and org admins"),
    Case("long_priv", ("ann",), ("bob", "dan"), "a passage is exactly as readable as its parent"),
]


async def _world(engine, omit: str | None) -> tuple[str, dict[str, str]]:
    org = "org_rules_" + secrets.token_hex(4)
    sfx = secrets.token_hex(3)
    await import_dicts(engine, records(org, sfx, omit))
    keys: dict[str, str] = {}
    for name in ("ann", "bob", "cat", "dan", "eve", "fay"):
        keys[name] = await make_key(engine, f"user_{name}_{sfx}")
    keys["bob@p1"] = await make_key(engine, f"user_bob_{sfx}", projects=["p1"])
    keys["ann@p1"] = await make_key(engine, f"user_ann_{sfx}", projects=["p1"])
    return org, keys


async def _answers(client, key: str, row: str, passage: str | None) -> dict[str, Any]:
    h = {"Authorization": f"Bearer {key}"}
    out: dict[str, Any] = {}
    for depth in (1, 2, 3):
        r = await client.post(
            "/api/search/expand",
            json={"entity_ids": ["hub_p1", "hub_p2", row], "depth": depth, "limit": 24},
            headers=h,
        )
        assert r.status_code == 200
        out[f"expand{depth}"] = r.json()
    for target in (row, passage):
        if target is None:
            continue
        r = await client.post("/api/search/slice", json={"entity_id": target}, headers=h)
        out[f"slice:{target == row}"] = (r.status_code, r.text)
    return out


def _mentions(answer: dict[str, object], row: str) -> bool:
    return row in str(answer)


@pytest.mark.parametrize("case", CASES, ids=[c.row for c in CASES])
async def test_read_rule_pair(engine, client, case: Case):
    _, full_keys = await _world(engine, omit=None)
    _, ctrl_keys = await _world(engine, omit=case.row)
    passage = None
    if case.row == "long_priv":
        h = {"Authorization": f"Bearer {full_keys['ann']}"}
        r = await client.post("/api/search/slice", json={"entity_id": "long_priv"}, headers=h)
        assert r.status_code == 200 and r.json()["sliced"] is True
        passage = r.json()["passages"][1]["id"]

    for reader in case.allowed:
        got = await _answers(client, full_keys[reader], case.row, passage)
        assert got["slice:True"][0] == 200, (case.why, reader)
        assert case.row in got["expand1"]["origins"], (case.why, reader)
        hubs_seen = [n["id"] for n in got["expand1"]["neighbors"]]
        if any(h in got["expand1"]["origins"] for h in ("hub_p1", "hub_p2")):
            # Seeds are never neighbors, so drop the row from the seeds to see it as a neighbor.
            h = {"Authorization": f"Bearer {full_keys[reader]}"}
            r = await client.post(
                "/api/search/expand",
                json={"entity_ids": ["hub_p1", "hub_p2"], "limit": 24},
                headers=h,
            )
            hubs_seen = [n["id"] for n in r.json()["neighbors"]]
            assert case.row in hubs_seen, (case.why, reader)
        if passage is not None:
            assert got["slice:False"][0] == 200, (case.why, reader)

    for reader in case.denied:
        got = await _answers(client, full_keys[reader], case.row, passage)
        want = await _answers(client, ctrl_keys[reader], case.row, passage)
        assert got == want, (case.why, reader)
        assert got["slice:True"] == (404, '{"detail":"Entity not found"}'), (case.why, reader)
        for depth in (1, 2, 3):
            neighbors = got[f"expand{depth}"]["neighbors"]
            assert case.row not in [n["id"] for n in neighbors], (case.why, reader)
            assert case.row in got[f"expand{depth}"]["unresolved"]
        if case.row == "priv_in_p1":
            # A node reachable only through the unreadable one is not returned either.
            assert "beyond_priv" not in str(got["expand3"]["neighbors"]), reader
        if passage is not None:
            assert got["slice:False"] == (404, '{"detail":"Entity not found"}')


async def test_another_org_is_invisible(engine, client):
    _, keys_a = await _world(engine, omit=None)
    _, keys_b = await _world(engine, omit=None)
    # Same ids exist in both orgs; each reader reads its own org's rows only.
    h = {"Authorization": f"Bearer {keys_a['eve']}"}
    r = await client.post("/api/search/slice", json={"entity_id": "p2_doc"}, headers=h)
    assert r.status_code == 200
    org_b = "org_other_" + secrets.token_hex(4)
    await import_dicts(
        engine,
        [
            {"kind": "org", "id": org_b, "name": "B"},
            {"kind": "user", "id": f"u_{org_b}", "org": org_b, "handle": "x", "role": "owner"},
            {
                "kind": "entity",
                "id": "only_in_b",
                "org": org_b,
                "type": "note",
                "name": "B note",
                "content": "b",
                "scope": "org",
            },
        ],
    )
    for key in keys_a.values():
        r = await client.post(
            "/api/search/slice",
            json={"entity_id": "only_in_b"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 404
        assert r.json() == {"detail": "Entity not found"}
    del keys_b
