"""Database URLs, the async engine, and one transaction per unit of work.

Every read verb runs in one ``REPEATABLE READ, READ ONLY`` transaction, so all its statements see
one snapshot (a slice never mixes two revisions of a memory). Writes run in ``READ COMMITTED``.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
from asyncpg.prepared_stmt import PreparedStatement
from sqlalchemy import Connection, Engine, event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.core.embedded import embedded_url
from app.core.settings import Settings, get_settings

DATABASE_HINT = (
    "  Check DATABASE_URL: the server must be running and the database must exist"
    " (createdb NAME); without DATABASE_URL, `make run` starts an embedded PostgreSQL."
)
"""The second line of every CLI message saying the database could not be used."""


def database_refusal(detail: str) -> str:
    """A CLI message for a service error saying the database could not be used: ``detail``,
    then :data:`DATABASE_HINT`, except when the database answered but lacks the schema (the
    message already says to migrate; the hint would send the user looking for a server)."""
    return detail if "sibyl-pg migrate" in detail else f"{detail}\n{DATABASE_HINT}"


CONNECT_TIMEOUT_S = 5.0
"""The longest opening a connection may take (an unreachable or frozen server: a 503)."""
COMMAND_TIMEOUT_MARGIN_S = 2.0
"""How much longer than the statement timeout the client waits for any answer of the server."""


def database_url(settings: Settings | None = None) -> str:
    """Return the ``postgresql://`` URL to use: ``DATABASE_URL``, else the embedded server's."""
    s = settings or get_settings()
    if s.database_url:
        return s.database_url
    return embedded_url(s.data_dir / "pg")


def async_url(url: str) -> str:
    """Turn a ``postgresql://`` (or ``postgres://``) URL into SQLAlchemy's asyncpg form; libpq's
    ``sslmode=`` is passed as asyncpg's ``ssl=`` (same values: ``sslmode=require`` is the usual
    form of a hosted PostgreSQL's URL)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ValueError("DATABASE_URL must be a postgresql:// URL")
    query = urlencode(
        [
            ("ssl" if k == "sslmode" else k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
    )
    return urlunsplit(("postgresql+asyncpg", parts.netloc, parts.path, query, parts.fragment))


def with_database(url: str, dbname: str) -> str:
    """Return ``url`` naming database ``dbname`` instead (query string, e.g. socket host, kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def make_engine(
    url: str | None = None,
    *,
    statement_timeout_ms: int | None = None,
    settings: Settings | None = None,
    one_statement: bool = False,
) -> AsyncEngine:
    """Create the async engine for ``url`` (default: :func:`database_url`).

    ``statement_timeout_ms`` sets the server-side statement timeout of every connection (None: the
    server's default, for imports and migrations), and with it a client-side bound on every
    round trip of :data:`COMMAND_TIMEOUT_MARGIN_S` more: the server ends a slow statement, the
    client ends the wait on a server that no longer answers at all (a frozen host, a lost
    network), where no server-side timeout can fire; that wait is then a 503 like any fault.
    Connecting is bounded by :data:`CONNECT_TIMEOUT_S`. Pool size and wait come from settings.

    No ``pool_pre_ping``: a ping before every checkout cost three round trips a request (BEGIN,
    ``;``, ROLLBACK under SQLAlchemy's asyncpg dialect). A pooled connection that died (the server
    restarted) is found when its first statement fails instead: SQLAlchemy marks the error
    ``connection_invalidated`` and drops every connection of the pool older than it, and
    :mod:`app.service.session` runs the unit of work once more on a fresh connection when nothing
    had been written yet (:func:`app.service.session.run_read`, ``run_write``).

    ``one_statement``: the engine of :func:`statement_engine` instead (see there).
    """
    s = settings or get_settings()
    url = url or database_url(s)
    # Every statement is keyed by org_id and orgs differ in size by orders of magnitude: a generic
    # plan (made once per pooled connection for an average org) may read a big org whole where a
    # custom plan probes by id. Plan each execution with its values (docs/walk-plans.md §1).
    # JIT compilation costs ~100+ ms per call on plans this size (measured: a depth-1 walk spent
    # 148 of 154 ms compiling) and never pays back on millisecond queries: off.
    server_settings = {
        "application_name": "sibyl-pg",
        "plan_cache_mode": "force_custom_plan",
        "jit": "off",
    }
    if one_statement:
        server_settings["plan_cache_mode"] = "force_generic_plan"
        server_settings["default_transaction_read_only"] = "on"
    connect_args: dict[str, Any] = {"timeout": CONNECT_TIMEOUT_S}
    if statement_timeout_ms is not None:
        server_settings["statement_timeout"] = str(statement_timeout_ms)
        connect_args["command_timeout"] = statement_timeout_ms / 1000 + COMMAND_TIMEOUT_MARGIN_S
    engine = create_async_engine(
        async_url(url),
        pool_size=statement_pool_size(s) if one_statement else s.pool_size,
        max_overflow=0,
        pool_timeout=s.pool_timeout_s,
        connect_args={"server_settings": server_settings, **connect_args},
        **({"isolation_level": "AUTOCOMMIT"} if one_statement else {}),
    )
    _MADE[engine.sync_engine] = (url, statement_timeout_ms, s)
    return engine


_MADE: weakref.WeakKeyDictionary[Engine, tuple[str, int | None, Settings]] = (
    weakref.WeakKeyDictionary()
)
_SIBLINGS: weakref.WeakKeyDictionary[Engine, AsyncEngine] = weakref.WeakKeyDictionary()


def statement_timeout_of(engine: AsyncEngine) -> int | None:
    """The statement timeout (ms) ``engine`` was made with by :func:`make_engine` (None: the
    server's default, or an engine made elsewhere)."""
    made = _MADE.get(engine.sync_engine)
    return made[1] if made is not None else None


def statement_pool_size(settings: Settings) -> int:
    """Connections of the one-statement pool (:func:`statement_engine`): ``expand_pool_size``,
    else the smaller of ``pool_size`` and :func:`usable_cores` + 1.

    Its statement (the walk) is CPU-bound at the database once its pages are cached: more of
    them in flight than the database has cores only adds context switches and cache misses to
    each (docs/benchmark.md), and a request past them waits for a connection, up to
    ``pool_timeout_s``. The default assumes the database runs on a host like this one (the
    embedded server, or a server beside the service); set ``SIBYL_EXPAND_POOL_SIZE`` to the
    database's cores + 1 when it has more."""
    if settings.expand_pool_size is not None:
        return settings.expand_pool_size
    return min(settings.pool_size, usable_cores() + 1)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it, as
    ``taskset`` or a container's ``--cpuset-cpus`` set it; else the host's). A CPU quota
    (``--cpus``) is not seen: set ``SIBYL_EXPAND_POOL_SIZE`` under one."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return os.cpu_count() or 1


