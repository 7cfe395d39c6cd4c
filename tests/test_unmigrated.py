"""A service started on a database nobody migrated (``sibyl-pg serve`` before ``sibyl-pg
migrate``): the database answers, so ``/readyz`` says the schema is behind, not that the database
is unreachable; and every route is a 503 with ``Retry-After`` that says to migrate, never a 500.
The same for a database whose schema lacks a column the service reads (one at an older
migration): a 503 that says to migrate."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import httpx
import pytest

from app.api.app import create_app
from app.core.db import make_engine, with_database
from app.core.migrations import upgrade
from tests.builders import admin_sql
from tests.world import World


@pytest.fixture
async def bare(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    name = "sibyl_test_bare_" + secrets.token_hex(4)
    admin = with_database(database_url, "postgres")
    await admin_sql(admin, f'CREATE DATABASE "{name}"')
    engine = make_engine(with_database(database_url, name))
    try:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
    finally:
        await engine.dispose()
        await admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_readyz_says_the_schema_is_behind(bare: httpx.AsyncClient) -> None:
    r = await bare.get("/readyz")
    assert r.status_code == 503 and "retry-after" in r.headers
    assert r.json() == {
        "status": "unavailable",
        "detail": "database schema is not at the newest migration",
    }


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/search", {"query": "x"}),
        ("POST", "/api/search/expand", {"entity_ids": ["x"]}),
        ("GET", "/api/entities/x", None),
    ],
)
async def test_routes_are_503_not_500(bare: httpx.AsyncClient, method, path, body) -> None:
    r = await bare.request(method, path, json=body, headers={"Authorization": "Bearer k"})
    assert r.status_code == 503, r.text
    assert "retry-after" in r.headers
    assert r.json() == {
        "detail": "The database schema is not at the newest migration (run `sibyl-pg migrate`)"
    }


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/search/expand", {"entity_ids": ["a"], "depth": 2}),
        ("GET", "/api/entities/a", None),
    ],
)
async def test_a_missing_column_is_503_that_says_to_migrate(
    database_url: str, method: str, path: str, body: dict | None
) -> None:
    name = "sibyl_test_older_" + secrets.token_hex(4)
    admin = with_database(database_url, "postgres")
    await admin_sql(admin, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    engine = make_engine(url)
    try:
        await asyncio.to_thread(upgrade, url)  # alembic runs its own event loop
        key = await World().entity("a").entity("b").edge("a", "RELATED_TO", "b").load(engine)
        transport = httpx.ASGITransport(app=create_app(engine))
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.request(method, path, json=body, headers=headers)).is_success
            async with engine.begin() as conn:  # as if at a migration before `lifecycle`
                await conn.exec_driver_sql("ALTER TABLE entities RENAME COLUMN lifecycle TO lc")
            r = await client.request(method, path, json=body, headers=headers)
            assert r.status_code == 503, r.text
            assert "retry-after" in r.headers
            assert "sibyl-pg migrate" in r.json()["detail"]
    finally:
        await engine.dispose()
        await admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
