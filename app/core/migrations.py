"""Alembic, driven from code: upgrade to head and read the head revision."""

from __future__ import annotations

from functools import lru_cache

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.core.settings import PROJECT_ROOT


def alembic_config(url: str | None = None, *, lock_timeout_ms: int | None = None) -> Config:
    """The project's Alembic config; ``url`` (a ``postgresql://`` URL) overrides DATABASE_URL,
    ``lock_timeout_ms`` overrides ``SIBYL_MIGRATION_LOCK_TIMEOUT_MS`` (0: wait forever)."""
    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.attributes["configure_logging"] = False
    if url:
        cfg.attributes["database_url"] = url
    if lock_timeout_ms is not None:
        cfg.attributes["lock_timeout_ms"] = lock_timeout_ms
    return cfg


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration's revision id."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(url: str | None = None, *, lock_timeout_ms: int | None = None) -> None:
    """Bring the database at ``url`` to the newest migration (synchronous; not in a loop).

    A migration that waits longer than ``lock_timeout_ms`` (default: the setting) for a table
    lock fails with SQLSTATE 55P03 and changes nothing; run it again when the lock is gone."""
    command.upgrade(alembic_config(url, lock_timeout_ms=lock_timeout_ms), "head")


def downgrade_base(url: str | None = None) -> None:
    """Undo every migration (tests)."""
    command.downgrade(alembic_config(url), "base")
