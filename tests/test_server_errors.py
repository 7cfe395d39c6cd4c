"""Every 5xx is logged with its cause, once (no SQL text, no body); a write waits for another
writer's row lock (in lock-timeout steps, retried), not for the read statement timeout."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from app.core.settings import get_settings
from app.domain import entities
from app.service import doctor
from tests.team import Team, call

LOCK_ROW = "SELECT 1 FROM entities WHERE org_id = $1 AND id = 'n1' FOR UPDATE"


async def hold_row_lock(database_url: str, org: str, seconds: float, held: asyncio.Event) -> None:
    """Lock memory n1 of ``org`` in another transaction for ``seconds``."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute(LOCK_ROW, org)
            held.set()
            await asyncio.sleep(seconds)
    finally:
        await conn.close()


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("sibyl_pg") and r.levelno >= level]


async def test_a_patch_waits_for_a_row_lock_held_longer_than_the_statement_timeout(
    engine, client, database_url, caplog
):
    t = await Team().load(engine)
    key = await t.key(engine, "ann")
    held = asyncio.Event()
    seconds = get_settings().statement_timeout_ms / 1000 + 1.5
    holder = asyncio.create_task(hold_row_lock(database_url, t.org, seconds, held))
    await held.wait()
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await call(client, "PATCH", "/api/entities/n1", key, json={"metadata": {"waited": True}})
    waited = loop.time() - started
    await holder
    assert r.status_code == 200, r.text  # not the 503 of a statement timeout
    assert r.json()["metadata"] == {"waited": True} and r.json()["revision"] == 2
    assert waited >= get_settings().statement_timeout_ms / 1000  # it did wait for the lock
    assert not records(caplog, logging.WARNING)


async def test_a_write_that_waits_past_its_bound_is_a_logged_503(
    engine, client, database_url, caplog, monkeypatch
):
    monkeypatch.setattr(get_settings(), "write_lock_wait_ms", 300)
    t = await Team().load(engine)
    key = await t.key(engine, "ann")
    held = asyncio.Event()
    holder = asyncio.create_task(hold_row_lock(database_url, t.org, 3.0, held))
    await held.wait()
    caplog.set_level(logging.INFO, logger="sibyl_pg")
    r = await call(client, "PATCH", "/api/entities/n1", key, json={"metadata": {"late": True}})
    await holder
    assert r.status_code == 503 and r.headers["Retry-After"]
    logged = records(caplog, logging.WARNING)
    assert len(logged) == 1  # one line per failure
    line = logged[0].getMessage()
    assert "PATCH /api/entities/n1 answered 503" in line
    assert "SQLSTATE 55P03" in line  # the cause: a lock wait ended by the lock timeout
    assert "SELECT" not in line and "late" not in line  # no SQL text, no body
    # the pair: the same PATCH once the lock is free is a 200, and logs nothing
    caplog.clear()
    r = await call(client, "PATCH", "/api/entities/n1", key, json={"metadata": {"late": True}})
    assert r.status_code == 200 and not records(caplog, logging.WARNING)


async def test_a_500_is_logged_once_with_its_cause_and_no_message(
    engine, client, caplog, monkeypatch
):
    t = await Team().load(engine)
    key = await t.key(engine, "ann")

    async def broken(*args, **kwargs):
        raise RuntimeError("SELECT secret FROM somewhere")  # a message that must not be logged

    monkeypatch.setattr(entities, "get_entity", broken)
    caplog.set_level(logging.INFO)
    r = await call(client, "GET", "/api/entities/n1", key)
    assert r.status_code == 500 and r.json() == {"detail": "Internal server error"}
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(logged) == 1, [rec.getMessage() for rec in logged]
    line = logged[0].getMessage()
    assert "GET /api/entities/n1 answered 500 (cause: RuntimeError)" in line
    assert "in broken" in line  # the stack's frames
    assert "secret" not in line and logged[0].exc_info is None


async def test_the_doctor_route_logs_a_failure_once(engine, client, caplog, monkeypatch):
    t = await Team().load(engine)
    key = await t.key(engine, "own", scopes=("read", "admin"))

    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "gather", broken)
    caplog.set_level(logging.INFO)
    r = await client.get("/api/admin/doctor", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 500
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(logged) == 1 and "GET /api/admin/doctor answered 500" in logged[0].getMessage()
