"""Migrations: one head; upgrade from empty, downgrade to base and up again; models agree."""

from __future__ import annotations

import asyncio
import secrets

import asyncpg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from app.core.db import with_database
from app.core.migrations import alembic_config, downgrade_base, upgrade
from tests.builders import admin_sql


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
    name = f"sibyl_mig_{secrets.token_hex(4)}"
    admin = with_database(database_url, "postgres")
    asyncio.run(admin_sql(admin, f'CREATE DATABASE "{name}"'))
    yield with_database(database_url, name)
    asyncio.run(admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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
