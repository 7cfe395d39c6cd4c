"""The automatic refresh of the search word statistics (app/service/workers/search_stats.py,
issue 12).

- an org is due exactly when a refresh would change what its readers weigh with: a write that
  retired an audience, a memory created since its audience's count, an org never counted;
  a private memory (in no audience) never makes it due, and a recount ends it;
- a tick recounts the due orgs (their readers go from the fallback weights back to counts), at
  most once per max(interval, 10 × the last recount's time) an org; a process whose lock another
  holds does nothing; a serving process runs the refresher when SIBYL_STATS_REFRESH_S > 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import httpx
from sqlalchemy import text

from app.api.app import create_app
from app.core.settings import get_settings
from app.domain import memories
from app.domain.search import SearchSettings, build_query
from app.repo import term_stats
from app.repo import workers as workers_repo
from app.repo.readers import reader_by_key
from app.service.workers import search_stats as refresher
from app.service.workers.search_stats import Refresher
from tests.builders import audience_freshness
from tests.team import Team, call


async def _due(engine, org: str) -> bool:
    async with engine.connect() as conn:
        return org in await term_stats.due_orgs(conn, [org])


async def _counted(engine, key: str) -> bool:
    """Whether ``key``'s reader weighs words from counts (False: the fallback weights)."""
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
        assert reader is not None
        return (await build_query(conn, reader, "kelp", SearchSettings())).counted


async def _post(client, key: str, **body) -> None:
    r = await call(client, "POST", "/api/entities", key, json={"type": "note", **body})
    assert r.status_code in (200, 201), r.text


async def test_an_org_is_due_exactly_when_a_recount_would_change_its_weights(engine, client):
    t = await Team().load(engine)
    assert await _due(engine, t.org)  # never counted
    await term_stats.refresh_orgs(engine, [t.org])
    assert not await _due(engine, t.org)
    ann, own = await t.key(engine, "ann"), await t.key(engine, "own")

    # a private memory belongs to no audience: created or edited, the org is not due
    await _post(client, ann, id="priv9", name="Mine", content="Private words.", scope="private")
    r = await call(client, "PATCH", "/api/entities/mine", ann, json={"content": "Still mine."})
    assert r.status_code == 200, r.text
    assert not await _due(engine, t.org)
    # ... while a project memory created since the count makes it due (its words are in no
    # count), and the recount ends it
    await _post(client, ann, id="n9", name="New", content="Kelp grows here.", project="p1")
    assert await _due(engine, t.org)
    await term_stats.refresh_orgs(engine, [t.org])
    assert not await _due(engine, t.org)

    # an edit of a counted memory retires its audience: due
    r = await call(client, "PATCH", "/api/entities/orgnote", own, json={"content": "Edited."})
    assert r.status_code == 200, r.text
    assert await _due(engine, t.org)
    await term_stats.refresh_orgs(engine, [t.org])
    assert not await _due(engine, t.org)

    # a memory moved out of a counted audience (scope org -> project p2) retires it: due
    r = await call(
        client, "PATCH", "/api/entities/orgnote", own, json={"scope": "project", "project": "p2"}
    )
    assert r.status_code == 200, r.text
    assert await _due(engine, t.org)


async def test_a_tick_recounts_due_orgs_at_most_once_per_gap(engine, client):
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    ann = await t.key(engine, "ann")
    now = [1000.0]
    ticker = Refresher(engine, interval_s=60, orgs=[t.org], clock=lambda: now[0])

    assert await ticker.tick() == {}  # nothing due
    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"content": "Kelp, edited."})
    assert r.status_code == 200, r.text
    assert not await _counted(engine, ann)  # p1 retired: ann's reader falls back
    done = await ticker.tick()
    assert set(done) == {t.org}
    assert await _counted(engine, ann) and not await _due(engine, t.org)

    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"content": "Kelp, again."})
    assert r.status_code == 200, r.text
    assert await ticker.tick() == {}  # within the gap of the last recount
    assert not await _counted(engine, ann)
    now[0] += 61
    assert set(await ticker.tick()) == {t.org}
    assert await _counted(engine, ann)


