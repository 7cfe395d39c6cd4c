"""Test fixtures: a real PostgreSQL, a fresh database per run, migrated with Alembic.

Server choice: ``TEST_DATABASE_URL`` when set; else the server at 127.0.0.1:5432 when it answers;
else the embedded ``pgserver`` PostgreSQL in ``.data/pg-test``. The run's database is created
fresh (``sibyl_test_<pid>_<random>``), migrated to head, and dropped at the end. Tests isolate
themselves by tenancy: each builds its rows in an org of its own.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.app import create_app
from app.core.db import make_engine, with_database
from app.core.embedded import embedded_url
from app.core.migrations import upgrade
from app.core.settings import PROJECT_ROOT, get_settings
from tests.builders import admin_sql

PEPS_DIR = Path(os.environ.get("SIBYL_PEPS_DIR", PROJECT_ROOT.parent / "shared" / "data" / "peps"))


def _local_server_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def _server_url() -> str:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url
    if _local_server_answers():
        return "postgresql://postgres@127.0.0.1:5432/postgres"
    return embedded_url(PROJECT_ROOT / ".data" / "pg-test")


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh, migrated database for this test run (dropped afterwards)."""
    server = _server_url()
    name = f"sibyl_test_{os.getpid()}_{secrets.token_hex(3)}"
    admin = with_database(server, "postgres")
    asyncio.run(admin_sql(admin, f'CREATE DATABASE "{name}"'))
    url = with_database(server, name)
    os.environ["DATABASE_URL"] = url
    get_settings.cache_clear()
    upgrade(url)
    yield url
    asyncio.run(admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The service's engine on the test database."""
    eng = make_engine(database_url, statement_timeout_ms=get_settings().statement_timeout_ms)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
async def client(engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client speaking to the REST app in process (ASGI)."""
    app = create_app(engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


@pytest.fixture
def org_id() -> str:
    """A fresh org id: the test's own tenant."""
    return "org_" + secrets.token_hex(5)


@pytest.fixture(scope="session")
async def pep_corpus(engine: AsyncEngine) -> dict[str, str]:
    """The real PEP corpus imported once (org ``org_python``); returns a read key per demo
    reader, by user id. Skips when the corpus folder is absent."""
    if not PEPS_DIR.is_dir():
        pytest.skip(f"PEP corpus not found at {PEPS_DIR}")
    from app.cli import DEMO_READERS
    from app.importers.peps import iter_pep_records
    from tests.builders import import_dicts, make_key

    await import_dicts(engine, list(iter_pep_records(PEPS_DIR)))
    return {user: await make_key(engine, user) for user in DEMO_READERS}
