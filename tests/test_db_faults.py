"""Database faults (issue 9) against a throwaway PostgreSQL this module starts itself.

The service (``create_app`` under uvicorn, on a free loopback port) is bound to a PostgreSQL
cluster in a temporary folder (:mod:`tests.pgtemp`), never the machine's shared server, with a
pool of one connection, a 0.5 s pool wait and a 2 s statement timeout, so every fault is quick to
provoke:

- the database stopped mid-run (``fast``: it says it is shutting down; ``immediate``: a crash)
  → every request is a 503 with ``Retry-After`` within a bounded time, never a 500, a hang or a
  stack trace; ``/readyz`` says not ready; when the database is back, requests succeed again
  without restarting the service;
- the database frozen (every server process stopped with SIGSTOP: connections stay open but
  nothing answers) → 503 within a bounded time, not a hang, and recovery when it thaws;
- the pool exhausted (its one connection held by a request waiting on a lock) → the next
  request is a 503 after the pool wait, not an unbounded queue;
- a slow statement (a walk blocked behind a lock) → the statement timeout ends it with a 503.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
import uvicorn

from app.api.app import create_app
from app.core.db import make_engine
from app.core.migrations import upgrade
from app.core.settings import get_settings
from tests.pgtemp import ThrowawayPostgres, free_port
from tests.world import World

POOL_TIMEOUT_S = 0.5
STATEMENT_TIMEOUT_MS = 2000
RECOVERY_S = 120.0  # give up waiting for the service to serve again (a hang, not a speed)
LEAKY = ("Traceback", 'File "', "asyncpg", "sqlalchemy", "SELECT", "postgres", "127.0.0.1")

DOC = "\n\n".join(f"# Part {i}\n\n" + "text " * 300 for i in range(3))
READS = [
    ("/api/search/expand", {"entity_ids": ["a"], "depth": 2}),
    ("/api/search/slice", {"entity_id": "doc"}),
    ("/api/search", {"query": "body"}),
    ("/api/context/pack", {"goal": "body"}),
]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "faults", "version": "0"},
    },
}


@dataclass
class Served:
    """The throwaway database, the service bound to it, and a read key of its one world."""

    pg: ThrowawayPostgres
    url: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        """The bearer header of the key."""
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="module")
def throwaway() -> Iterator[ThrowawayPostgres]:
    """A fresh PostgreSQL cluster in a temp folder, migrated; destroyed afterwards."""
    pg = ThrowawayPostgres()
    try:
        pg.start()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()


@pytest.fixture(scope="module")
async def served(throwaway: ThrowawayPostgres) -> AsyncIterator[Served]:
    """One world in the throwaway database, and ``create_app`` serving it on a free port with
    a pool of one connection."""
    seed = make_engine(throwaway.url)
    try:
        world = World().entity("a").entity("b").entity("doc", type_="document", content=DOC)
        key = await world.edge("a", "RELATED_TO", "b").edge("a", "REFERENCES", "doc").load(seed)
    finally:
        await seed.dispose()
    settings = get_settings().model_copy(
        update={
            "database_url": throwaway.url,
            "pool_size": 1,
            "pool_timeout_s": POOL_TIMEOUT_S,
            "statement_timeout_ms": STATEMENT_TIMEOUT_MS,
        }
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings=settings), host="127.0.0.1", port=port, log_level="critical"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a hang guard, not a speed claim
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield Served(throwaway, f"http://127.0.0.1:{port}", key)
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 15)


@asynccontextmanager
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the served app whose own timeout (60 s) is far above any of the service's
    database bounds (statement timeout, pool wait, connect timeout)."""
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        yield client


@dataclass
class Answer:
    """One request's outcome: status, seconds it took, headers, body."""

    status: int
    seconds: float
    headers: httpx.Headers
    body: str


async def timed(client: httpx.AsyncClient, method: str, path: str, **kwargs: object) -> Answer:
    """Send one request and time it."""
    start = time.monotonic()
    r = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
    return Answer(r.status_code, time.monotonic() - start, r.headers, r.text)


def assert_clean_503(a: Answer, where: str) -> None:
    """A 503 with ``Retry-After`` whose body says nothing of the internals. That it came at all
    (rather than the client's own 60 s timeout) is the no-hang promise;
    how fast is measured by nobody here (tests assert behaviour, never a time)."""
    assert a.status == 503, (where, a.status, a.body)
    assert a.headers.get("retry-after", "").isdigit(), (where, dict(a.headers))
    assert not any(word in a.body for word in LEAKY), (where, a.body)
    assert set(httpx.Response(200, text=a.body).json()) <= {"detail", "status"}, a.body


async def serves_again(client: httpx.AsyncClient, served: Served) -> float:
    """Seconds until every read route and ``/readyz`` answer 200 again (fails after
    :data:`RECOVERY_S`)."""
    start = time.monotonic()
    while True:
        answers = [await timed(client, "POST", p, json=b, headers=served.auth) for p, b in READS]
        answers.append(await timed(client, "GET", "/readyz"))
        if all(a.status == 200 for a in answers):
            return time.monotonic() - start
        for a in answers:
            assert a.status in (200, 503), a.body
        assert time.monotonic() - start < RECOVERY_S, [a.body for a in answers]
        await asyncio.sleep(0.2)


