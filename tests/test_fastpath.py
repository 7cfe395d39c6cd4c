"""``POST /api/search/expand`` without the framework (``app/api/fastpath.py``, issue 31).

The served path answers the ordinary request itself and hands every other one to the
application. What a client relies on: every request gets the same status, headers and body as
the route alone gives (an application built without the path), for the answers and for every
refusal; and an ordinary request really is answered without the route (else the path would cost
without paying).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import app.api.routes as routes
from app.api.app import create_app
from app.api.fastpath import ExpandFastPath
from app.domain.keys import create_key, revoke_key
from tests.world import World

PATH = "/api/search/expand"


@pytest.fixture
async def bare(engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the application without the path: every request goes through the route."""
    app = create_app(engine)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not ExpandFastPath]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        yield client


def _seen(r: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {k: v for k, v in r.headers.items() if k != "date"}
    return r.status_code, headers, r.content


async def test_every_request_is_answered_as_the_route_answers_it(
    engine: AsyncEngine, client: httpx.AsyncClient, bare: httpx.AsyncClient
) -> None:
    world = World()
    other = f"user_other_{world.org}"
    world.records.append(
        {"kind": "user", "id": other, "org": world.org, "handle": "o", "role": "member"}
    )
    world.entity("a", content="x" * 900).entity("b").entity("c", scope="private", owner=other)
    world.edge("a", "DEPENDS_ON", "b").edge("a", "RELATED_TO", "c").edge("b", "RELATED_TO", "c")
    key = await world.load(engine)
    async with engine.begin() as conn:
        writer_only_id, writer_only = await create_key(
            conn, user_id=world.user, scopes=["write"], label="no read"
        )
        revoked_id, revoked = await create_key(
            conn, user_id=world.user, scopes=["read"], label="revoked"
        )
        await revoke_key(conn, key_id=revoked_id)

    def bearer(k: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {k}"}

    def bearers(*keys: str) -> list[tuple[str, str]]:
        return [("Authorization", f"Bearer {k}") for k in keys]  # one header per key

    json_type = {"Content-Type": "application/json"}
    cases: list[dict[str, Any]] = [
        {"json": {"entity_ids": ["a"]}, "headers": bearer(key)},
        {
            "json": {"entity_ids": ["a", "c", "nope"], "depth": 9, "limit": 0},
            "headers": bearer(key),
        },
        {"json": {"entity_ids": [f"s{i}" for i in range(10)]}, "headers": bearer(key)},
        {"json": {"entity_ids": ["a"], "content_max_chars": 10}, "headers": bearer(key)},
        {
            "json": {"entity_ids": ["a"], "relationship_types": ["DEPENDS_ON"]},
            "headers": bearer(key),
        },
        {"json": {"entity_ids": []}, "headers": bearer(key)},  # 400
        {"json": {"entity_ids": ["  "]}, "headers": bearer(key)},  # 400
        {"json": {"entity_ids": ["a"], "relationship_types": ["NO SUCH"]}, "headers": bearer(key)},
        {"json": {"entity_ids": "a"}, "headers": bearer(key)},  # 422
        {"json": {"entity_ids": ["a"], "depth": "deep"}, "headers": bearer(key)},  # 422
        {"json": {"entity_ids": ["a"], "unknown": 1}, "headers": bearer(key)},
        {"json": ["a"], "headers": bearer(key)},  # 422
        {"content": b"{not json", "headers": {**bearer(key), **json_type}},
        {
            "content": b'{"entity_ids": ["a"]}',
            "headers": {**bearer(key), "Content-Type": "text/plain"},
        },
        {"content": b'{"entity_ids": ["a"]}', "headers": bearer(key)},  # no media type: 415
        {"json": {"entity_ids": ["a"]}, "headers": bearer("sk_unknown")},  # 401
        {"json": {"entity_ids": ["a"]}, "headers": bearer(revoked)},  # 401
        {"json": {"entity_ids": "a"}, "headers": bearer(revoked)},  # 401 before the 422
        {"json": {"entity_ids": []}, "headers": bearer(revoked)},  # 401 before the 400
        {"json": {"entity_ids": ["a"]}, "headers": bearer(writer_only)},  # 403
        {"json": {"entity_ids": ["a"]}, "headers": {"Authorization": f"Basic {key}"}},
        {"json": {"entity_ids": ["a"]}, "headers": {"Authorization": "Bearer "}},
        {"json": {"entity_ids": ["a"]}, "headers": {}},  # 401
        {"json": {"entity_ids": ["a\x00"]}, "headers": bearer(key)},
        # several headers of a name: the application reads the first (found by a breaker:
        # the path read the last, so another key, or JSON where the route said 415)
        {"json": {"entity_ids": ["a"]}, "headers": [*bearers(key, revoked)]},
        {"json": {"entity_ids": ["a"]}, "headers": [*bearers(revoked, key)]},
        {"json": {"entity_ids": ["a"]}, "headers": [("Authorization", "Basic x"), *bearers(key)]},
        {
            "content": b'{"entity_ids": ["a"]}',
            "headers": [*bearers(key), ("Content-Type", "text/plain"), *json_type.items()],
        },
        {
            "content": b'{"entity_ids": ["a"]}',
            "headers": [*bearers(key), ("Content-Type", "application/a/b+json")],
        },
        {
            "content": b'{"entity_ids": ["a"]}',
            "headers": [*bearers(key), ("Content-Type", "application/vnd.x+json; charset=utf-8")],
        },
    ]
    statuses = set()
    for case in cases:
        served = await client.post(PATH, **case)
        routed = await bare.post(PATH, **case)
        assert _seen(served) == _seen(routed), case
        statuses.add(served.status_code)
    assert {200, 400, 401, 403, 415, 422} <= statuses  # each kind of answer was compared
    assert writer_only_id


async def test_an_ordinary_request_is_answered_without_the_route(
    engine: AsyncEngine, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await World().entity("a").entity("b").edge("a", "DEPENDS_ON", "b").load(engine)
    routed: list[object] = []
    original = routes.expand_keyed

    async def spy(*args: object, **kwargs: object) -> bytes:
        routed.append(args)
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(routes, "expand_keyed", spy)
    headers = {"Authorization": f"Bearer {key}"}
    r = await client.post(PATH, json={"entity_ids": ["a"]}, headers=headers)
    assert r.status_code == 200
    assert [n["id"] for n in r.json()["neighbors"]] == ["b"]
    assert routed == []  # answered by the path
    r = await client.post(PATH, json={"entity_ids": "a"}, headers=headers)
    assert r.status_code == 422  # handed to the route, whose validation answers