def statement_engine(engine: AsyncEngine) -> AsyncEngine:
    """The one-statement sibling of ``engine`` (made by :func:`make_engine`): same database and
    statement timeout, a pool of :func:`statement_pool_size`, but its connections run each
    statement on its own (autocommit: no ``BEGIN``/``COMMIT``; one statement is one
    snapshot), read only (``default_transaction_read_only``), with **generic** plans
    (``plan_cache_mode = force_generic_plan``: a statement is planned once per connection,
    then only executed).

    For a read verb that is one statement whose plan does not depend on the org's size: the REST
    expand (``KEYED_WALK_SQL`` of :mod:`app.repo.walk`; rule: one-round-trip-expand), a walk of
    per-node index probes that the other verbs' transactions switch to generic plans too. The other
    verbs keep ``engine`` and its custom plans. Made on first use, disposed with ``engine``.
    """
    sync = engine.sync_engine
    sibling = _SIBLINGS.get(sync)
    if sibling is None:
        made = _MADE.get(sync)
        if made is None:
            raise ValueError("statement_engine needs an engine made by make_engine")
        url, timeout_ms, s = made
        sibling = make_engine(url, statement_timeout_ms=timeout_ms, settings=s, one_statement=True)
        _SIBLINGS[sync] = sibling

        def dispose_sibling(_engine: Engine) -> None:
            # runs inside the main engine's (greenlet-run) dispose: a sync dispose may await
            sibling.sync_engine.dispose()

        event.listen(sync, "engine_disposed", dispose_sibling)
    return sibling


