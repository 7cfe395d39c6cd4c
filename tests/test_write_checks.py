"""Write checks never reveal a hidden memory; communities never outlive readability; a permitted
edit never answers 404 (contract §2, §9 revised; issue 13 items 3, 4, 5).

Pair tests: every write route answers ``ann`` exactly the same in an org holding a memory she
cannot read (``sp``, private to bob, in a SUPERSEDES chain ``sx → sp → sa``) and in a control org
where ``sp`` was never written.
"""

from __future__ import annotations

from typing import Any

import httpx
from mcp import Client
from mcp.types import TextContent
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import write_tx
from app.domain import communities
from app.domain.entities import PRIVATE_BY_OWNER
from app.domain.permissions import NOT_MOVABLE
from app.mcp.server import build_mcp, fixed_key
from tests.builders import import_dicts
from tests.team import Team, answer, bob_note, call, scalar, snapshot

STAMPS = {"created_at", "updated_at"}


def chain(t: Team, *, hidden: bool) -> list[dict[str, Any]]:
    """``sx -SUPERSEDES-> sp -SUPERSEDES-> sa`` with ``sp`` private to bob (``hidden``), or
    ``sx`` and ``sa`` alone, ``sa`` stated as superseded as the chain leaves it."""

    def ent(id_: str, owner: str, **kw: Any) -> dict[str, Any]:
        base = {"kind": "entity", "org": t.org, "id": id_, "type": "note", "name": id_}
        return {**base, "owner": t.u(owner), "project": "p1", "scope": "project", **kw}

    def sup(src: str, dst: str) -> dict[str, Any]:
        return {"kind": "edge", "org": t.org, "src": src, "dst": dst, "relationship": "SUPERSEDES"}

    out = [ent("sa", "ann", lifecycle="superseded"), ent("sx", "bob")]
    if hidden:
        out += [ent("sp", "bob", scope="private"), sup("sx", "sp"), sup("sp", "sa")]
    return out


def same(value: Any, t: Team) -> Any:
    """``value`` without timestamps and with the org's user suffix neutralised."""
    if isinstance(value, dict):
        return {k: same(v, t) for k, v in value.items() if k not in STAMPS}
    if isinstance(value, list):
        return [same(v, t) for v in value]
    if isinstance(value, str):
        return value.replace(t.org, "ORG")
    return value


async def routes(engine: AsyncEngine, client: httpx.AsyncClient, t: Team) -> list[Any]:
    """Every write route, as ann, in order; their answers (status and body, normalised)."""
    ann = await t.key(engine, "ann")
    out: list[Any] = []

    async def rest(method: str, path: str, **kw: Any) -> None:
        status, body = answer(await call(client, method, path, ann, **kw))
        out.append((method, same(path, t), status, same(body, t)))

    edge = {"src": "sa", "relationship": "SUPERSEDES", "dst": "sx"}
    await rest("POST", "/api/edges", json=edge)  # the case: 201 in both orgs
    await rest("DELETE", "/api/edges", params=edge)
    await rest("POST", "/api/edges", json={**edge, "dst": "sp"})  # hidden ≡ absent
    await rest("POST", "/api/edges", json={"src": "sp", "relationship": "X", "dst": "sa"})
    new = {"id": "made", "type": "note", "name": "M", "content": "[[sp]] [[sa]]", "project": "p1"}
    await rest("POST", "/api/entities", json=new)
    await rest("PATCH", "/api/entities/made", json={"content": "now [[sp]] only"})
    await rest("PATCH", "/api/entities/sp", json={"name": "x"})
    await rest("GET", "/api/entities/sp")
    await rest("PUT", f"/api/entities/sp/grants/{t.u('vic')}")
    await rest("DELETE", f"/api/entities/sp/grants/{t.u('vic')}")
    await rest("PUT", f"/api/entities/sa/grants/{t.u('vic')}")  # her own memory
    await rest("DELETE", "/api/entities/sp")
    await rest("DELETE", "/api/entities/made")
    async with Client(build_mcp(lambda: engine, fixed_key(ann))) as mcp:
        for tool, args in [
            ("link", edge),
            ("link", {**edge, "dst": "sp"}),
            ("remember", {"id": "m2", "type": "note", "name": "M2", "content": "[[sp]]"}),
            ("remember", {"entity_id": "m2", "content": "[[sp]] [[sx]]"}),
            ("remember", {"entity_id": "sp", "content": "x"}),
        ]:
            result = await mcp.call_tool(tool, args)
            if result.is_error:
                content = result.content[0]
                assert isinstance(content, TextContent)
                body: Any = content.text
            else:
                body = result.structured_content
            out.append((tool, result.is_error, same(body, t)))
    return out


