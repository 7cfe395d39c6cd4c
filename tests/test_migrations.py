"""Migrations: one head; upgrade from empty, downgrade to base and up again; models agree."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import asyncpg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from app.core.migrations import alembic_config, downgrade_base, upgrade
from tests.builders import throwaway_database


async def _tables(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


def test_single_head():
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1


@pytest.fixture
def empty_database(database_url):
    with throwaway_database(database_url, "sibyl_mig") as url:
        yield url


def test_upgrade_downgrade_upgrade_and_models_agree(empty_database):
    url = empty_database
    upgrade(url)
    tables = asyncio.run(_tables(url))
    for table in (
        "orgs",
        "users",
        "api_keys",
        "projects",
        "project_members",
        "entities",
        "entity_grants",
        "edges",
        "mentions",
        "passages",
        "communities",
        "community_members",
    ):
        assert table in tables
    command.check(alembic_config(url))  # models and migrations agree
    downgrade_base(url)
    assert asyncio.run(_tables(url)) <= {"alembic_version"}
    upgrade(url)
    assert "edges" in asyncio.run(_tables(url))


def test_every_table_carries_org_id(database_url):
    async def go() -> list[str]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                """SELECT t.tablename FROM pg_tables t
                   WHERE t.schemaname = 'public' AND t.tablename <> 'alembic_version'
                     AND NOT EXISTS (SELECT 1 FROM information_schema.columns c
                                     WHERE c.table_name = t.tablename
                                       AND c.column_name IN ('org_id'))
                     AND t.tablename <> 'orgs'"""
            )
            return [r["tablename"] for r in rows]
        finally:
            await conn.close()

    assert asyncio.run(go()) == []


def _hold_lock(url: str, table: str, held: threading.Event, release: threading.Event) -> None:
    """In its own thread: hold ``table`` in ACCESS EXCLUSIVE mode until ``release`` is set."""

    async def hold() -> None:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                held.set()
                while not release.is_set():
                    await asyncio.sleep(0.02)
        finally:
            await conn.close()

    asyncio.run(hold())


def test_a_migration_gives_up_on_a_held_lock_and_changes_nothing(empty_database):
    """A migration waiting behind another session's lock would queue every later query of the
    table behind it: past the lock timeout it fails (55P03) leaving the schema as it was, and
    the same upgrade succeeds once the lock is gone (SIBYL_MIGRATION_LOCK_TIMEOUT_MS)."""
    url = empty_database
    upgrade(url)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    command.downgrade(alembic_config(url), "-1")
    before = asyncio.run(_version(url))
    assert before != head

    held, release = threading.Event(), threading.Event()
    # term_audiences: the table the head migration (0011) alters
    holder = threading.Thread(target=_hold_lock, args=(url, "term_audiences", held, release))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(Exception) as caught:
            upgrade(url, lock_timeout_ms=200)
        raised = (caught.value, getattr(caught.value, "orig", None))
        assert "55P03" in {getattr(e, "sqlstate", None) for e in raised}
        assert asyncio.run(_version(url)) == before
    finally:
        release.set()
        holder.join(30)
    upgrade(url, lock_timeout_ms=200)
    assert asyncio.run(_version(url)) == head


def test_the_cli_says_in_one_line_that_a_migration_gave_up_on_a_lock(empty_database):
    url = empty_database
    upgrade(url)
    command.downgrade(alembic_config(url), "-1")
    held, release = threading.Event(), threading.Event()
    # term_audiences: the table the head migration (0011) alters
    holder = threading.Thread(target=_hold_lock, args=(url, "term_audiences", held, release))
    holder.start()
    try:
        assert held.wait(30)
        env = {**os.environ, "DATABASE_URL": url, "SIBYL_MIGRATION_LOCK_TIMEOUT_MS": "200"}
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        release.set()
        holder.join(30)
    assert done.returncode == 2, done.stderr
    assert "lock timeout 200 ms" in done.stderr and "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr


async def _version(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()
