"""The benchmark's own database, on the server of ``DATABASE_URL`` (or the embedded server).

A graph is generated into a database of its own, created fresh: ``sibyl_bench`` for the default
size, ``sibyl_bench_<entities>_<edges>[_s<seed>]`` for any other, so the quick run, the default
run and the large run do not overwrite one another. The name of a test database
(``sibyl_test_*``) is refused: the benchmark never touches it. A small manifest table
(``sibyl_bench_manifest``, created here, never by the migrations) records what was generated, so
``bench run`` can reuse a graph that matches its request. :func:`recreate` and :func:`drop` also
serve ``sibyl-pg eval`` (its own ``sibyl_eval`` database), so both name-check the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg

from app.core.db import database_url, with_database

DEFAULT_DATABASE = "sibyl_bench"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

MANIFEST_DDL = """CREATE TABLE IF NOT EXISTS sibyl_bench_manifest (
    org_id text PRIMARY KEY,
    spec jsonb NOT NULL,
    summary jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)"""


def database_name(entities: int, edges: int, seed: int, *, default: tuple[int, int, int]) -> str:
    """The database a graph of this size lives in (``sibyl_bench`` for the ``default`` size)."""
    if (entities, edges, seed) == default:
        return DEFAULT_DATABASE
    name = f"{DEFAULT_DATABASE}_{entities}_{edges}"
    return name if seed == default[2] else f"{name}_s{seed}"


def check_name(name: str) -> str:
    """``name`` if it is a plain lower-case identifier and not a test database; else ValueError."""
    if not _NAME.match(name):
        raise ValueError(f"bad database name {name!r} (a lower-case identifier: a-z, 0-9, _)")
    if name.startswith("sibyl_test"):
        raise ValueError("a test database (sibyl_test_*) is never used by the benchmark or eval")
    return name


def server_url() -> str:
    """The server to use: ``DATABASE_URL``'s, or the embedded PostgreSQL's (started if needed)."""
    return database_url()


def bench_url(name: str) -> str:
    """The ``postgresql://`` URL of benchmark database ``name`` on :func:`server_url`."""
    return with_database(server_url(), check_name(name))


async def exists(name: str) -> bool:
    """True iff database ``name`` exists on the server."""
    conn = await asyncpg.connect(with_database(server_url(), "postgres"))
    try:
        found = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        return found is not None
    finally:
        await conn.close()


async def recreate(name: str) -> str:
    """Drop (if present) and create database ``name``; return its URL (not yet migrated)."""
    name = check_name(name)
    conn = await asyncpg.connect(with_database(server_url(), "postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return bench_url(name)


async def drop(name: str) -> None:
    """Drop database ``name`` if it exists (closing its connections)."""
    name = check_name(name)
    conn = await asyncpg.connect(with_database(server_url(), "postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def write_manifest(url: str, org_id: str, spec: dict[str, Any], summary: Any) -> None:
    """Record (or replace) what was generated for ``org_id`` in the database at ``url``."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(MANIFEST_DDL)
        await conn.execute(
            """INSERT INTO sibyl_bench_manifest (org_id, spec, summary)
               VALUES ($1, $2::jsonb, $3::jsonb)
               ON CONFLICT (org_id) DO UPDATE
               SET spec = excluded.spec, summary = excluded.summary, created_at = now()""",
            org_id,
            json.dumps(spec),
            json.dumps(summary),
        )
    finally:
        await conn.close()


async def read_manifest(url: str, org_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(spec, summary) recorded for ``org_id``, or None (no manifest, or no such database)."""
    try:
        conn = await asyncpg.connect(url)
    except asyncpg.InvalidCatalogNameError:
        return None
    try:
        table = await conn.fetchval("SELECT to_regclass('sibyl_bench_manifest')")
        if table is None:
            return None
        row = await conn.fetchrow(
            "SELECT spec, summary FROM sibyl_bench_manifest WHERE org_id = $1", org_id
        )
        if row is None:
            return None
        return json.loads(row["spec"]), json.loads(row["summary"])
    finally:
        await conn.close()