async def test_every_write_route_answers_the_same_with_and_without_a_hidden_memory(engine, client):
    hidden, control = Team(), Team()
    await hidden.load(engine, extra=chain(hidden, hidden=True))
    await control.load(engine, extra=chain(control, hidden=False))
    with_hidden = await routes(engine, client, hidden)
    without = await routes(engine, client, control)
    assert with_hidden == without
    assert with_hidden[0][2] == 201  # the cycle through the hidden sp is allowed
    assert with_hidden[2][2] == 404


async def test_a_visible_supersedes_cycle_is_still_refused(engine, client):
    t = Team()
    await t.load(engine, extra=chain(t, hidden=True))
    bob = await t.key(engine, "bob")  # bob reads sp: the cycle is his to see
    r = await call(
        client,
        "POST",
        "/api/edges",
        bob,
        json={"src": "sa", "relationship": "SUPERSEDES", "dst": "sx"},
    )
    assert answer(r) == (409, {"detail": "This SUPERSEDES edge would close a cycle"})


async def test_only_the_owner_may_make_a_memory_private(engine, client):
    t = await Team().load(engine)
    keys = {n: await t.key(engine, n) for n in ("ann", "bob", "adm")}
    before = await snapshot(engine, t.org)
    refused = (403, {"detail": PRIVATE_BY_OWNER})
    for who in ("bob", "adm"):  # a maintainer and an org admin: may edit n1, do not own it
        r = await call(client, "PATCH", "/api/entities/n1", keys[who], json={"scope": "private"})
        assert answer(r) == refused, who
        ok = await call(client, "PATCH", "/api/entities/n1", keys[who], json={"name": "Kept"})
        assert ok.status_code == 200, who  # the same writer's other edits apply
    async with Client(build_mcp(lambda: engine, fixed_key(keys["bob"]))) as mcp:
        result = await mcp.call_tool("remember", {"entity_id": "n2", "scope": "private"})
        assert result.is_error and result.content[0].text == PRIVATE_BY_OWNER
    after = {row[0]: row for row in await snapshot(engine, t.org)}
    assert after["n2"] == {row[0]: row for row in before}["n2"]
    # the owner (ann) may: the change applies and she still reads it
    r = await call(client, "PATCH", "/api/entities/n1", keys["ann"], json={"scope": "private"})
    assert r.status_code == 200 and r.json()["scope"] == "private", r.text
    assert (await call(client, "GET", "/api/entities/n1", keys["ann"])).status_code == 200
    assert (await call(client, "GET", "/api/entities/n1", keys["bob"])).status_code == 404

    # a memory imported without an owner has nobody to make it private: an org admin who could
    # edit it became its owner that way and took it from every other reader (a breaker's trial)
    await import_dicts(
        engine,
        [
            {
                "kind": "entity",
                "org": t.org,
                "id": "nobodys",
                "type": "note",
                "name": "x",
                "content": "team",
                "project": "p1",
                "scope": "project",
            }
        ],
    )
    r = await call(client, "PATCH", "/api/entities/nobodys", keys["adm"], json={"scope": "private"})
    assert answer(r) == refused
    got = await call(client, "GET", "/api/entities/nobodys", keys["bob"])
    assert (got.status_code, got.json()["scope"], got.json()["owner_id"]) == (200, "project", None)


