"""The statements of an import (:mod:`app.importers.ndjson`): its transaction's settings and
turn, and the ``VACUUM (ANALYZE)`` after it."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.repo.housekeeping import FLUSH_STATISTICS_SQL

# For the import's transaction only: room to sort a large batch in memory.
BULK_SETTINGS_SQL = (
    "/* sibyl:import.settings */ SELECT set_config('work_mem', '64MB', true),"
    " set_config('gin_pending_list_limit', '65536', true)"
)
# Imports take turns, a transaction at a time: each reads what is stored, then inserts what is
# new, so two at once over the same ids would both insert them (a duplicate key for the later).
IMPORT_LOCK_SQL = "/* sibyl:import.lock */ SELECT pg_advisory_xact_lock(hashtext('sibyl:import'))"


async def begin_import(conn: AsyncConnection) -> None:
    """Ready an import's transaction: its settings, then its turn (the import lock)."""
    await conn.execute(text(BULK_SETTINGS_SQL))
    await conn.execute(text(IMPORT_LOCK_SQL))


async def _maintain(engine: AsyncEngine, statements: list[str], *, timeout_s: float) -> None:
    """Run ``statements`` outside any transaction on one connection, without the engine's
    statement timeout (the driver's ``timeout_s`` bounds each instead)."""
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        raw = (await auto.get_raw_connection()).driver_connection
        assert raw is not None
        await raw.execute("SET statement_timeout = 0")
        try:
            for statement in statements:
                await raw.execute(statement, timeout=timeout_s)
        finally:
            await raw.execute("RESET statement_timeout")


async def vacuum_analyze(engine: AsyncEngine, names: list[str], *, timeout_s: float) -> None:
    """``VACUUM (ANALYZE)`` the tables ``names`` outside any transaction, without the engine's
    statement timeout (up to ``timeout_s``), after flushing this session's statistics."""
    await _maintain(
        engine,
        [  # counts of the last second's writes first
            FLUSH_STATISTICS_SQL,
            f"/* sibyl:import.vacuum */ VACUUM (ANALYZE) {', '.join(names)}",
        ],
        timeout_s=timeout_s,
    )


async def analyze(engine: AsyncEngine, names: list[str], *, timeout_s: float) -> None:
    """``ANALYZE`` the tables ``names`` an import wrote (the planner's statistics, before the
    search statistics' recount), without the engine's statement timeout (up to ``timeout_s``)."""
    await _maintain(
        engine, [f"/* sibyl:import.analyze */ ANALYZE {', '.join(names)}"], timeout_s=timeout_s
    )
