"""The served statement on the driver's own prepared statement (``app.core.db.fetch_prepared``).

REST and MCP expand send their one statement straight to asyncpg, without SQLAlchemy's result
objects (a third of the server's CPU a request). What a caller relies on must not change with
that, so each behaviour is checked against ``exec_driver_sql`` on the same statement:

- the same columns and rows;
- the same errors: the SQLAlchemy exception class and SQLSTATE of a refused value, a statement
  timeout, a dead connection (raised ``connection_invalidated``, after which the pool hands out
  a fresh connection);
- a prepared statement whose result type a schema change altered is prepared again;
- a statement cancelled mid-way leaves its connection out of the pool;
- with an event listener on the connection (``sibyl-pg explain`` captures statements so), the
  statement goes through SQLAlchemy and the listener sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import _PREPARED, fetch_prepared, make_engine
from app.core.errors import sqlstate


@pytest.fixture
async def own(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine of this module's own (some tests invalidate its pool), made as the served
    one-statement engine is (autocommit, generic plans, read only), with a statement timeout
    of 300 ms."""
    engine = make_engine(database_url, statement_timeout_ms=300, one_statement=True)
    try:
        yield engine
    finally:
        await engine.dispose()


async def _prepared_on_the_driver(conn: AsyncConnection, sql: str) -> bool:
    """Whether ``sql`` ran as the driver's own prepared statement on ``conn``."""
    raw = await conn.get_raw_connection()
    return sql in _PREPARED.get(raw.driver_connection, {})


async def _both(conn: AsyncConnection, sql: str, args: list[Any]) -> tuple[Any, Any]:
    """(what fetch_prepared gives or raises, what exec_driver_sql gives or raises)."""

    async def outcome(call: Any) -> Any:
        try:
            return await call()
        except Exception as error:  # compared below
            return error

    async def through_driver() -> Any:
        names, rows = await fetch_prepared(conn, sql, args)
        return names, [tuple(r) for r in rows]

    async def through_sqlalchemy() -> Any:
        result = await conn.exec_driver_sql(sql, tuple(args))
        return tuple(result.keys()), [tuple(r) for r in result.all()]

    return await outcome(through_driver), await outcome(through_sqlalchemy)


async def test_rows_and_columns_are_those_of_sqlalchemy(own: AsyncEngine) -> None:
    sql = "SELECT x AS n, 'v' || x AS label, ARRAY[x] AS arr FROM generate_series(1, $1) x"
    async with own.connect() as conn:
        for count in (0, 3, 3):  # the second call runs the statement prepared by the first
            ours, theirs = await _both(conn, sql, [count])
            assert ours == theirs
            assert ours[0] == ("n", "label", "arr")
            assert len(ours[1]) == count
        assert await _prepared_on_the_driver(conn, sql)


@pytest.mark.parametrize(
    ("sql", "args", "code"),
    [
        ("SELECT $1::text", ["a\x00b"], None),  # NUL: refused by the driver's encoder
        ("SELECT $1::int", ["seven"], None),  # a value the driver cannot encode
        ("SELECT 1 / $1::int", [0], "22012"),  # refused by the server
        ("SELECT pg_sleep($1)", [2.0], "57014"),  # ended by the statement timeout (300 ms)
    ],
)
async def test_errors_are_those_of_sqlalchemy(
    own: AsyncEngine, sql: str, args: list[Any], code: str | None
) -> None:
    async with own.connect() as conn:
        ours, theirs = await _both(conn, sql, args)
    assert isinstance(ours, Exception) and isinstance(theirs, Exception)
    assert type(ours) is type(theirs)
    assert sqlstate(ours) == sqlstate(theirs)
    if code is not None:
        assert isinstance(ours, sa_exc.DBAPIError) and sqlstate(ours) == code
    assert str(theirs).split("\n")[0] == str(ours).split("\n")[0]


async def test_a_dead_connection_is_invalidated_and_replaced(
    own: AsyncEngine, database_url: str
) -> None:
    async with own.connect() as conn:
        _, rows = await fetch_prepared(conn, "SELECT pg_backend_pid()", [])
        pid = rows[0][0]
    killer = await asyncpg.connect(database_url)  # not of the pool: it would be the same one
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1::int)", pid)
    finally:
        await killer.close()
    await asyncio.sleep(0.2)
    async with own.connect() as conn:  # the pool's only idle connection: the dead one
        with pytest.raises(sa_exc.DBAPIError) as raised:
            await fetch_prepared(conn, "SELECT pg_backend_pid()", [])
        assert raised.value.connection_invalidated
    async with own.connect() as conn:  # a fresh connection, not the dead one
        _, rows = await fetch_prepared(conn, "SELECT pg_backend_pid()", [])
        assert rows[0][0] != pid


async def test_a_statement_a_schema_change_made_stale_is_prepared_again(
    own: AsyncEngine,
) -> None:
    async with own.connect() as conn:
        await conn.exec_driver_sql("SET default_transaction_read_only = off")  # this engine's only
        await conn.exec_driver_sql("CREATE TEMP TABLE t (a int)")
        await conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        assert [tuple(r) for r in (await fetch_prepared(conn, "SELECT * FROM t", []))[1]] == [(1,)]
        await conn.exec_driver_sql("ALTER TABLE t ALTER COLUMN a TYPE text")
        _, rows = await fetch_prepared(conn, "SELECT * FROM t", [])
        assert [tuple(r) for r in rows] == [("1",)]


async def test_a_cancelled_statement_leaves_its_connection_out_of_the_pool(
    own: AsyncEngine,
) -> None:
    async with own.connect() as conn:
        pid = (await fetch_prepared(conn, "SELECT pg_backend_pid()", []))[1][0][0]
        task = asyncio.create_task(fetch_prepared(conn, "SELECT pg_sleep(0.25)", []))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert conn.invalidated
    async with own.connect() as conn:
        assert (await fetch_prepared(conn, "SELECT pg_backend_pid()", []))[1][0][0] != pid


async def test_an_event_listener_sees_the_statement(own: AsyncEngine) -> None:
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    async with own.connect() as conn:
        await fetch_prepared(conn, "SELECT 1 /* unseen */", [])
        assert await _prepared_on_the_driver(conn, "SELECT 1 /* unseen */")
        assert conn.sync_connection is not None
        event.listen(conn.sync_connection, "before_cursor_execute", record)
        try:
            names, rows = await fetch_prepared(conn, "SELECT $1::int AS one", [1])
        finally:
            event.remove(conn.sync_connection, "before_cursor_execute", record)
        assert not await _prepared_on_the_driver(conn, "SELECT $1::int AS one")
    assert seen == ["SELECT $1::int AS one"]
    assert (names, [tuple(r) for r in rows]) == (("one",), [(1,)])