async def test_a_contributor_may_edit_but_not_move_a_colleagues_memory(engine, client):
    """Moving a project memory out of its project changes who reads it: a contributor who does
    not own it is refused (403, nothing changes, REST and MCP alike) and may still edit it; its
    owner, a maintainer of the project and an org admin may move it."""
    t = await Team().load(engine)
    keys = {n: await t.key(engine, n) for n in ("ovw", "ann", "bob", "adm")}
    before = await snapshot(engine, t.org)
    refused = (403, {"detail": NOT_MOVABLE})
    for move in ({"scope": "org"}, {"project": "p2"}, {"scope": "project", "project": "p3"}):
        r = await call(client, "PATCH", "/api/entities/n1", keys["ovw"], json=move)
        assert answer(r) == refused, move
    async with Client(build_mcp(lambda: engine, fixed_key(keys["ovw"]))) as mcp:
        result = await mcp.call_tool("remember", {"entity_id": "n1", "scope": "org"})
        assert result.is_error and result.content[0].text == NOT_MOVABLE
    assert await snapshot(engine, t.org) == before
    ok = await call(client, "PATCH", "/api/entities/n1", keys["ovw"], json={"name": "Edited"})
    assert ok.status_code == 200, ok.text  # the contributor's edit applies

    # its owner (ann, a contributor), an org admin, a maintainer of its project (bob) may
    for who, memory in (("ann", "n2"), ("adm", "n2"), ("bob", "n1")):
        r = await call(client, "PATCH", f"/api/entities/{memory}", keys[who], json={"scope": "org"})
        assert r.status_code == 200 and r.json()["scope"] == "org", (who, r.text)
        if who != "bob":  # back home (bob, not its owner, may not write an org memory)
            home = {"scope": "project", "project": "p1"}
            r = await call(client, "PATCH", f"/api/entities/{memory}", keys[who], json=home)
            assert r.status_code == 200, (who, r.text)


async def _walk(client: httpx.AsyncClient, key: str, seed: str) -> list[tuple[str, str]]:
    body = {"entity_ids": [seed], "relationship_types": ["SHARES_COMMUNITY"], "limit": 24}
    r = await call(client, "POST", "/api/search/expand", key, json=body)
    assert r.status_code == 200, r.text
    return [(n["id"], n["relationship"]) for n in r.json()["neighbors"]]


async def _context_ids(client: httpx.AsyncClient, key: str) -> str:
    r = await call(client, "POST", "/api/context/pack", key, json={"goal": "alphaword"})
    assert r.status_code == 200, r.text
    return r.text


async def test_communities_are_retired_when_a_member_turns_private(engine, client):
    t, vic, bob = await _community_world(engine)
    assert ("cb", "SHARES_COMMUNITY") in await _walk(client, vic, "ca")  # the precondition
    r = await call(client, "PATCH", "/api/entities/cx", bob, json={"scope": "private"})
    assert r.status_code == 200, r.text
    count = "SELECT count(*) FROM communities WHERE org_id = :o"
    assert await scalar(engine, count, o=t.org) == 0  # retired in the PATCH's transaction
    assert await _walk(client, vic, "ca") == []
    assert '"cb"' not in await _context_ids(client, vic)
    # rebuilt, the community is computed under the new readability: a and b are not joined
    async with write_tx(engine) as conn:
        await communities.rebuild(conn, org_id=t.org)
    assert ("cb", "SHARES_COMMUNITY") not in await _walk(client, vic, "ca")


async def _community_world(engine: AsyncEngine) -> tuple[Team, str, str]:
    """ca -> cx -> cb in p1 (owner bob), one community rebuilt; (team, vic's key, bob's key)."""
    t = Team()

    def dep(src: str, dst: str) -> dict[str, Any]:
        return {"kind": "edge", "org": t.org, "src": src, "dst": dst, "relationship": "DEPENDS_ON"}

    texts = {"ca": "alphaword first", "cx": "the middle", "cb": "betaword last"}
    extra = [bob_note(t, id_, content, project="p1") for id_, content in texts.items()]
    await t.load(engine, extra=[*extra, dep("ca", "cx"), dep("cx", "cb")])
    async with write_tx(engine) as conn:
        await communities.rebuild(conn, org_id=t.org)
    return t, await t.key(engine, "vic"), await t.key(engine, "bob")  # vic: a p1 viewer


