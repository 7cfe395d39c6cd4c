"""Test fixtures: a real PostgreSQL, a fresh database per run (per worker), migrated with Alembic.

Server choice: ``TEST_DATABASE_URL`` when set; else the server at 127.0.0.1:5432 when it answers;
else the embedded ``pgserver`` PostgreSQL in ``.data/pg-test``. Each pytest process (the run, or
each pytest-xdist worker: ``make test`` runs one more worker than cores) creates a database of
its own (``sibyl_test_<worker>_<pid>_<random>``), migrates it to head, and drops it at the end.
Tests isolate themselves by tenancy: each builds its rows in an org of its own.

The PEP corpus is parsed (and imported) once per worker that needs it; the tests that read it
(:data:`PEP_TESTS`) run on one worker (``--dist loadgroup``, with
:func:`pytest_xdist_make_scheduler`), so only one worker pays for it.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.app import create_app
from app.core.db import make_engine
from app.core.embedded import embedded_url
from app.core.migrations import upgrade
from app.core.settings import PROJECT_ROOT, get_settings
from tests.builders import throwaway_database

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
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with throwaway_database(_server_url(), f"sibyl_test_{worker}_{os.getpid()}") as url:
        os.environ["DATABASE_URL"] = url
        # no background recount of the search statistics: the tests decide when counts are
        # taken (tests/test_refresher.py runs the refresher itself)
        os.environ["SIBYL_STATS_REFRESH_S"] = "0"
        get_settings.cache_clear()
        upgrade(url)
        yield url


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


PEP_GROUP = "pep_corpus"
PEP_TESTS = (
    "tests/test_pep_corpus.py",
    "tests/test_pep_service.py",
    "tests/test_communities.py",
    "tests/test_mcp.py",
    "tests/test_surfaces_bounds.py",
    "tests/test_search.py::test_type_hints_on_the_pep_corpus",
    "tests/test_readme.py",
    "tests/test_ui.py",
)
"""The tests (files, or single tests) that read the PEP corpus: they run on one worker.
A test elsewhere that uses the corpus still works (its worker parses and imports it too), and
collection warns about it."""
PEP_FIXTURES = frozenset({"pep_records", "pep_corpus"})


def _in_pep_group(nodeid: str) -> bool:
    return any(nodeid == p or nodeid.startswith((p + "::", p + "[")) for p in PEP_TESTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Warn about a test that reads the PEP corpus outside :data:`PEP_TESTS`."""
    for item in items:
        uses = PEP_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses and not _in_pep_group(item.nodeid):
            item.warn(
                pytest.PytestWarning(
                    f"{item.nodeid} uses {sorted(uses)} but is not in conftest.PEP_TESTS: "
                    "under xdist a second worker parses and imports the corpus"
                )
            )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that also works on pytest 9: one group for the PEP-corpus files,
    every other test scheduled alone (like ``--dist load``).

    pytest-xdist 3.8 marks a test's group by rewriting ``item._nodeid``, which pytest 9 no longer
    reads, so ``xdist_group`` marks are silently ignored; this scheduler decides groups on the
    controller from the node ids alone. The group is sent first (the biggest scope), so the
    worker that parses and imports the corpus starts at once.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class PepGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if "@" in nodeid:  # an xdist_group mark, should xdist and pytest agree again
                return super()._split_scope(nodeid)
            return PEP_GROUP if _in_pep_group(nodeid) else nodeid

    return PepGroupScheduling(config, log)


@pytest.fixture(scope="session")
def pep_records() -> list[dict[str, Any]]:
    """The real PEP corpus as import records, parsed once per worker (skips when absent), by
    one process per core as the CLI parses it (the same records as one process gives:
    tests/test_pep_corpus.py)."""
    if not PEPS_DIR.is_dir():
        pytest.skip(f"PEP corpus not found at {PEPS_DIR} (set SIBYL_PEPS_DIR to its folder)")
    from app.importers.peps import iter_pep_records

    return list(iter_pep_records(PEPS_DIR, workers=os.cpu_count() or 1))


@pytest.fixture(scope="session")
async def pep_corpus(engine: AsyncEngine, pep_records: list[dict[str, Any]]) -> dict[str, str]:
    """The real PEP corpus imported once (org ``org_python``); returns a read key per demo
    reader, by user id. Skips when the corpus folder is absent."""
    from app.cli.main import DEMO_READERS
    from tests.builders import import_dicts, make_key

    await import_dicts(engine, pep_records)
    return {user: await make_key(engine, user) for user in DEMO_READERS}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIBYL_PG = Path(sys.executable).with_name("sibyl-pg")
"""The console script installed beside the interpreter running the tests (whatever its venv)."""


@pytest.fixture(scope="session")
def served(
    database_url: str, pep_corpus: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``sibyl-pg serve`` on a free port over the test database (with the PEP corpus), as a
    user runs it; its base URL. One server for the README's curl calls and the explorer's
    browser tests. The admin explain route measures plans (``SIBYL_REST_EXPLAIN=measured``, as
    the operator of a one-org service sets it): the explorer's plan view shows them."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "SIBYL_REST_EXPLAIN": "measured"}
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(SIBYL_PG), "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, f"sibyl-pg serve exited: {log_path.read_text()}"
                assert time.monotonic() < deadline, "sibyl-pg serve did not start"
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
