"""``make run`` (``sibyl-pg quickstart``) on a busy port (issue 14): it says so, and how to pick
another port, before any set-up (no database is touched: this one does not even exist)."""

from __future__ import annotations

import os
import socket
import subprocess

from app.core.settings import PROJECT_ROOT

SIBYL_PG = PROJECT_ROOT / ".venv" / "bin" / "sibyl-pg"


def test_a_busy_port_is_refused_before_the_set_up():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere"}
        for command in (["quickstart"], ["serve"]):
            ran = subprocess.run(
                [str(SIBYL_PG), *command, "--port", str(port)],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ran.returncode == 1, ran.stderr
            assert f"port {port} on 127.0.0.1 is already in use" in ran.stderr
            assert f"make run PORT={port + 1}" in ran.stderr
            assert "migrating" not in ran.stderr and "Traceback" not in ran.stderr


def test_after_its_import_the_walks_tables_are_vacuumed_and_analyzed(database_url, monkeypatch):
    """Right after ``make run`` the doctor must not warn about what ``make run`` can do itself:
    pages never marked all-visible, ``community_members`` never analyzed."""
    import asyncio

    import asyncpg

    from app.cli import vacuum_walk_tables
    from app.core.settings import get_settings
    from app.domain.doctor import WALK_TABLES

    monkeypatch.setenv("DATABASE_URL", database_url)
    get_settings.cache_clear()
    vacuum_walk_tables()

    async def done() -> list[str]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY($1::text[])"
                " AND last_vacuum IS NOT NULL AND last_analyze IS NOT NULL",
                list(WALK_TABLES),
            )
        finally:
            await conn.close()
        return sorted(row["relname"] for row in rows)

    assert asyncio.run(done()) == sorted(WALK_TABLES)
