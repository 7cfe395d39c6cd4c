"""``make run`` (``sibyl-pg quickstart``) on a busy port (issue 14): it says so, and how to pick
another port, before any set-up (no database is touched: this one does not even exist)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

SIBYL_PG = Path(sys.executable).with_name("sibyl-pg")
"""The console script installed beside the interpreter running the tests."""

READY = "Uvicorn running on"
"""The line the README tells a script to wait for before it calls the server."""


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

    from app.cli.main import _rebuild_communities
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


def test_a_community_rebuild_recounts_only_statistics_a_write_left_out_of_date(
    database_url, monkeypatch
):
    """``make run`` rebuilds communities after its import, which has just counted the search
    statistics: counting them a second time cost a few seconds of every start. Statistics that
    are up to date are left as they are; once a write has left them out of date (a memory
    created since the count), the rebuild recounts them."""
    import asyncio
    import secrets

    import asyncpg

    from app.cli.main import _rebuild_communities
    from app.core.db import make_engine
    from app.core.settings import get_settings
    from app.repo import term_stats
    from tests.builders import import_dicts, memory_record, org_records

    monkeypatch.setenv("DATABASE_URL", database_url)
    get_settings.cache_clear()
    sfx = secrets.token_hex(3)
    org = f"org_rebuild_{sfx}"

    async def write(records: list[dict[str, object]], *, count: bool) -> None:
        engine = make_engine(database_url)
        try:
            await import_dicts(engine, records)
            if count:
                await term_stats.refresh_orgs(engine, [org])
        finally:
            await engine.dispose()

    async def counted() -> dict[str, tuple[bool, object]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT audience, fresh, refreshed_at FROM term_audiences WHERE org_id = $1", org
            )
        finally:
            await conn.close()
        return {r["audience"]: (r["fresh"], r["refreshed_at"]) for r in rows}

    records = org_records(org, sfx, {"ann": "member"})
    records += [memory_record(org, sfx, f"m_{i}", f"Note {i}", f"otter {i}") for i in range(3)]
    asyncio.run(write(records, count=True))
    before = asyncio.run(counted())
    assert before and all(fresh for fresh, _ in before.values())
    _rebuild_communities([org])
    assert asyncio.run(counted()) == before  # up to date: not counted again

    asyncio.run(write([memory_record(org, sfx, "m_new", "Late", "otter late")], count=False))
    _rebuild_communities([org])
    after = asyncio.run(counted())
    assert all(fresh for fresh, _ in after.values())
    assert after["p2"][1] > before["p2"][1]  # the out-of-date audience was counted again


def test_a_deleted_demo_user_gets_no_key_and_the_set_up_goes_on(
    database_url, monkeypatch, tmp_path, capsys
):
    """A trial deleted a demo user through the admin route, then ran ``make run`` again: the demo
    keys step died with a traceback (``NotFound: User not found``) and nothing served. Now the
    other keys are minted (or kept), the missing one is a comment line, and a warning says why."""
    import asyncio

    from app.cli.main import DEMO_READERS, DEMO_WRITER, demo_keys
    from app.core.settings import get_settings
    from tests.builders import import_dicts, throwaway_database

    gone = "user_packaging_reader"
    try:
        with throwaway_database(database_url, "sibyl_demo_keys") as url:
            from app.core.db import make_engine
            from app.core.migrations import upgrade

            upgrade(url)
            users = [u for u in (*DEMO_READERS, DEMO_WRITER[0]) if u != gone]
            records = [{"kind": "org", "id": "org_python", "name": "Python"}] + [
                {
                    "kind": "user",
                    "id": u,
                    "org": "org_python",
                    "handle": u[5:],
                    "role": "admin" if u == "user_org_admin" else "member",
                }
                for u in users
            ]

            async def load() -> None:
                engine = make_engine(url)
                try:
                    await import_dicts(engine, records)
                finally:
                    await engine.dispose()

            asyncio.run(load())
            monkeypatch.setenv("DATABASE_URL", url)
            get_settings.cache_clear()
            try:
                path = demo_keys(tmp_path / "demo-keys.env")
            finally:
                get_settings.cache_clear()
            lines = path.read_text().splitlines()
            assert (
                "# PACKAGING_READER_KEY: the demo user user_packaging_reader no longer exists"
                in lines
            )
            values = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
            assert set(values) == {
                "TYPING_READER_KEY",
                "ORG_ADMIN_KEY",
                "OUTSIDER_KEY",
                "TYPING_WRITER_KEY",
                "DBA_KEY",
            }
            assert all(v.strip() for v in values.values())
            warned = capsys.readouterr().err
            assert "the demo user user_packaging_reader no longer exists" in warned
            assert "Traceback" not in warned
            # run again: the saved keys still work and are kept as they are
            assert demo_keys(path).read_text().splitlines() == lines
    finally:
        # settings cached while DATABASE_URL named the throwaway database (dropping it builds an
        # engine, which reads them) must not outlive it: the next test's CLI would connect there
        monkeypatch.undo()
        get_settings.cache_clear()


def test_the_readiness_line_comes_once_the_server_answers(database_url, tmp_path):
    """``make run`` prints the set-up's steps, then serves; a script waits for the line
    :data:`READY` and calls the server at once. That text was in quickstart's own announcement
    of the server, printed seconds before the server listened: a request sent on it was
    refused. Now only uvicorn's line carries it, and one request sent right after it (one try,
    no retry) is answered."""
    import asyncio

    from app.core.db import make_engine
    from app.core.migrations import upgrade
    from tests.builders import import_dicts, throwaway_database
    from tests.conftest import free_port

    with throwaway_database(database_url, "sibyl_quickstart_ready") as url:
        upgrade(url)

        async def load() -> None:  # a memory already there: quickstart skips the PEP import
            engine = make_engine(url)
            try:
                await import_dicts(
                    engine,
                    [
                        {"kind": "org", "id": "org_ready", "name": "Ready"},
                        {
                            "kind": "user",
                            "id": "user_ready",
                            "org": "org_ready",
                            "handle": "ready",
                            "role": "member",
                        },
                        {
                            "kind": "entity",
                            "id": "ent_ready",
                            "org": "org_ready",
                            "type": "note",
                            "scope": "org",
                            "owner": "user_ready",
                            "name": "ready",
                            "content": "ready",
                        },
                    ],
                )
            finally:
                await engine.dispose()

        asyncio.run(load())
        port = free_port()
        env = {**os.environ, "DATABASE_URL": url, "SIBYL_DATA_DIR": str(tmp_path)}
        server = subprocess.Popen(
            [str(SIBYL_PG), "quickstart", "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert server.stdout is not None
            before: list[str] = []
            for line in server.stdout:
                if READY in line:
                    break
                before.append(line)
            else:
                raise AssertionError("quickstart ended before it served:\n" + "".join(before))
            answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
            assert answer.status_code == 200 and answer.json() == {"status": "ok"}
            assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30).status_code == 200
            said = "".join(before)
            assert "› starting the server on" in said  # the announcement came, without the text
            assert "› migrating the database" in said and "import skipped" in said
        finally:
            server.terminate()
            server.wait(30)
