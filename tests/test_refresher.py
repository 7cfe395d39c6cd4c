"""The automatic refresh of the search word statistics (app/domain/refresher.py, issue 12).

- an org is due exactly when a refresh would change what its readers weigh with: a write that
  retired an audience, a memory created since its audience's count, an org never counted;
  a private memory (in no audience) never makes it due, and a recount ends it;
- a tick recounts the due orgs (their readers go from the fallback weights back to counts), at
  most once per max(interval, 10 × the last recount's time) an org; a process whose lock another
  holds does nothing; a serving process runs the refresher when SIBYL_STATS_REFRESH_S > 0.
"""

from __future__ import annotations

import asyncio

import httpx

from app.api.app import create_app
from app.core.settings import get_settings
from app.domain import refresher
from app.domain.refresher import Refresher
from app.domain.search import weigh
from app.repo import term_stats
from app.repo.readers import reader_by_key
from tests.team import Team, call


async def _due(engine, org: str) -> bool:
    async with engine.connect() as conn:
        return org in await term_stats.due_orgs(conn, [org])


async def _counted(engine, key: str) -> bool:
    """Whether ``key``'s reader weighs words from counts (False: the fallback weights)."""
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
        assert reader is not None
        _, scoring = await weigh(conn, reader, "kelp")
        return scoring.counted


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
        assert (await other.execute(refresher.TICK_LOCK_SQL)).scalar()
        assert await ticker.tick() == {}  # the other process is refreshing
        await other.execute(refresher.TICK_UNLOCK_SQL)
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
    """A write of ``busy`` holds its statistics lock (shared) longer than an arming polls: that
    org is not recounted, the next one is; once the write ends, the next tick after the gap
    recounts ``busy`` too."""
    busy, calm = await Team().load(engine), await Team().load(engine)
    monkeypatch.setattr(term_stats, "ARM_WAIT_S", 0.2)
    now = [0.0]
    ticker = Refresher(
        engine, interval_s=60, orgs=sorted([busy.org, calm.org]), clock=lambda: now[0]
    )
    async with engine.connect() as writer:
        await writer.execute(term_stats.RETIRE_LOCK_SQL, {"org_id": busy.org})
        assert set(await ticker.tick()) == {calm.org}
        await writer.rollback()
    assert await _due(engine, busy.org) and not await _due(engine, calm.org)
    assert await ticker.tick() == {}  # busy waits for its gap
    now[0] += 61
    assert set(await ticker.tick()) == {busy.org}
    assert not await _due(engine, busy.org)