async def test_a_process_skips_its_tick_while_another_holds_the_lock(engine, client):
    t = await Team().load(engine)
    own = await t.key(engine, "own")
    r = await call(client, "PATCH", "/api/entities/orgnote", own, json={"content": "Edited."})
    assert r.status_code == 200, r.text
    ticker = Refresher(engine, interval_s=60, orgs=[t.org])
    async with engine.connect() as other:
        assert (await other.execute(workers_repo.tick_lock(refresher.TICK_LOCK))).scalar()
        assert await ticker.tick() == {}  # the other process is refreshing
        await other.execute(workers_repo.tick_unlock(refresher.TICK_LOCK))
        await other.commit()
    assert set(await ticker.tick()) == {t.org}
    assert not await _due(engine, t.org)


async def test_a_serving_process_runs_the_refresher_when_enabled(engine, monkeypatch):
    ticks: list[float] = []

    async def tick(self: Refresher) -> dict[str, tuple[int, int]]:
        ticks.append(self.interval_s)
        return {}

    monkeypatch.setattr(Refresher, "tick", tick)
    for interval, expect in ((0.01, True), (0.0, False)):
        ticks.clear()
        settings = get_settings().model_copy(update={"stats_refresh_s": interval})
        app = create_app(engine, settings=settings)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test"
            ) as c:
                assert (await c.get("/healthz")).status_code == 200
            for _ in range(200):
                if ticks:
                    break
                await asyncio.sleep(0.01)
        assert bool(ticks) is expect


async def test_an_org_whose_recount_fails_does_not_hold_the_others_back(
    engine, client, monkeypatch
):
    """A write of ``busy`` holds its statistics lock (shared) longer than the refresher's arming
    waits: that org is reported failed, the next one is recounted; once the write ends, the next
    tick after the interval recounts ``busy`` too."""
    busy, calm = await Team().load(engine), await Team().load(engine)
    monkeypatch.setattr(refresher, "ARM_WAIT_S", 0.2)
    now = [0.0]
    orgs = sorted([busy.org, calm.org])
    ticker = Refresher(engine, interval_s=60, orgs=orgs, clock=lambda: now[0])
    try:
        async with engine.connect() as writer:
            await writer.execute(term_stats.RETIRE_LOCK_SQL, {"org_id": busy.org})
            done = await ticker.tick()
            await writer.rollback()
        assert done[busy.org].error == "RefreshBusy" and done[calm.org].error is None
        assert await _due(engine, busy.org) and not await _due(engine, calm.org)
        assert await ticker.tick() == {}  # busy waits for the interval
        now[0] += 61
        assert set(await ticker.tick()) == {busy.org}
        assert not await _due(engine, busy.org)
    finally:
        await ticker.close()