@asynccontextmanager
async def read_tx(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One repeatable-read, read-only transaction (one snapshot for a whole read verb)."""
    async with engine.connect() as raw:
        conn = await raw.execution_options(
            isolation_level="REPEATABLE READ", postgresql_readonly=True
        )
        async with conn.begin():
            yield conn


@asynccontextmanager
async def one_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection of :func:`statement_engine` ``(engine)`` for a verb that sends one statement
    (its own snapshot: no transaction)."""
    async with statement_engine(engine).connect() as conn:
        yield conn


_PREPARED: weakref.WeakKeyDictionary[
    asyncpg.Connection, dict[str, tuple[PreparedStatement, tuple[str, ...]]]
] = weakref.WeakKeyDictionary()


async def fetch_prepared(
    conn: AsyncConnection, sql: str, args: Sequence[object]
) -> tuple[tuple[str, ...], Sequence[Sequence[Any]]]:
    """The column names and rows of ``sql`` (the driver's form: ``$1``, ``$2``, ...) with
    ``args``, for the statement sent most (:data:`app.repo.walk.KEYED_WALK_SQL`). Rows are
    indexed by position.

    It runs on the driver connection under ``conn`` as a prepared statement of its own
    (prepared once per pooled connection, then only bound and executed), without what
    ``exec_driver_sql`` builds and this statement does not use (a result object, its column
    metadata, a row object per row, a greenlet switch: about 0.2 ms of Python a call,
    docs/benchmark.md). Failures are
    still SQLAlchemy's: the driver's error goes through the dialect's translation and the
    connection's own handling (:func:`_as_sqlalchemy`), so a dead connection is invalidated
    with its pool and raised ``connection_invalidated``, and the fault mapping of
    :mod:`app.service.session` (503, 400, the retry on a fresh connection) applies unchanged.
    A prepared statement that a schema change made stale is prepared again once. When anything
    listens to the connection's events (``sibyl-pg explain`` captures statements with
    ``before_cursor_execute``), the statement goes through ``exec_driver_sql`` instead, so
    every listener sees it."""
    sync_conn = conn.sync_connection
    if sync_conn is None or sync_conn._has_events or sync_conn.engine._has_events:
        result = await conn.exec_driver_sql(sql, tuple(args))
        return tuple(result.keys()), result.all()
    raw = await conn.get_raw_connection()
    driver: asyncpg.Connection = raw.driver_connection
    statements = _PREPARED.setdefault(driver, {})
    try:
        try:
            return await _run_prepared(driver, statements, sql, args)
        except asyncpg.InvalidCachedStatementError:  # a schema change altered its result type
            statements.pop(sql, None)
            return await _run_prepared(driver, statements, sql, args)
    except Exception as error:
        await conn.run_sync(_as_sqlalchemy, raw.dbapi_connection, error, sql, args)
        raise  # pragma: no cover  (_as_sqlalchemy always raises)
    except BaseException:
        # cancelled mid-statement: the connection's protocol state is unknown, so it is not
        # given back to the pool (SQLAlchemy invalidates it the same way)
        await asyncio.shield(conn.invalidate())
        raise


async def _run_prepared(
    driver: asyncpg.Connection,
    statements: dict[str, tuple[PreparedStatement, tuple[str, ...]]],
    sql: str,
    args: Sequence[object],
) -> tuple[tuple[str, ...], list[asyncpg.Record]]:
    """The column names and rows of ``sql`` on ``driver``, prepared there first unless
    ``statements`` (its prepared statements) holds it."""
    prepared = statements.get(sql)
    if prepared is None:
        statement = await driver.prepare(sql)
        names = tuple(a.name for a in statement.get_attributes())
        prepared = statements[sql] = (statement, names)
    return prepared[1], await prepared[0].fetch(*args)


def _as_sqlalchemy(
    sync_conn: Connection, adapted: Any, error: Exception, sql: str, args: Sequence[object]
) -> None:
    """Raise what SQLAlchemy raises when ``error`` comes out of its own execution of ``sql``:
    the dialect translates the driver's error into its DB-API one (``_handle_exception`` of
    the asyncpg adapter), and the connection wraps that (``DBAPIError`` and its subclasses)
    and, for a disconnect, invalidates itself and its pool (``_handle_dbapi_exception``).
    Both are private to SQLAlchemy (its version is pinned in constraints.txt;
    tests/test_fetch_prepared.py compares each outcome with ``exec_driver_sql``'s)."""
    try:
        adapted._handle_exception(error)
    except sync_conn.dialect.loaded_dbapi.Error as translated:
        sync_conn._handle_dbapi_exception(translated, sql, tuple(args), None, None)
    raise error


@asynccontextmanager
async def write_tx(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One read-committed transaction, committed when the block ends without an exception."""
    async with engine.begin() as conn:
        yield conn


def cancelling() -> bool:
    """Whether the running task was asked to stop, even when a lower layer turned the
    CancelledError into another error (a database driver reports the statement it cut as a
    failure of its own)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
