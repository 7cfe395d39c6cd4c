"""Database URLs, the async engine, and one transaction per unit of work.

Every read verb runs in one ``REPEATABLE READ, READ ONLY`` transaction, so all its statements see
one snapshot (a slice never mixes two revisions of a memory). Writes run in ``READ COMMITTED``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy import Engine, event
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
        pool_size=s.pool_size,
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


def statement_engine(engine: AsyncEngine) -> AsyncEngine:
    """The one-statement sibling of ``engine`` (made by :func:`make_engine`): same database,
    statement timeout and pool size, but its connections run each statement on its own
    (autocommit: no ``BEGIN``/``COMMIT``; one statement is one snapshot), read only
    (``default_transaction_read_only``), with **generic** plans (``plan_cache_mode =
    force_generic_plan``: a statement is planned once per connection, then only executed).

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