async def test_a_memory_moved_into_an_audience_retires_it_even_one_with_no_row(engine, client):
    """A move retired only the audience it left: a private memory moved into p1 left p1's counts
    fresh without it, and a move into a project never counted made no org due (an adversarial
    review). Now the audience it joins is retired too, and one with no row gets a row, not
    fresh."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    ann, own = await t.key(engine, "ann"), await t.key(engine, "own")

    r = await call(
        client, "PATCH", "/api/entities/mine", ann, json={"scope": "project", "project": "p1"}
    )
    assert r.status_code == 200, r.text
    assert await _fresh(engine, t.org) == {"p1": False, "p2": True, "p3": True, "*": True}
    assert await _due(engine, t.org)
    await term_stats.refresh_orgs(engine, [t.org])

    # p2's only memory leaves it: its row goes at the next count; a move back into p2 (no row)
    r = await call(client, "PATCH", "/api/entities/pub", own, json={"project": "p1"})
    assert r.status_code == 200, r.text
    await term_stats.refresh_orgs(engine, [t.org])
    assert "p2" not in await _fresh(engine, t.org) and not await _due(engine, t.org)
    r = await call(client, "PATCH", "/api/entities/pub", own, json={"project": "p2"})
    assert r.status_code == 200, r.text
    assert (await _fresh(engine, t.org))["p2"] is False
    assert await _due(engine, t.org)
    await term_stats.refresh_orgs(engine, [t.org])
    assert (await _fresh(engine, t.org))["p2"] is True and not await _due(engine, t.org)


_fresh = audience_freshness


async def test_each_audience_is_checked_against_its_own_snapshot(engine, client):
    """Two audiences counted with snapshots of the same xmin, p1's not seeing a memory created
    since and p2's seeing it: due (a check against one snapshot per org could pick p2's)."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    ann = await t.key(engine, "ann")
    await _post(client, ann, id="n9", name="New", content="Kelp grows here.", project="p1")
    async with engine.begin() as conn:
        xid = (
            await conn.execute(
                text("SELECT created_xid::text FROM entities WHERE org_id = :o AND id = 'n9'"),
                {"o": t.org},
            )
        ).scalar_one()
        blind, seeing = f"{xid}:{xid}:", f"{xid}:{int(xid) + 10}:"
        for audience, snapshot in (("p1", blind), ("p2", seeing), ("p3", seeing), ("*", seeing)):
            await conn.execute(
                text(
                    "UPDATE term_audiences"
                    " SET counted_snapshot = CAST(CAST(:s AS text) AS pg_snapshot)"
                    " WHERE org_id = :o AND audience = :a"
                ),
                {"s": snapshot, "o": t.org, "a": audience},
            )
    assert await _due(engine, t.org)
    async with engine.begin() as conn:  # p1's snapshot sees it too: nothing is due
        await conn.execute(
            text(
                "UPDATE term_audiences"
                " SET counted_snapshot = CAST(CAST(:s AS text) AS pg_snapshot)"
                " WHERE org_id = :o AND audience = 'p1'"
            ),
            {"s": seeing, "o": t.org},
        )
    assert not await _due(engine, t.org)


async def test_memories_from_another_cluster_never_keep_an_org_due(engine):
    """p1's memories carry transaction ids ahead of this cluster (a restored dump): its count
    stamps no snapshot, and the recount ends the org's turn (a check of every audience against
    another's snapshot kept it due on every tick)."""
    t = await Team().load(engine)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE entities SET created_xid = CAST('9000000000' AS xid8)"
                " WHERE org_id = :o AND scope = 'project' AND project_id = 'p1'"
            ),
            {"o": t.org},
        )
    ticker = Refresher(engine, interval_s=0.01, orgs=[t.org])
    try:
        assert set(await ticker.tick()) == {t.org}
        assert not await _due(engine, t.org)
        await asyncio.sleep(0.02)
        assert await ticker.tick() == {}
    finally:
        await ticker.close()


async def test_an_org_is_recounted_at_most_once_per_ten_times_its_recount(engine, client):
    t = await Team().load(engine)
    own = await t.key(engine, "own")
    now = [0.0]

    def clock() -> float:  # every reading 1 s later: a recount "takes" a second or two
        now[0] += 1.0
        return now[0]

    ticker = Refresher(engine, interval_s=1, orgs=[t.org], clock=clock)
    try:
        done = await ticker.tick()
        assert set(done) == {t.org} and done[t.org].seconds == 1.0  # the gap: 10 s
        r = await call(client, "PATCH", "/api/entities/orgnote", own, json={"content": "x"})
        assert r.status_code == 200, r.text
        now[0] += 3  # past the interval, within 10 × the recount
        assert await ticker.tick() == {}
        now[0] += 20
        assert set(await ticker.tick()) == {t.org}
    finally:
        await ticker.close()


