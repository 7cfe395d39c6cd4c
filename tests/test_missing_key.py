"""A request without an API key is a 401 before the database is asked: it holds no pooled
connection and opens no transaction, and it stays a 401 (not a 503) while the database is down."""

from __future__ import annotations

import httpx
import pytest

from app.api.app import create_app
from app.core.db import make_engine

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/nowhere"  # nothing listens on port 1

ROUTES = [
    ("POST", "/api/search/expand", {"entity_ids": ["a"]}),
    ("POST", "/api/search/slice", {"entity_id": "a"}),
    ("POST", "/api/search", {"query": "a"}),
    ("POST", "/api/context/pack", {"goal": "a"}),
    ("GET", "/api/entities/a", None),
    ("POST", "/api/entities", {"type": "note", "name": "n", "content": "c"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_a_missing_key_is_401_without_the_database(
    method: str, path: str, body: dict[str, object] | None
) -> None:
    engine = make_engine(UNREACHABLE, statement_timeout_ms=2000)
    app = create_app(engine=engine)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            answer = await client.request(method, path, json=body)
    finally:
        await engine.dispose()
    assert answer.status_code == 401, answer.text
    assert answer.json() == {"detail": "Missing API key"}
    assert answer.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path", "body"), [r for r in ROUTES if r[2] is not None])
async def test_a_missing_key_is_401_even_with_a_body_of_the_wrong_shape(
    method: str, path: str, body: dict[str, object]
) -> None:
    """As over MCP (refused at the transport), a keyless request learns nothing of the schema:
    401 comes before 422 as it comes before 400."""
    engine = make_engine(UNREACHABLE, statement_timeout_ms=2000)
    app = create_app(engine=engine)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            answer = await client.request(method, path, json={**body, "no_such_field": 1})
            bare = await client.request(method, path, content=b"not json")
    finally:
        await engine.dispose()
    for got in (answer, bare):
        assert got.status_code == 401, got.text
        assert got.json() == {"detail": "Missing API key"}
        assert got.headers["www-authenticate"] == "Bearer"
