"""The REST expand serving path (issue 15): what it sends, and the behaviours it must keep.

- one request is exactly one round trip: one statement that authenticates the key, resolves the
  seeds and walks, on a read-only connection of generic plans, without ``BEGIN``/``COMMIT`` (one
  statement is one snapshot; no ping before checkout);
- the key checks keep their answers and their order: 401 for a missing, unknown or revoked key
  (before any 400 of the body), 403 without the ``read`` scope; an absent seed and an unreadable
  one are both ``unresolved``;
- a pooled connection that died (its backend terminated, as by a database restart) is replaced:
  the next read and the next write succeed, with no ping before checkout;
- the benchmark's lean load client keeps one connection and reads sized and chunked answers.

Counts statements and answers, never times.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import make_engine, statement_engine
from app.domain.keys import create_key, revoke_key
from tests.builders import import_dicts, make_key
from tests.world import World


def auth(key: str) -> dict[str, str]:
    """The bearer header of ``key``."""
    return {"Authorization": f"Bearer {key}"}


async def test_an_expand_is_one_statement_on_a_read_only_generic_plan_connection(
    engine: AsyncEngine, client: httpx.AsyncClient
) -> None:
    key = await World().entity("a").entity("b").edge("a", "RELATED_TO", "b").load(engine)
    r = await client.post("/api/search/expand", json={"entity_ids": ["a"]}, headers=auth(key))
    assert r.status_code == 200  # warm: the pooled connection exists

    prepared: list[str] = []  # statements sent through SQLAlchemy (extended protocol)
    simple: list[str] = []  # statements the driver sends itself (BEGIN, COMMIT, a ping's `;`)
    logged: set[int] = set()
    checked_out: list[Any] = []

    def on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        driver = dbapi_connection.driver_connection
        checked_out.append(driver)
        if id(driver) not in logged:
            logged.add(id(driver))
            driver.add_query_logger(lambda record: simple.append(record.query))

    def on_execute(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        prepared.append(statement)

    engines = [engine.sync_engine, statement_engine(engine).sync_engine]
    for eng in engines:
        event.listen(eng.pool, "checkout", on_checkout)
        event.listen(eng, "before_cursor_execute", on_execute)
    try:
        r = await client.post(
            "/api/search/expand", json={"entity_ids": ["a"], "depth": 2}, headers=auth(key)
        )
        assert r.status_code == 200
        assert [n["id"] for n in r.json()["neighbors"]] == ["b"]
    finally:
        for eng in engines:
            event.remove(eng, "before_cursor_execute", on_execute)
            event.remove(eng.pool, "checkout", on_checkout)
    names = [s.split("*/")[0].removeprefix("/* sibyl:").strip() for s in prepared]
    assert names == ["expand_neighbors.keyed"]
    assert simple == [], simple  # no BEGIN, no COMMIT, no ping
    assert len(checked_out) == 1
    settings = await checked_out[0].fetchrow(
        "SELECT current_setting('plan_cache_mode') AS plan,"
        " current_setting('transaction_read_only') AS read_only"
    )
    assert tuple(settings) == ("force_generic_plan", "on")


async def test_the_key_checks_keep_their_answers_and_their_order(
    engine: AsyncEngine, client: httpx.AsyncClient
) -> None:
    w = World().entity("a").entity("b").edge("a", "RELATED_TO", "b")
    key = await w.load(engine)
    write_only = await make_key(engine, w.user, scopes=("write",))
    good = {"entity_ids": ["a", "nowhere"]}
    blank = {"entity_ids": ["  "]}

    def answer(r: httpx.Response) -> tuple[int, Any]:
        return r.status_code, r.json()["detail"]

    post = client.post
    assert answer(await post("/api/search/expand", json=good)) == (401, "Missing API key")
    assert answer(await post("/api/search/expand", json=blank)) == (401, "Missing API key")
    for body in (good, blank):  # an unknown key is a 401 before the body's 400
        r = await post("/api/search/expand", json=body, headers=auth("sibyl_nope"))
        assert answer(r) == (401, "Invalid API key")
        r = await post("/api/search/expand", json=body, headers=auth(write_only))
        assert answer(r) == (403, "This key lacks the 'read' scope")
    r = await post("/api/search/expand", json=blank, headers=auth(key))
    assert r.status_code == 400
    r = await post("/api/search/expand", json=good, headers=auth(key))
    assert r.status_code == 200
    assert (r.json()["origins"], r.json()["unresolved"]) == (["a"], ["nowhere"])

    async with engine.begin() as conn:
        key_id, fresh = await create_key(conn, user_id=w.user, scopes=("read",))
    assert (await post("/api/search/expand", json=good, headers=auth(fresh))).status_code == 200
    async with engine.begin() as conn:
        await revoke_key(conn, key_id=key_id)
    r = await post("/api/search/expand", json=good, headers=auth(fresh))
    assert answer(r) == (401, "Invalid API key")  # at once: no cache between key and reader


async def test_a_dead_pooled_connection_is_replaced_without_a_ping(database_url: str) -> None:
    from app.api.app import create_app

    own = make_engine(database_url, statement_timeout_ms=2000)
    pids: set[int] = set()  # the backends of this engine's connections only (never the shared
    # session engine's, which other tests use without the revival of app.service.session)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        pids.add(dbapi_connection.driver_connection.get_server_pid())

    event.listen(own.sync_engine, "connect", on_connect)
    # the REST expand's one-statement connections, and the other verbs' (writes)
    event.listen(statement_engine(own).sync_engine, "connect", on_connect)
    w = World().entity("a").entity("b").edge("a", "RELATED_TO", "b")
    key = await w.load(own)
    writer = await make_key(own, w.user, scopes=("read", "write"))
    admin_user = f"user_admin_{w.org}"
    await import_dicts(
        own, [{"kind": "user", "id": admin_user, "org": w.org, "handle": "adm", "role": "admin"}]
    )
    admin_key = await make_key(own, admin_user, scopes=("read", "admin"))
    app = create_app(own)
    transport = httpx.ASGITransport(app=app)
    body = {"entity_ids": ["a"]}
    memory = {"type": "note", "name": "n", "content": "c", "project": "proj"}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            # every route that reads the database: a verb, a write, readiness, an admin route
            for surface in ("read", "write", "ready", "admin"):
                r = await client.post("/api/search/expand", json=body, headers=auth(key))
                assert r.status_code == 200
                # the pool now holds idle connections; end their backends, as a restart would
                admin = await asyncpg.connect(database_url)
                try:
                    ended = await admin.fetchval(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE pid = ANY($1::int[]) AND state = 'idle'",
                        sorted(pids),
                    )
                finally:
                    await admin.close()
                assert ended >= 1
                if surface == "read":
                    r = await client.post("/api/search/expand", json=body, headers=auth(key))
                    assert r.status_code == 200, r.text
                    assert [n["id"] for n in r.json()["neighbors"]] == ["b"]
                elif surface == "write":
                    r = await client.post("/api/entities", json=memory, headers=auth(writer))
                    assert r.status_code == 201, r.text
                elif surface == "ready":
                    r = await client.get("/readyz")
                    assert (r.status_code, r.json()) == (200, {"status": "ready"}), r.text
                else:
                    r = await client.get("/api/admin/doctor", headers=auth(admin_key))
                    assert r.status_code == 200, r.text
    finally:
        await own.dispose()


async def test_the_bench_load_client_reads_sized_and_chunked_answers_over_one_connection() -> None:
    # the benchmark's lean HTTP/1.1 client (bench.run.KeepAliveClient): what it parses
    import asyncio

    from bench.run import KeepAliveClient

    answers = [
        b'HTTP/1.1 200 OK\r\ncontent-length: 7\r\ncontent-type: application/json\r\n\r\n{"a":1}',
        b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n"
        b'3\r\n{"b\r\n4\r\n":2}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ]
    connections: list[int] = []
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            writer.write(answers.pop(0))
            await writer.drain()
            if b"connection: close" in head.lower() or not answers:
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KeepAliveClient("127.0.0.1", port, {"Authorization": "Bearer k"})
    try:
        assert await client.post("/x", b'{"q":1}') == (200, b'{"a":1}')
        assert await client.post("/x", b"{}") == (503, b'{"b":2}')
        assert await client.post("/x", b"{}") == (200, b"{}")
        assert client.writer is None  # the server said close: reopened by the next call
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
    assert len(connections) == 1  # keep-alive: three requests, one connection
    assert seen[0].startswith(b"POST /x HTTP/1.1\r\n") and b"Authorization: Bearer k" in seen[0]
    assert seen[0].endswith(b'\r\n\r\n{"q":1}')


async def test_expand_has_a_pool_of_its_own_sized_by_its_setting(database_url: str) -> None:
    """REST and MCP expand run on a pool of ``expand_pool_size`` connections (default: the
    cores this process may run on + 1, at most ``pool_size``): the walks in flight at once."""
    import os

    from app.core.settings import get_settings

    cases: list[tuple[dict[str, Any], int]] = [
        ({"pool_size": 10, "expand_pool_size": 2}, 2),
        ({"pool_size": 10, "expand_pool_size": None}, min(10, len(os.sched_getaffinity(0)) + 1)),
        ({"pool_size": 1, "expand_pool_size": None}, 1),
    ]
    for update, size in cases:
        settings = get_settings().model_copy(update=update)
        own = make_engine(database_url, settings=settings)
        try:
            sibling = statement_engine(own)
            assert sibling.pool.size() == size  # type: ignore[attr-defined]
            assert own.pool.size() == update["pool_size"]  # type: ignore[attr-defined]
        finally:
            await own.dispose()


def test_the_expand_pool_counts_the_cores_this_process_may_run_on() -> None:
    """Pinned to one core (``taskset``, a container's ``--cpuset-cpus``), the default expand
    pool is 2 connections, whatever the host's count."""
    import os

    from app.core.db import statement_pool_size
    from app.core.settings import get_settings

    settings = get_settings().model_copy(update={"pool_size": 10, "expand_pool_size": None})
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert statement_pool_size(settings) == 2
    finally:
        os.sched_setaffinity(0, allowed)
    assert statement_pool_size(settings) == min(10, len(allowed) + 1)
