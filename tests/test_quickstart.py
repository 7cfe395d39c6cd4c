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


def test_a_community_rebuild_vacuums_and_analyzes_what_it_rewrote(database_url, monkeypatch):
    """Right after ``make run`` the doctor must not warn about what ``make run`` can do itself:
    the importer vacuums what it loaded, and a community rebuild (run by ``make run`` after the
    import) vacuums and analyzes the two tables it rewrites."""
    import asyncio

    import asyncpg

    from app.cli import _rebuild_communities
    from app.core.settings import get_settings

    monkeypatch.setenv("DATABASE_URL", database_url)
    get_settings.cache_clear()

    async def counts() -> dict[str, tuple[int, int]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT relname, vacuum_count, analyze_count FROM pg_stat_user_tables"
                " WHERE relname IN ('communities', 'community_members')"
            )
        finally:
            await conn.close()
        return {r["relname"]: (r["vacuum_count"], r["analyze_count"]) for r in rows}

    before = asyncio.run(counts())
    _rebuild_communities(None)  # every org of the test database
    after = asyncio.run(counts())
    for table in ("communities", "community_members"):
        assert after[table][0] > before[table][0], table
        assert after[table][1] > before[table][1], table