async def hammer(client: httpx.AsyncClient, served: Served, stop: asyncio.Event) -> list[Answer]:
    """Read requests in a loop until ``stop``: the traffic the database dies under."""
    seen: list[Answer] = []
    i = 0
    while not stop.is_set():
        path, body = READS[i % len(READS)]
        seen.append(await timed(client, "POST", path, json=body, headers=served.auth))
        i += 1
    return seen


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_database_stopped_mid_run_is_503_then_the_service_recovers(
    served: Served, mode: str
) -> None:
    async with http(served) as client:
        await serves_again(client, served)
        stop = asyncio.Event()
        traffic = [asyncio.create_task(hammer(client, served, stop)) for _ in range(3)]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(served.pg.stop, mode)
        try:
            await asyncio.sleep(0.3)
            for path, body in READS:
                assert_clean_503(
                    await timed(client, "POST", path, json=body, headers=served.auth), path
                )
            assert_clean_503(
                await timed(client, "GET", "/api/entities/a", headers=served.auth), "GET"
            )
            write = {"type": "note", "name": "n", "content": "c", "project": "proj"}
            assert_clean_503(
                await timed(client, "POST", "/api/entities", json=write, headers=served.auth),
                "write",
            )
            ready = await timed(client, "GET", "/readyz")
            assert_clean_503(ready, "/readyz")
            assert "unavailable" in ready.body
            mcp = await timed(
                client,
                "POST",
                "/mcp",
                json=INITIALIZE,
                headers={**served.auth, "Accept": "application/json, text/event-stream"},
            )
            assert_clean_503(mcp, "/mcp")
            assert (await timed(client, "GET", "/healthz")).status == 200  # the process lives
        finally:
            stop.set()
            seen = [a for task in traffic for a in await task]
            await asyncio.to_thread(served.pg.start)
        assert any(a.status == 200 for a in seen) and any(a.status == 503 for a in seen)
        for a in seen:
            if a.status != 200:
                assert_clean_503(a, "in flight")
        # back by itself: the pool drops the dead connection and opens a new one
        await serves_again(client, served)


async def test_frozen_database_is_503_not_a_hang(served: Served) -> None:
    # No server-side timeout fires on a frozen server: the client's bounds end the wait (the
    # command timeout of the pooled connection's first statement; when that marks the connection
    # dead, one more attempt whose connecting is bounded too: app.service.session), see
    # app.core.db.make_engine; the HTTP client's own timeout (60 s) is what would catch a hang.
    async with http(served) as client:
        await serves_again(client, served)
        served.pg.freeze()
        try:
            path, body = READS[1]
            read = await timed(client, "POST", path, json=body, headers=served.auth)
            ready = await timed(client, "GET", "/readyz")
            for answer, where in ((read, path), (ready, "/readyz")):
                assert_clean_503(answer, where)
        finally:
            served.pg.thaw()
        await serves_again(client, served)


@asynccontextmanager
async def entities_locked(served: Served) -> AsyncIterator[None]:
    """Hold an ACCESS EXCLUSIVE lock on ``entities``: every walk blocks behind it."""
    conn = await asyncpg.connect(served.pg.url)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("LOCK TABLE entities IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            await tx.rollback()
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("holder", "waiters"),
    [
        # REST expand has a pool of its own (one-statement connections, app.core.db
        # .statement_engine), of the same size; the other reads share the engine's pool
        pytest.param(READS[0], [READS[0]], id="expand-pool"),
        pytest.param(READS[1], READS[1:3], id="engine-pool"),
    ],
)
async def test_pool_exhaustion_is_503_after_the_pool_wait_not_a_queue(
    served: Served, holder: tuple[str, dict], waiters: list[tuple[str, dict]]
) -> None:
    async with http(served) as client:
        await serves_again(client, served)
        async with entities_locked(served):
            path, body = holder
            holding = asyncio.create_task(
                timed(client, "POST", path, json=body, headers=served.auth)
            )
            await asyncio.sleep(0.3)  # the holder has the pool's one connection, waiting
            assert not holding.done()
            for path, body in waiters:  # waits of 0.5 s, well within the timeout
                a = await timed(client, "POST", path, json=body, headers=served.auth)
                assert_clean_503(a, path)
                assert "saturated" in a.body  # the pool wait ended it, not a statement
        held = await holding  # released before its statement timeout: it completes
        assert held.status == 200, held.body
        await serves_again(client, served)


async def test_slow_statement_is_ended_by_the_statement_timeout(served: Served) -> None:
    async with http(served) as client:
        await serves_again(client, served)
        async with entities_locked(served):
            for path, body in (READS[0], READS[1]):
                a = await timed(client, "POST", path, json=body, headers=served.auth)
                assert_clean_503(a, path)
                assert "statement timeout" in a.body  # the timeout ended it, not the pool
        await serves_again(client, served)


@pytest.mark.parametrize("missing", ["database", "role"])
async def test_a_database_or_role_that_does_not_exist_is_503(database_url: str, missing: str):
    """A trial: a database dropped while serving (or a DATABASE_URL naming a database or role
    that does not exist) answered 500 with a traceback per request, while /readyz said 503.
    It is a 503 with Retry-After, saying nothing of the database's name."""
    from app.core.db import with_database

    if missing == "database":
        url = with_database(database_url, "sibyl_no_such_db_" + str(free_port()))
    else:
        parts = database_url.split("://", 1)
        url = f"{parts[0]}://no_such_role_sibyl@{parts[1].split('@', 1)[1]}"
    engine = make_engine(url)
    app = create_app(engine)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post(
                "/api/search", json={"query": "x"}, headers={"Authorization": "Bearer sibyl_x_y"}
            )
            ready = await client.get("/readyz")
    finally:
        await engine.dispose()
    assert r.status_code == 503 and "Retry-After" in r.headers, r.text
    assert r.json() == {"detail": "Database unavailable, retry later"}
    assert ready.status_code == 503