async def test_a_link_from_a_memory_the_reader_cannot_read_retires_nothing(engine, client):
    # New-user trial, 2026-11-30: a private note saying [[ca]] (or an edge from it) removed the
    # SHARES_COMMUNITY neighbours of ca for a reader who cannot read the note. A link with a
    # private end never formed a community (detection runs per audience), so it retires none:
    # the viewer sees exactly what it saw before. The pair: the same link from a p1 memory the
    # viewer reads does retire, and the viewer sees that memory too.
    t, vic, bob = await _community_world(engine)
    count = "SELECT count(*) FROM communities WHERE org_id = :o"
    seen = (await _walk(client, vic, "ca"), await _context_ids(client, vic))
    assert ("cb", "SHARES_COMMUNITY") in seen[0]  # the precondition
    hidden = {"id": "pn", "type": "note", "name": "pn", "content": "see [[ca]]"}
    edge = {"src": "pn", "relationship": "RELATED_TO", "dst": "cb"}
    for method, path, kw in [
        ("POST", "/api/entities", {"json": {**hidden, "scope": "private", "project": "p1"}}),
        ("POST", "/api/edges", {"json": edge}),
        ("DELETE", "/api/edges", {"params": edge}),
        ("PATCH", "/api/entities/pn", {"json": {"content": "now [[cb]] and [[cx]]"}}),
        ("DELETE", "/api/entities/pn", {}),
    ]:
        r = await call(client, method, path, bob, **kw)
        assert r.status_code in (200, 201, 204), (method, path, r.text)
        assert await scalar(engine, count, o=t.org) == 1, (method, path)
        assert (await _walk(client, vic, "ca"), await _context_ids(client, vic)) == seen
    body = {"id": "cy", "type": "note", "name": "cy", "content": "see [[ca]]", "project": "p1"}
    r = await call(client, "POST", "/api/entities", bob, json=body)
    assert r.status_code == 201, r.text
    assert await scalar(engine, count, o=t.org) == 0
    assert await _walk(client, vic, "ca") == []
    assert (await call(client, "GET", "/api/entities/cy", vic)).status_code == 200


async def test_a_link_that_joins_the_audience_retires_what_it_may_change(engine, client):
    # Adversarial review, 2026-11-30 (both gaps older than the audience rule): an imported new
    # p1 memory linking a member, and a private linker moved into p1, now count in p1's
    # detection, so they retire its community; the same private linker changed in place, or an
    # imported private one, retires nothing (the pair).
    count = "SELECT count(*) FROM communities WHERE org_id = :o"

    t, vic, bob = await _community_world(engine)
    await import_dicts(engine, [bob_note(t, "hidden_linker", "see [[ca]]", scope="private")])
    assert await scalar(engine, count, o=t.org) == 1
    await import_dicts(engine, [bob_note(t, "cy", "see [[ca]]", project="p1")])
    assert await scalar(engine, count, o=t.org) == 0
    assert await _walk(client, vic, "ca") == []

    t, vic, bob = await _community_world(engine)
    body = {"id": "pn", "type": "note", "name": "pn", "content": "[[ca]] [[cb]]"}
    r = await call(client, "POST", "/api/entities", bob, json={**body, "scope": "private"})
    assert r.status_code == 201, r.text
    r = await call(client, "PATCH", "/api/entities/pn", bob, json={"name": "still private"})
    assert r.status_code == 200 and await scalar(engine, count, o=t.org) == 1
    r = await call(
        client, "PATCH", "/api/entities/pn", bob, json={"scope": "project", "project": "p1"}
    )
    assert r.status_code == 200, r.text
    assert await scalar(engine, count, o=t.org) == 0


async def test_every_link_change_retires_the_communities_it_touches(engine, client):
    count = "SELECT count(*) FROM communities WHERE org_id = :o"
    for method, path, kw in [
        ("DELETE", "/api/edges", {"params": {"src": "n1", "relationship": "R", "dst": "n2"}}),
        ("POST", "/api/edges", {"json": {"src": "n2", "relationship": "S", "dst": "n1"}}),
        ("PATCH", "/api/entities/n1", {"json": {"content": "[[n2]]"}}),
        ("PATCH", "/api/entities/n2", {"json": {"lifecycle": "retired"}}),
        ("PATCH", "/api/entities/n2", {"json": {"project": "p3"}}),
        ("DELETE", "/api/entities/n2", {}),
    ]:
        t = await Team().load(engine)
        bob = await t.key(engine, "bob")
        linked = {"src": "n1", "relationship": "R", "dst": "n2"}
        assert (await call(client, "POST", "/api/edges", bob, json=linked)).status_code == 201
        async with write_tx(engine) as conn:
            await communities.rebuild(conn, org_id=t.org)
        assert await scalar(engine, count, o=t.org) == 1
        r = await call(client, method, path, bob, **kw)
        assert r.status_code in (200, 201, 204), (path, r.text)
        assert await scalar(engine, count, o=t.org) == 0, (method, path, kw)