async def test_an_org_named_like_the_refresher_shares_no_lock_with_it(engine):
    """The refresher's lock is in the two-key space: an org's statistics lock (one key, from
    its id) held by a write never stops a tick, whatever the org is called."""
    async with engine.connect() as writer:
        await writer.execute(term_stats.RETIRE_LOCK_SQL, {"org_id": "refresher"})
        async with engine.connect() as other:
            assert (await other.execute(workers_repo.tick_lock(refresher.TICK_LOCK))).scalar()
            await other.execute(workers_repo.tick_unlock(refresher.TICK_LOCK))
            await other.commit()
        await writer.rollback()


async def test_shutdown_ends_a_tick_in_the_middle_of_a_statement(engine, monkeypatch):
    """Cancelling the refresher while its look at the due orgs runs ends the task (it used to be
    swallowed as a failed tick, and shutdown hung)."""
    started = asyncio.Event()

    async def slow_due(conn, orgs=None):
        started.set()
        await conn.execute(text("SELECT pg_sleep(30)"))
        return []

    monkeypatch.setattr(term_stats, "due_orgs", slow_due)
    context = refresher.lifespan(engine, 0.01)
    await context.__aenter__()
    await asyncio.wait_for(started.wait(), timeout=30)
    await asyncio.wait_for(context.__aexit__(None, None, None), timeout=20)


async def test_a_memory_whose_creator_was_still_running_at_the_count_makes_its_org_due(engine):
    """A memory created by a transaction that had not committed when the count's snapshot was
    taken is in none of the counts: once it commits, its org is due (its id lies between the
    snapshot's xmin and xmax)."""
    t = await Team().load(engine)
    data = memories.EntityData(
        id="late",
        type="note",
        name="Late",
        content="Written while the count ran.",
        scope="project",
        project_id="p1",
        owner_id=t.u("ann"),
    )
    async with engine.begin() as conn:
        await memories.save_entity(conn, org_id=t.org, data=data, evidence_lines=40)
        await term_stats.refresh_orgs(engine, [t.org])  # counted while the creator runs
        assert not await _due(engine, t.org)  # not committed: nothing to count yet
    assert await _due(engine, t.org)
    await term_stats.refresh_orgs(engine, [t.org])
    assert not await _due(engine, t.org)


async def test_shutdown_ends_a_tick_in_the_middle_of_a_recount(engine, monkeypatch):
    """Cancelling the refresher while it recounts an org (a statement of the count running)
    ends the task: the recount is not reported as the org's failure and the next org is not
    started."""
    t = await Team().load(engine)
    started = asyncio.Event()
    calls: list[str] = []

    async def slow_refresh(conn, *, org_id, arm_wait_s=None):
        calls.append(org_id)
        started.set()
        await conn.execute(text("SELECT pg_sleep(30)"))
        return (0, 0)

    async def due(conn, orgs=None):
        return [t.org, t.org + "_next"]

    monkeypatch.setattr(term_stats, "refresh", slow_refresh)
    monkeypatch.setattr(term_stats, "due_orgs", due)
    context = refresher.lifespan(engine, 1.0)
    await context.__aenter__()
    await asyncio.wait_for(started.wait(), timeout=30)
    await asyncio.wait_for(context.__aexit__(None, None, None), timeout=20)
    assert calls == [t.org]


async def test_failed_ticks_back_off(engine, monkeypatch):
    """With the database gone every tick fails: the refresher waits 2, 4, ... intervals between
    tries instead of logging a failure every interval (a breaker trial: a line a second)."""
    tries: list[float] = []

    async def failing(self: Refresher) -> dict:
        tries.append(asyncio.get_running_loop().time())
        raise OSError("database gone")

    monkeypatch.setattr(Refresher, "tick", failing)
    task = asyncio.create_task(Refresher(engine, interval_s=0.02).run())
    await asyncio.sleep(1.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # without backoff ~50 tries; with it 0.02 + 0.04 + 0.08 + 0.16 + 0.32 + 0.64 > 1 s: ≤ 6
    assert 2 <= len(tries) <= 6
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert all(later > earlier for earlier, later in itertools.pairwise(gaps))
