"""Run one verb as one unit of work: authenticate the key, open one transaction, map faults.

Both adapters (REST and MCP) call :func:`run_read`, so authentication, the transaction and the
mapping of database faults to 503 are the same on every surface.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import one_statement, read_tx, statement_timeout_of, write_tx
from app.core.errors import (
    BadRequest,
    DomainError,
    Forbidden,
    Unauthorized,
    Unavailable,
    causes,
    describe,
    sqlstate,
)
from app.core.reader import Reader
from app.core.settings import get_settings
from app.domain import write_rules
from app.domain.permissions import require_admin
from app.domain.validation import BAD_TEXT
from app.repo import housekeeping
from app.repo.readers import reader_by_key

T = TypeVar("T")

# connection, resources, operator intervention; and a database or role that does not exist
# (dropped while serving, or a DATABASE_URL naming none: not a 500): 3D, 28
_UNAVAILABLE_CLASSES = ("08", "53", "57P", "3D", "28")
_UNDEFINED_TABLE = "42P01"  # the schema is missing: nobody ran the migrations on this database
_UNDEFINED_COLUMN = "42703"  # a column is missing: the database is at an older migration
SCHEMA_BEHIND = "The database schema is not at the newest migration (run `sibyl-pg migrate`)"
_RETRYABLE = ("40001", "40P01")  # serialization failure, deadlock detected: run it again
WRITE_ATTEMPTS = 3
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout: another transaction held a lock this one waited on
LOCK_WAIT_TOO_LONG = "Another write held this memory longer than the write waits; retry"


def schema_missing(error: BaseException) -> bool:
    """True when ``error`` is PostgreSQL saying a table or a column does not exist: a database
    the service was started on before ``sibyl-pg migrate`` ran (every statement names a table of
    the schema), or one at an older migration than the service's (a column a later one adds).
    Either is a 503 that says to migrate, never a 500: the service's own statements name only
    what its migrations create."""
    return isinstance(error, sa_exc.DBAPIError) and sqlstate(error) in (
        _UNDEFINED_TABLE,
        _UNDEFINED_COLUMN,
    )


def as_unavailable(error: BaseException) -> Unavailable | None:
    """The 503 a database fault maps to (its ``cause`` describing ``error`` for the log), or
    None when ``error`` is not a fault (a bug: 500)."""
    cause = describe(error)
    if isinstance(error, sa_exc.TimeoutError):
        return Unavailable("Database is saturated, retry later", cause=cause)
    if isinstance(error, (OSError, ConnectionError)):
        return Unavailable(cause=cause)
    if schema_missing(error):
        return Unavailable(SCHEMA_BEHIND, retry_after=10, cause=cause)
    if isinstance(error, sa_exc.DBAPIError):
        code = sqlstate(error)
        if code == "57014":
            return Unavailable("The query took longer than the statement timeout", cause=cause)
        if code == _LOCK_NOT_AVAILABLE:
            return Unavailable(LOCK_WAIT_TOO_LONG, retry_after=1, cause=cause)
        if code is None or code.startswith(_UNAVAILABLE_CLASSES) or error.connection_invalidated:
            return Unavailable(cause=cause)
    return None


TOO_MANY_WORDS = "content holds too many distinct words to be indexed for search"


def as_bad_text(error: BaseException) -> BadRequest | None:
    """The 400 for text PostgreSQL cannot take (a NUL byte, a lone surrogate, a body whose
    search vector would pass PostgreSQL's 1 MB limit), else None.

    A safety net behind the validation of each field (``validation.clean_text``). The driver
    encodes parameters itself: a lone surrogate fails there as a ``UnicodeEncodeError`` that
    asyncpg and SQLAlchemy each wrap once more, so the whole chain of causes is searched."""
    if _caused_by(error, UnicodeError):
        return BadRequest(BAD_TEXT)
    if isinstance(error, sa_exc.DBAPIError) and sqlstate(error) in ("22021", "22P05"):
        return BadRequest(BAD_TEXT)
    if isinstance(error, sa_exc.DBAPIError) and sqlstate(error) == "54000":
        # a body indexed whole (never cut) whose distinct words exceed the 1 MB tsvector limit
        return BadRequest(TOO_MANY_WORDS)
    if isinstance(error, sa_exc.DBAPIError) and sqlstate(error) == "22P02":
        # jsonb refusing a lone surrogate escape ("\ud800") inside a JSON value: the server
        # says so in its message ("Unicode low surrogate must follow a high surrogate").
        cause = error.orig.__cause__ if error.orig is not None else None
        said = f"{error.orig} {getattr(cause, 'detail', '')}"
        if "unicode" in said.lower():
            return BadRequest(BAD_TEXT)
    return None


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """True when ``error`` or anything in its chain of causes (``orig``, ``__cause__``,
    ``__context__``) is a ``kind``."""
    return any(isinstance(current, kind) for current in causes(error))


FAULTS = (sa_exc.SQLAlchemyError, OSError, ConnectionError, UnicodeError)


def map_fault(error: BaseException) -> DomainError | None:
    """The domain error a fault maps to (bad text → 400, database fault → 503), or None when it
    is a bug (a 500)."""
    return as_bad_text(error) or as_unavailable(error)


def raise_fault(error: BaseException) -> NoReturn:
    """Raise the domain error ``error`` maps to (:func:`map_fault`), else ``error`` itself."""
    mapped = map_fault(error)
    if mapped is None:
        raise error
    raise mapped from None


def require_key(key: str | None) -> None:
    """``Unauthorized`` when no key was sent: answered before any connection is taken from the
    pool, so keyless requests cost the database nothing and stay 401 while it is down."""
    if not key:
        raise Unauthorized("Missing API key")


def check_reader(reader: Reader | None, key: str | None, *, scope: str) -> Reader:
    """``reader`` (the one behind ``key``, None when the key is unknown or revoked) when it holds
    ``scope``; ``Unauthorized`` for a missing or invalid key, ``Forbidden`` without the scope."""
    check_scopes(None if reader is None else reader.scopes, key, scope=scope)
    assert reader is not None
    return reader


def check_scopes(scopes: frozenset[str] | None, key: str | None, *, scope: str) -> None:
    """:func:`check_reader` from the scopes of ``key`` alone (None: the key is unknown or
    revoked): ``Unauthorized`` for a missing or invalid key, ``Forbidden`` without ``scope``."""
    require_key(key)
    if scopes is None:
        raise Unauthorized("Invalid API key")
    if scope not in scopes:
        raise Forbidden(f"This key lacks the '{scope}' scope")


async def authenticate(conn: AsyncConnection, key: str | None, *, scope: str) -> Reader:
    """The reader of ``key`` holding ``scope``; ``Unauthorized``/``Forbidden`` otherwise."""
    require_key(key)
    assert key is not None  # for the type checker: require_key refused None and ""
    return check_reader(await reader_by_key(conn, key=key), key, scope=scope)


def _stale(error: BaseException) -> bool:
    """True when ``error`` says the pooled connection was dead (the server restarted or dropped
    it): SQLAlchemy has then invalidated the pool, so a second attempt opens a fresh connection.
    This replaces a ping before every checkout (app.core.db.make_engine)."""
    return isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)


async def run_snapshot(
    engine: AsyncEngine,
    verb: Callable[[AsyncConnection], Awaitable[T]],
    *,
    single: bool = False,
) -> T:
    """Run ``verb`` in one read-only snapshot (``verb`` authenticates the key itself, e.g. in its
    first statement), mapping faults as :func:`run_read` does. ``single``: ``verb`` sends ONE
    statement (:func:`app.service.expand.expand_for_key`), which is its own snapshot: it runs on
    a connection of :func:`app.core.db.statement_engine`, without a transaction.

    A read has no effect, so when a statement fails because its pooled connection was dead
    (:func:`_stale`) the whole verb runs once more, on a fresh connection; a second fault is
    a 503 like any other."""
    unit = one_statement if single else read_tx
    for attempt in (1, 2):
        try:
            async with unit(engine) as conn:
                return await verb(conn)
        except FAULTS as error:
            if attempt == 1 and _stale(error):
                continue
            raise_fault(error)
    raise AssertionError("unreachable")  # pragma: no cover


async def admin_for_key(engine: AsyncEngine, key: str | None) -> Reader:
    """The reader of ``key`` when it may use the ``/api/admin`` routes
    (:func:`app.domain.permissions.require_admin`), in a read transaction of its own: checked
    before anything else of a request is read (its query or body), so anyone else gets
    ``NotFound("Not found")`` whatever they sent and a malformed request tells them no more than
    a clean one (a breaker told the explain route apart by its 401/422 answers to bad
    parameters). Database faults raise ``Unavailable``; a dead pooled connection is replaced and
    the check run once more (:func:`run_snapshot`), as for every read verb."""

    async def check(conn: AsyncConnection) -> Reader:
        return require_admin(await reader_by_key(conn, key=key) if key else None)

    return await run_snapshot(engine, check)


async def run_read(
    engine: AsyncEngine,
    key: str | None,
    verb: Callable[[AsyncConnection, Reader], Awaitable[T]],
) -> T:
    """Authenticate ``key`` (scope ``read``) and run ``verb`` in one read-only snapshot (one more
    attempt on a fresh connection when the pooled one was dead: :func:`run_snapshot`)."""

    require_key(key)  # no key: refused before a connection is taken

    async def unit(conn: AsyncConnection) -> T:
        reader = await authenticate(conn, key, scope="read")
        return await verb(conn, reader)

    return await run_snapshot(engine, unit)


async def _settle(engine: AsyncEngine, unsettled: write_rules.Unsettled, reader: Reader) -> None:
    """Settle the committed write's links (:func:`write_rules.settle`) in a transaction of its
    own. The write is acknowledged whatever happens here: a fault leaves the links pending, and
    the next write that creates their target or re-derives their source settles them."""
    try:
        async with write_tx(engine) as conn:
            await write_rules.settle(conn, unsettled, reader_params=reader.params())
    except FAULTS:
        return


def lock_timeout_ms(statement_timeout_ms: int | None) -> int:
    """How long one statement of a write waits for a row lock before the write is run again:
    half the statement timeout (at most a second), so a lock wait ends as a lock timeout,
    which is retried, before the statement timeout, which is not."""
    if statement_timeout_ms is None:
        return 1000
    return max(1, min(1000, statement_timeout_ms // 2))


async def run_write(
    engine: AsyncEngine,
    key: str | None,
    verb: Callable[[AsyncConnection, Reader], Awaitable[T]],
    *,
    scope: str = "write",
) -> T:
    """Authenticate ``key`` (scope ``write`` by default) and run ``verb`` in one transaction,
    committed before this returns (a caller never acknowledges an uncommitted write).

    A write waits for the row locks another writer holds, not for the read statement timeout:
    each statement waits at most :func:`lock_timeout_ms` for a lock, then the transaction is
    rolled back and run again from the start (``verb`` must not keep state across calls), after
    a short pause, until the lock is free or ``SIBYL_WRITE_LOCK_WAIT_MS`` (default 30 s) has
    passed: then it is a 503 with ``Retry-After``. A transaction PostgreSQL rolled back as a
    deadlock victim or a serialization failure is run again too, up to :data:`WRITE_ATTEMPTS`
    times in all. A pooled connection found dead by the key lookup (the first statement,
    before any write) is replaced and the unit run once more (:func:`_stale`); found dead
    later, it is a 503."""
    require_key(key)  # no key: refused before a connection is taken
    wait_ms = str(lock_timeout_ms(statement_timeout_of(engine)))
    deadline = time.monotonic() + get_settings().write_lock_wait_ms / 1000
    attempt = 0
    pause = 0.02
    revived = False  # one more run allowed when the pooled connection was found dead
    while True:
        attempt += 1
        authenticated = False
        try:
            with write_rules.settling() as unsettled:
                async with write_tx(engine) as conn:
                    await housekeeping.set_lock_timeout(conn, wait_ms)
                    reader = await authenticate(conn, key, scope=scope)
                    authenticated = True
                    result = await verb(conn, reader)
                if unsettled:
                    await _settle(engine, unsettled, reader)
                return result
        except FAULTS as error:
            if not authenticated and not revived and _stale(error):
                # dead before anything was written (the key lookup is the first statement):
                # run it again on a fresh connection, without counting it as an attempt
                revived = True
                attempt -= 1
                continue
            code = sqlstate(error) if isinstance(error, sa_exc.DBAPIError) else None
            if code == _LOCK_NOT_AVAILABLE and time.monotonic() + pause < deadline:
                attempt -= 1  # a lock wait is no failed attempt: wait on
                await asyncio.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 0.25)
                continue
            if code not in _RETRYABLE:
                raise_fault(error)
            if attempt == WRITE_ATTEMPTS:
                raise Unavailable(
                    "Concurrent writes collided, retry",
                    retry_after=1,
                    cause=f"{WRITE_ATTEMPTS} attempts: {describe(error)}",
                ) from None


NOT_READY_UNREACHABLE = "database unreachable"
NOT_READY_SCHEMA = "database schema is not at the newest migration"


async def readiness(engine: AsyncEngine) -> str | None:
    """Why the service cannot serve from ``engine``'s database yet (:data:`NOT_READY_UNREACHABLE`
    or :data:`NOT_READY_SCHEMA`), or None when it can: the database answers and its schema is at
    the newest migration (``/readyz``, and ``sibyl-pg serve``'s warning at start). A pooled
    connection found dead (the server restarted) is replaced and asked once more, so the first
    probe after a restart does not call a serving database unreachable."""
    from app.core.migrations import head_revision

    current: str | None = None
    for attempt in (1, 2):
        try:
            async with engine.connect() as conn:
                current = await housekeeping.schema_revision(conn)
            break
        except Exception as error:
            if attempt == 1 and _stale(error):
                continue  # the pooled connection was dead (a restart): ask on a fresh one
            if not schema_missing(error):
                return NOT_READY_UNREACHABLE
            current = None  # the database answers, but nobody migrated it
            break
    return None if current == head_revision() else NOT_READY_SCHEMA
