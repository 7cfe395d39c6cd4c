"""The SQL a verb really sends, and how PostgreSQL runs it (rule: explain-what-is-sent).

Nothing here holds a copy of a verb's SQL. :func:`capture` records, on one connection, every
statement the driver is handed (the exact text, with ``$n`` placeholders, and the positional
values bound to it) while the real domain function runs; :func:`explain_statement` then asks
PostgreSQL for the plan of each recorded statement with the very same values:

- ``custom`` plan (default): ``EXPLAIN (ANALYZE, BUFFERS) <text>`` sent with the captured values
  through the extended protocol, as the service sends the statement itself. This is the plan of
  the first executions of a statement on a pooled connection.
- ``generic`` plan: ``PREPARE`` + ``SET LOCAL plan_cache_mode = force_generic_plan`` + ``EXPLAIN
  EXECUTE``. The driver (asyncpg) runs every statement as a named prepared statement, so after
  five executions on one connection PostgreSQL may switch to this parameter-blind plan; the
  service's connections forbid it (``plan_cache_mode = force_custom_plan``,
  :func:`app.core.db.make_engine`), and this shows what they would get without that.

Both re-run the statement (``ANALYZE``) inside a read-only, repeatable-read transaction that is
rolled back (:func:`rolled_back_read`), after the verb itself ran it once: buffers are mostly
``shared hit``. Plans show row counts *before* the read rule filters them, so they are for
operators only (the CLI, admin keys).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

PlanFormat = Literal["text", "json"]
PlanMode = Literal["custom", "generic"]

_NAME = re.compile(r"^\s*/\*\s*(sibyl:[A-Za-z0-9_.:-]+)\s*\*/")
UNNAMED = "(unnamed)"


def statement_name(sql: str) -> str:
    """The ``sibyl:<verb>[.<part>]`` name of the leading comment of ``sql``, or ``(unnamed)``."""
    match = _NAME.match(sql)
    return match.group(1) if match else UNNAMED


@dataclass(frozen=True)
class CapturedStatement:
    """One statement as the driver received it: its text and its positional values ($1, $2...).

    ``names`` are the bound parameter names of the SQLAlchemy statement, in ``$n`` order, when
    the statement was compiled from named parameters (every verb's statements are).
    """

    sql: str
    parameters: tuple[Any, ...]
    names: tuple[str, ...] | None

    @property
    def name(self) -> str:
        """The statement's constant name comment, e.g. ``sibyl:expand_neighbors``."""
        return statement_name(self.sql)


@dataclass(frozen=True)
class StatementPlan:
    """A captured statement with its parameter types, SQL literals and plan.

    ``plan`` is the list of ``EXPLAIN`` text lines (``text``) or the parsed ``FORMAT JSON``
    document (``json``). ``types``/``literals`` let an operator replay it in ``psql``.
    """

    statement: CapturedStatement
    types: tuple[str, ...]
    literals: tuple[str, ...]
    plan: Any


def _names(context: ExecutionContext | None, count: int) -> tuple[str, ...] | None:
    compiled = getattr(context, "compiled", None)
    positions = getattr(compiled, "positiontup", None)
    if positions is None or len(positions) != count:
        return None
    return tuple(str(p) for p in positions)


@asynccontextmanager
async def capture(conn: AsyncConnection) -> AsyncIterator[list[CapturedStatement]]:
    """Record every statement executed on ``conn`` while the block runs (listener removed after).

    The listener is a ``before_cursor_execute`` hook on this connection only, so statements of
    other connections (other requests) are never mixed in.
    """
    captured: list[CapturedStatement] = []
    sync_conn = conn.sync_connection
    assert sync_conn is not None, "capture needs a connected AsyncConnection"

    def hook(
        _conn: Connection,
        _cursor: DBAPICursor,
        statement: str,
        parameters: Any,
        context: ExecutionContext | None,
        executemany: bool,
    ) -> None:
        rows = parameters if executemany else [parameters]
        for row in rows:
            values = tuple(row) if isinstance(row, (list, tuple)) else ()
            captured.append(CapturedStatement(statement, values, _names(context, len(values))))

    event.listen(sync_conn, "before_cursor_execute", hook)
    try:
        yield captured
    finally:
        event.remove(sync_conn, "before_cursor_execute", hook)


@asynccontextmanager
async def rolled_back_read(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A ``REPEATABLE READ, READ ONLY`` transaction (like a read verb's) that is rolled back.

    Prepared statements that :func:`explain_statement` could not release (the transaction failed
    first, e.g. on the statement timeout) are released after the rollback; if even that fails,
    the connection is discarded rather than returned to the pool with them.
    """
    async with engine.connect() as raw:
        conn = await raw.execution_options(
            isolation_level="REPEATABLE READ", postgresql_readonly=True
        )
        conn.info["sibyl_explain_prepared"] = set()
        try:
            tx = await conn.begin()
            try:
                yield conn
            finally:
                await tx.rollback()
        finally:
            leftovers: set[str] = conn.info.pop("sibyl_explain_prepared", set())
            if leftovers:
                try:
                    await _release(conn, sorted(leftovers))
                except Exception:
                    await conn.invalidate()


_PREPARED_SQL = """/* sibyl:explain.prepared */
SELECT name FROM pg_prepared_statements WHERE name = ANY($1::text[])"""


async def _release(conn: AsyncConnection, names: Sequence[str]) -> None:
    """``DEALLOCATE`` those of ``names`` that exist on the session (outside any transaction).

    A name is registered before its ``PREPARE`` is sent, because a cancel (the statement timeout)
    can be reported after the server stored the statement; so some names may not exist.
    """
    existing = (await conn.exec_driver_sql(_PREPARED_SQL, (list(names),))).scalars().all()
    for name in existing:
        await conn.exec_driver_sql(f"DEALLOCATE {name}")
    await conn.rollback()


_EXPLAIN_OPTIONS = {"text": "ANALYZE, BUFFERS", "json": "ANALYZE, BUFFERS, FORMAT JSON"}

_TYPES_SQL = """/* sibyl:explain.types */
SELECT coalesce(array_agg(format_type(t.oid, NULL) ORDER BY t.ord), CAST('{}' AS text[]))
FROM pg_prepared_statements s, unnest(s.parameter_types) WITH ORDINALITY AS t(oid, ord)
WHERE s.name = $1"""


async def _prepare(conn: AsyncConnection, sql: str) -> tuple[str, tuple[str, ...]]:
    """``PREPARE`` ``sql`` under a fresh name; return (name, parameter types as SQL type names).

    The types are those PostgreSQL infers for the untyped ``$n`` placeholders, exactly as for the
    driver's own (untyped) prepared statement.
    """
    name = "sibyl_explain_" + secrets.token_hex(4)
    # Registered first: a cancel may be reported after the server has stored the statement.
    conn.info.setdefault("sibyl_explain_prepared", set()).add(name)
    await conn.exec_driver_sql(f"PREPARE {name} AS {sql}")
    types = (await conn.exec_driver_sql(_TYPES_SQL, (name,))).scalar_one()
    return name, tuple(types)


async def _deallocate(conn: AsyncConnection, name: str) -> None:
    await conn.exec_driver_sql(f"DEALLOCATE {name}")
    conn.info.get("sibyl_explain_prepared", set()).discard(name)


async def _literals(
    conn: AsyncConnection, values: Sequence[Any], types: Sequence[str]
) -> tuple[str, ...]:
    """Each value as a typed SQL literal, quoted by the server (``quote_nullable``)."""
    if not values:
        return ()
    columns = ", ".join(
        f"quote_nullable(CAST(CAST(${i} AS {t}) AS text))" for i, t in enumerate(types, start=1)
    )
    row = (await conn.exec_driver_sql(f"SELECT {columns}", tuple(values))).one()
    return tuple(f"CAST({lit} AS {t})" for lit, t in zip(row, types, strict=True))


def _plan(rows: Sequence[Any], fmt: PlanFormat) -> Any:
    if fmt == "json":
        document = rows[0][0]
        return json.loads(document) if isinstance(document, str) else document
    return [str(r[0]) for r in rows]


async def explain_statement(
    conn: AsyncConnection,
    statement: CapturedStatement,
    *,
    fmt: PlanFormat = "text",
    mode: PlanMode = "custom",
    planned: bool = True,
) -> StatementPlan:
    """``EXPLAIN (ANALYZE, BUFFERS[, FORMAT JSON])`` of ``statement`` with its captured values
    (``planned=False``: no plan at all, ``plan`` None: only its parameter types and literals).

    ``mode="custom"`` plans with the values known (what the service gets on its first executions),
    ``mode="generic"`` the parameter-blind plan a long-lived connection may switch to. Runs the
    statement again: call it inside :func:`rolled_back_read`. Database errors (including the
    statement timeout) propagate as SQLAlchemy errors.
    """
    options = _EXPLAIN_OPTIONS[fmt]
    name, types = await _prepare(conn, statement.sql)
    # On an error the transaction is aborted: rolled_back_read releases ``name`` after rollback.
    literals = await _literals(conn, statement.parameters, types)
    if not planned:
        await _deallocate(conn, name)
        return StatementPlan(statement, types, literals, None)
    if mode == "custom":
        sql = f"EXPLAIN ({options}) {statement.sql}"
        rows = (await conn.exec_driver_sql(sql, statement.parameters)).all()
    else:
        await conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        args = f"({', '.join(literals)})" if literals else ""
        rows = (await conn.exec_driver_sql(f"EXPLAIN ({options}) EXECUTE {name}{args}")).all()
        await conn.exec_driver_sql("SET LOCAL plan_cache_mode TO DEFAULT")
    await _deallocate(conn, name)
    return StatementPlan(statement, types, literals, _plan(rows, fmt))


def psql_script(plan: StatementPlan, *, mode: PlanMode = "custom") -> str:
    """A ``psql`` script that replays ``plan``'s statement and prints its plan (read only)."""
    stmt = plan.statement
    label = stmt.name.replace("sibyl:", "sibyl_").replace(".", "_").replace(":", "_")
    types = f" ({', '.join(plan.types)})" if plan.types else ""
    args = f"({', '.join(plan.literals)})" if plan.literals else ""
    lines = [
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;",
        f"PREPARE {label}{types} AS",
        stmt.sql.rstrip() + ";",
    ]
    if mode == "generic":
        lines.append("SET LOCAL plan_cache_mode = force_generic_plan;")
    lines += [
        f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {label}{args};",
        f"DEALLOCATE {label};",
        "ROLLBACK;",
    ]
    return "\n".join(lines)


async def planning_ms(conn: AsyncConnection, statement: CapturedStatement) -> tuple[float, float]:
    """Planning time of ``statement`` with its captured values, in ms: (custom, generic reused).

    *custom*: planned with the values (``EXPLAIN (SUMMARY)`` under ``force_custom_plan``, not
    executed); *generic reused*: the planning step of an execution whose generic plan is already
    cached (``EXPLAIN (ANALYZE, SUMMARY)`` of the second ``EXECUTE`` under ``force_generic_plan``),
    what the service pays per walk on a pooled connection. Call it inside
    :func:`rolled_back_read`.
    """
    name, types = await _prepare(conn, statement.sql)
    literals = await _literals(conn, statement.parameters, types)
    args = f"({', '.join(literals)})" if literals else ""
    times: list[float] = []
    for mode, options in (
        ("force_custom_plan", "SUMMARY, FORMAT JSON"),
        ("force_generic_plan", "ANALYZE, SUMMARY, FORMAT JSON"),
        ("force_generic_plan", "ANALYZE, SUMMARY, FORMAT JSON"),
    ):
        await conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = {mode}")
        rows = (await conn.exec_driver_sql(f"EXPLAIN ({options}) EXECUTE {name}{args}")).all()
        times.append(float(_plan(rows, "json")[0].get("Planning Time", 0.0)))
    await conn.exec_driver_sql("SET LOCAL plan_cache_mode TO DEFAULT")
    await _deallocate(conn, name)
    return times[0], times[2]
