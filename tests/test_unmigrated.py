"""A service started on a database nobody migrated (``sibyl-pg serve`` before ``sibyl-pg
migrate``): the database answers, so ``/readyz`` says the schema is behind, not that the database
is unreachable; and every route is a 503 with ``Retry-After`` that says to migrate, never a 500."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import httpx
import pytest

from app.api.app import create_app
from app.core.db import make_engine, with_database
from tests.builders import admin_sql


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
