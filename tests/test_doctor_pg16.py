"""The doctor on the PostgreSQL 16 that ``make run`` starts (the ``pgserver`` binaries), beside
``tests/test_doctor.py``, which runs on the machine's server (PostgreSQL 15 here).

PostgreSQL 16 removed the ``lc_ctype`` setting: the doctor reads the database's character
classification from ``pg_database``, so its report, the CLI's exit code and the REST route are
the same on both servers (never ``unrecognized configuration parameter``, never a 500).
"""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import httpx
import pytest
from typer.testing import CliRunner

from app.api.app import create_app
from app.cli.main import cli
from app.core.db import make_engine
from app.core.migrations import upgrade
from app.service.doctor import doctor_for_operator
from tests.builders import import_dicts, make_key
from tests.pgtemp import ThrowawayPostgres
from tests.world import World


@pytest.fixture(scope="module")
def pg16() -> Iterator[ThrowawayPostgres]:
    """A fresh cluster of the embedded server's binaries, migrated; destroyed afterwards."""
    pg = ThrowawayPostgres()
    try:
        pg.start()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()


async def _server_version(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SHOW server_version_num"))
    finally:
        await conn.close()


async def test_the_doctor_reports_on_the_embedded_server(pg16: ThrowawayPostgres) -> None:
    assert await _server_version(pg16.url) >= 160000  # the server make run starts
    engine = make_engine(pg16.url)
    try:
        report = await doctor_for_operator(engine)
    finally:
        await engine.dispose()
    (text_case,) = [c for c in report.checks if c.name == "text_case"]
    conn = await asyncpg.connect(pg16.url)
    try:
        ctype = await conn.fetchval(
            "SELECT datctype FROM pg_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    assert text_case.facts["lc_ctype"] == ctype
    assert report.status in ("ok", "warn")


def test_the_doctor_cli_exits_0_or_1_on_the_embedded_server(
    pg16: ThrowawayPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg16.url)
    from app.core.settings import get_settings

    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["doctor"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code in (0, 1), result.output
    assert "text_case" in result.output or "LC_CTYPE" in result.output


async def test_the_rest_doctor_answers_200_on_the_embedded_server(pg16: ThrowawayPostgres) -> None:
    engine = make_engine(pg16.url)
    try:
        w = World().entity("x")
        await w.load(engine)
        admin = f"user_admin_{w.org}"
        await import_dicts(
            engine, [{"kind": "user", "id": admin, "org": w.org, "handle": "adm", "role": "admin"}]
        )
        key = await make_key(engine, admin, scopes=("read", "admin"))
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            r = await client.get("/api/admin/doctor", headers={"Authorization": f"Bearer {key}"})
    finally:
        await engine.dispose()
    assert r.status_code == 200, r.text
    assert {c["name"] for c in r.json()["checks"]} >= {"text_case", "migrations", "indexes"}
