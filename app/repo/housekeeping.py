"""The statements of the service's housekeeping: a write's lock wait, the readiness probe, the
flush of statistics before a ``VACUUM (ANALYZE)``, and the row counts ``make run`` asks."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

LOCK_TIMEOUT_SQL = text(
    "/* sibyl:write.lock_timeout */ SELECT set_config('lock_timeout', :ms, true)"
)
READYZ_SQL = text("/* sibyl:readyz */ SELECT version_num FROM alembic_version")
COUNT_ENTITIES_SQL = text("/* sibyl:count.entities */ SELECT count(*) FROM entities")
COUNT_ORGS_SQL = text("/* sibyl:count.orgs */ SELECT count(*) FROM orgs")

FLUSH_STATISTICS_SQL = "/* sibyl:flush_statistics */ SELECT pg_stat_force_next_flush()"
"""Sent on the connection that wrote, just before a ``VACUUM (ANALYZE)``: PostgreSQL (15+)
reports a session's row counts to the statistics views at most once a second, so counts of
writes from the last second, reported *after* the ANALYZE, showed as rows changed since it
(and doubled ``n_live_tup``): a fresh ``make run`` would make ``doctor`` warn that
``community_members`` is stale. The function's flush happens before the
server answers it. Executable by every role (PUBLIC), no privilege needed."""


async def set_lock_timeout(conn: AsyncConnection, ms: str) -> None:
    """This transaction's ``lock_timeout`` (a string of milliseconds, as ``set_config`` takes)."""
    await conn.execute(LOCK_TIMEOUT_SQL, {"ms": ms})


async def schema_revision(conn: AsyncConnection) -> str | None:
    """The migration the database's schema is at (raises when nobody migrated it)."""
    value = (await conn.execute(READYZ_SQL)).scalar()
    return None if value is None else str(value)


async def count_entities(conn: AsyncConnection) -> int:
    """How many memories the database holds, across every org."""
    return int((await conn.execute(COUNT_ENTITIES_SQL)).scalar() or 0)


async def count_orgs(conn: AsyncConnection) -> int:
    """How many orgs the database holds."""
    return int((await conn.execute(COUNT_ORGS_SQL)).scalar() or 0)
