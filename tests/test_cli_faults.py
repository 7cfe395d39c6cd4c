"""The CLI and an unusable database (new-user trial, 2026-11-30): a missing database or a server
that refuses the connection ends a command with one line saying why and exit status 2, never a
traceback; the same command against the real database works."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.core.db import with_database


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("args", [("keys", "list"), ("migrate",)])
def test_a_missing_database_is_one_line_not_a_traceback(database_url: str, args) -> None:
    missing = with_database(database_url, "sibyl_no_such_database_4f1e")
    done = _cli(missing, *args)
    assert done.returncode == 2, done.stderr
    assert 'database "sibyl_no_such_database_4f1e" does not exist' in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    ok = _cli(database_url, *args)  # the pair: the real database answers
    assert ok.returncode == 0, ok.stderr


def test_a_refused_connection_is_one_line_not_a_traceback() -> None:
    done = _cli("postgresql://postgres@127.0.0.1:1/x", "keys", "list")
    assert done.returncode == 2, done.stderr
    assert "cannot use the database" in done.stderr and "Traceback" not in done.stderr
