"""Alembic environment: async (asyncpg), URL from ``sqlalchemy.url`` option or DATABASE_URL."""

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.core.db import async_url, database_url
from app.core.settings import get_settings
from app.repo.semantic_schema import SEMANTIC_TABLES
from app.repo.tables import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name)

target_metadata = Base.metadata


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Leave the semantic lane's tables out of the model comparison: they exist only where the
    server has pgvector, and their column type comes from that extension."""
    table = getattr(obj, "table", None) if type_ in ("index", "column") else obj
    table_name = getattr(table, "name", name)
    return table_name not in SEMANTIC_TABLES


def _url() -> str:
    url = config.attributes.get("database_url") or database_url()
    return async_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


LOCK_TIMEOUT_SQL = "/* sibyl:migrate.lock_timeout */ SELECT set_config('lock_timeout', $1, false)"


def _run(connection: Connection) -> None:
    # A migration waiting for a table lock would queue every later query of that table behind
    # it: it gives up after SIBYL_MIGRATION_LOCK_TIMEOUT_MS instead (0: waits forever).
    timeout = config.attributes.get("lock_timeout_ms", get_settings().migration_lock_timeout_ms)
    connection.exec_driver_sql(LOCK_TIMEOUT_SQL, (f"{int(timeout)}ms",))
    connection.commit()
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
