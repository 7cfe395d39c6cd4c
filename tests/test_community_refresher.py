"""Communities retired by writes come back on their own (a new-user trial, 2026-12-01: one small
write removed the ``SHARES_COMMUNITY`` neighbours of every reader of the org until an operator
ran ``sibyl-pg communities rebuild``). A retiring write records its org in its transaction; a
serving process's :class:`~app.service.workers.communities.CommunityRefresher` rebuilds the
recorded orgs; a rebuild never stores communities a concurrent write made stale."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import write_tx
from app.domain import communities
from app.service.workers.communities import CommunityRefresher
from tests.team import LOCK_WAITERS, Team, bob_note, call, scalar

RECORDS = "SELECT count(*) FROM community_retirements WHERE org_id = :o"
COMMUNITIES = "SELECT count(*) FROM communities WHERE org_id = :o"


async def _world(engine: AsyncEngine) -> tuple[Team, str, str]:
    """ca -> cx -> cb in p1 (bob's), their community built; (team, vic's key, bob's key)."""
    t = Team()
    notes = [bob_note(t, i, f"{i} text", project="p1") for i in ("ca", "cx", "cb")]
    edges = [
        {"kind": "edge", "org": t.org, "src": s, "dst": d, "relationship": "DEPENDS_ON"}
        for s, d in (("ca", "cx"), ("cx", "cb"))
    ]
    await t.load(engine, extra=[*notes, *edges])
    async with write_tx(engine) as conn:
        await communities.rebuild(conn, org_id=t.org)
    assert await scalar(engine, RECORDS, o=t.org) == 0  # the rebuild cleared what it saw
    return t, await t.key(engine, "vic"), await t.key(engine, "bob")


async def _community_neighbours(client: httpx.AsyncClient, key: str, seed: str) -> list[str]:
    body = {"entity_ids": [seed], "relationship_types": ["SHARES_COMMUNITY"], "limit": 24}
    r = await call(client, "POST", "/api/search/expand", key, json=body)
    assert r.status_code == 200, r.text
    return sorted(n["id"] for n in r.json()["neighbors"])


def _refresher(engine: AsyncEngine, org: str, max_links: int = 200_000) -> CommunityRefresher:
    return CommunityRefresher(
        engine, interval_s=60, max_links=max_links, orgs=[org], clock=lambda: 0.0
    )


async def _tick(engine: AsyncEngine, org: str, max_links: int = 200_000) -> dict[str, Any]:
    """One look of a fresh refresher confined to ``org``, closed after it."""
    refresher = _refresher(engine, org, max_links)
    try:
        return await refresher.tick()
    finally:
        await refresher.close()


async def test_a_retiring_write_is_rebuilt_by_the_refresher(engine, client):
    t, vic, bob = await _world(engine)
    assert await _community_neighbours(client, vic, "ca") == ["cb", "cx"]
    # a p1 note linking two members: it retires their community, for every reader of p1
    body = {"id": "cn", "type": "note", "name": "cn", "project": "p1", "content": "[[ca]] [[cb]]"}
    assert (await call(client, "POST", "/api/entities", bob, json=body)).status_code == 201
    assert await _community_neighbours(client, vic, "ca") == []
    assert await scalar(engine, RECORDS, o=t.org) >= 1  # recorded in the write's transaction
    done = await _tick(engine, t.org)
    assert done[t.org].status == "rebuilt"
    assert await scalar(engine, RECORDS, o=t.org) == 0  # no longer due
    back = await _community_neighbours(client, vic, "ca")
    assert back  # ca has community neighbours again: those an operator's rebuild gives
    async with write_tx(engine) as conn:
        await communities.rebuild(conn, org_id=t.org)
    assert await _community_neighbours(client, vic, "ca") == back


async def test_a_write_the_audience_cannot_see_records_nothing(engine, client):
    # the pair of the test above: a private note's links never formed a community, so the org
    # is not due (no rebuild runs for a write that cannot change any reader's communities)
    t, vic, bob = await _world(engine)
    body = {"id": "pn", "type": "note", "name": "pn", "scope": "private", "content": "[[ca]]"}
    assert (await call(client, "POST", "/api/entities", bob, json=body)).status_code == 201
    edge = {"src": "pn", "relationship": "RELATED_TO", "dst": "cb"}
    assert (await call(client, "POST", "/api/edges", bob, json=edge)).status_code == 201
    assert await scalar(engine, RECORDS, o=t.org) == 0
    assert await _community_neighbours(client, vic, "ca") == ["cb", "cx"]


async def test_a_write_during_a_rebuild_keeps_the_org_due(engine, client, monkeypatch):
    """A write that changes the org while a rebuild reads and detects it commits its record:
    the rebuild then replaces nothing (it would store communities built without the write) and
    the org stays due; the next rebuild stores the communities of the org as it now is."""
    t, vic, bob = await _world(engine)
    real = communities.detect
    wrote: list[int] = []

    def detect_while_writing(memories, links):
        if not wrote:  # cx leaves the project while the first rebuild detects

            async def move() -> int:
                r = await call(client, "PATCH", "/api/entities/cx", bob, json={"scope": "private"})
                return r.status_code

            wrote.append(asyncio.run_coroutine_threadsafe(move(), loop).result(30))
        return real(memories, links)

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(communities, "detect", detect_while_writing)
    await call(
        client,
        "POST",
        "/api/edges",
        bob,
        json={"src": "ca", "relationship": "RELATED_TO", "dst": "cb"},
    )
    assert await scalar(engine, COMMUNITIES, o=t.org) == 0  # the edge retired them
    refresher = _refresher(engine, t.org)
    try:
        first = await refresher.tick()
        assert wrote == [200] and first[t.org].status == "changed"
        assert await scalar(engine, COMMUNITIES, o=t.org) == 0  # nothing stale was stored
        assert await scalar(engine, RECORDS, o=t.org) >= 1
        refresher._next_allowed.clear()  # the next look, without waiting for the gap
        second = await refresher.tick()
    finally:
        await refresher.close()
    assert second[t.org].status == "rebuilt"
    # built under the new readability: cx is private, ca and cb are joined by their own edge
    assert await _community_neighbours(client, vic, "ca") == ["cb"]


async def test_an_org_over_the_link_bound_is_left_to_the_operator(engine, client):
    t, vic, bob = await _world(engine)
    edge = {"src": "ca", "relationship": "RELATED_TO", "dst": "cb"}
    assert (await call(client, "POST", "/api/edges", bob, json=edge)).status_code == 201
    done = await _tick(engine, t.org, max_links=2)  # the org holds 3 links now
    assert done[t.org].status == "too_big"
    assert await _community_neighbours(client, vic, "ca") == []
    assert await scalar(engine, RECORDS, o=t.org) >= 1  # still due for the operator's rebuild


async def test_a_freshly_imported_org_is_due_its_first_communities(engine):
    # an import into an org without communities records it too: a serving process builds them
    t = Team()
    notes = [bob_note(t, i, f"{i} text", project="p1") for i in ("fa", "fb")]
    edge = {"kind": "edge", "org": t.org, "src": "fa", "dst": "fb", "relationship": "DEPENDS_ON"}
    await t.load(engine, extra=[*notes, edge])
    assert await scalar(engine, RECORDS, o=t.org) >= 1
    done = await _tick(engine, t.org)
    assert done[t.org].status == "rebuilt" and done[t.org].communities == 1


@pytest.mark.parametrize("starved", ["overtaken here", "waited long"])
async def test_an_org_whose_writes_never_leave_a_gap_gets_a_rebuild_that_holds_them(
    engine, client, monkeypatch, starved
):
    """A breaker's trial: under 20 writes a second every rebuild was overtaken and the touched
    communities stayed retired while the writes went on. After OVERTAKEN_LIMIT overtaken
    rebuilds here, or once the org's oldest record has waited HOLD_AFTER_INTERVALS intervals
    (other processes tried), the next rebuild of a quick org holds the writes that would retire
    communities back: a write during it waits, the rebuild stores its communities, then the
    write retires what it touches among them (and records the org again)."""
    from app.service.workers import communities as community_refresher

    t, _, bob = await _world(engine)
    edge = {"src": "ca", "relationship": "RELATED_TO", "dst": "cb"}
    assert (await call(client, "POST", "/api/edges", bob, json=edge)).status_code == 201
    loop = asyncio.get_running_loop()
    writes: list[Any] = []
    real = communities.detect

    def detect_while_writing(memories, links):
        body = {"content": f"[[ca]] {len(writes)}"}
        edit = call(client, "PATCH", "/api/entities/cx", bob, json=body)
        writes.append(asyncio.run_coroutine_threadsafe(edit, loop))
        for _ in range(300):  # until the write is done (not held back) or waits on a lock
            held = asyncio.run_coroutine_threadsafe(scalar(engine, LOCK_WAITERS), loop).result(30)
            if writes[-1].done() or held:
                break
            time.sleep(0.02)
        return real(memories, links)

    monkeypatch.setattr(communities, "detect", detect_while_writing)
    refresher = _refresher(engine, t.org)
    if starved == "overtaken here":  # as after 3 overtaken rebuilds in this process
        refresher._overtaken[t.org] = community_refresher.OVERTAKEN_LIMIT
    else:  # or in other processes (a breaker: two servers taking turns): the record has waited
        waited = "UPDATE community_retirements SET retired_at = now() - interval '1 hour'"
        async with engine.begin() as conn:
            await conn.execute(text(waited + " WHERE org_id = :o"), {"o": t.org})
    try:
        done = await refresher.tick()
    finally:
        await refresher.close()
    answers = [await asyncio.wrap_future(w) for w in writes]
    assert done[t.org].status == "rebuilt"
    assert [a.status_code for a in answers] == [200]  # it waited for the rebuild, then wrote
    assert t.org not in refresher._overtaken
    assert await scalar(engine, RECORDS, o=t.org) >= 1  # the write retired what it touched


async def test_a_rebuild_does_not_wait_long_behind_a_long_write(engine, client):
    """A long transaction that may change communities (an atomic import) holds the org's
    community lock shared until it commits; a rebuild waiting for it would queue every later
    retiring write behind it. So a rebuild waits at most LOCK_WAIT_MS, then gives up (nothing
    replaced, the org stays due) and a write behind it goes through; once the long write
    committed, the next rebuild succeeds."""
    from app.repo import communities as community_repo

    t, _, bob = await _world(engine)
    edge = {"src": "ca", "relationship": "RELATED_TO", "dst": "cb"}
    assert (await call(client, "POST", "/api/edges", bob, json=edge)).status_code == 201
    async with engine.connect() as long_write:
        tx = await long_write.begin()
        await community_repo.mark(long_write, org_id=t.org)  # holds the lock shared
        refresher = _refresher(engine, t.org)
        try:
            # it gives up instead of waiting for the long write's commit (which would never come:
            # the long write commits below; wait_for turns that wait into a failure, not a hang)
            first = await asyncio.wait_for(refresher.tick(), 60)
            assert first[t.org].status == "changed"
            # a write behind it is not held back for the long write either
            assert (await call(client, "DELETE", "/api/edges", bob, params=edge)).status_code == 204
            await tx.commit()
            refresher._next_allowed.clear()
            second = await refresher.tick()
        finally:
            await refresher.close()
    assert second[t.org].status == "rebuilt"


async def test_a_rebuild_is_analyzed_on_the_connection_that_wrote_it(engine, client, monkeypatch):
    # PostgreSQL reports a session's row counts at most once a second: analyzed on another
    # connection, the rebuild's rows showed as changed since ANALYZE once its counts came in,
    # and the doctor warned after every automatic rebuild (a new-user trial)
    from app.repo import communities as repo
    from app.service.workers import communities as community_refresher

    t, _, bob = await _world(engine)
    body = {"id": "cn", "type": "note", "name": "cn", "project": "p1", "content": "[[ca]] [[cb]]"}
    assert (await call(client, "POST", "/api/entities", bob, json=body)).status_code == 201
    writers: list[int] = []
    analyzers: list[int] = []
    real_rebuild, real_vacuum = community_refresher.rebuild, repo.vacuum

    async def rebuild(conn: Any, **kw: Any) -> Any:
        writers.append(await conn.scalar(text("SELECT pg_backend_pid()")))
        return await real_rebuild(conn, **kw)

    async def vacuum(conn: Any) -> None:
        analyzers.append(await conn.scalar(text("SELECT pg_backend_pid()")))
        await real_vacuum(conn)

    monkeypatch.setattr(community_refresher, "rebuild", rebuild)
    monkeypatch.setattr(repo, "vacuum", vacuum)
    done = await _tick(engine, t.org)
    assert done[t.org].status == "rebuilt"
    assert writers and analyzers == writers
