"""The benchmark's generator and baseline walk at a tiny size (issue 8). No timing assertions.

- a seed gives the same graph: counts, the generator's checksum and checksums of the stored ids;
  another seed gives another graph;
- the generated passages are exactly what the real cutter makes of the generated bodies, with
  the ids the service mints;
- the bench readers read about half of the graph;
- on uncapped walks, the baseline walk (bench only) and the service walk reach the same nodes at
  the same distances;
- a load into a fresh database drops and rebuilds the secondary indexes and foreign keys: the
  schema is the same afterwards.
"""

from __future__ import annotations

import asyncio
import random
import secrets

import asyncpg
import pytest
from sqlalchemy import text

from app.core.db import make_engine, with_database
from app.core.migrations import upgrade
from app.core.settings import Settings
from app.domain.passages import passage_id
from app.domain.spans import cut_evidence, cut_prose
from app.repo import walk as walk_repo
from app.repo.readers import reader_by_user
from app.service.expand import walk_params
from bench.baseline import run_baseline
from bench.generate import GraphSpec, generate, load

ENTITIES = 1_000
EDGES = 8_000

STORED_CHECKSUMS = """
SELECT (SELECT md5(string_agg(id, ',' ORDER BY id)) FROM entities WHERE org_id = $1) AS entities,
       (SELECT md5(string_agg(id, ',' ORDER BY id)) FROM passages WHERE org_id = $1) AS passages,
       (SELECT md5(string_agg(src_id || ' ' || relationship || ' ' || dst_id, ','
                              ORDER BY src_id, relationship, dst_id))
        FROM edges WHERE org_id = $1) AS edges,
       (SELECT md5(string_agg(src_id || ' ' || dst_id, ',' ORDER BY src_id, dst_id))
        FROM mentions WHERE org_id = $1) AS mentions,
       (SELECT count(*) FROM entity_grants WHERE org_id = $1) AS grants,
       (SELECT count(*) FROM community_members WHERE org_id = $1) AS members
"""

SCHEMA_SQL = """
SELECT 'index ' || indexname || ': ' || indexdef AS item FROM pg_indexes
WHERE schemaname = current_schema()
UNION ALL
SELECT 'constraint ' || c.conrelid::regclass::text || '.' || c.conname || ': '
       || pg_get_constraintdef(c.oid)
FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
WHERE r.relnamespace = current_schema()::regnamespace
ORDER BY 1
"""


def _org() -> str:
    return "org_bsmoke_" + secrets.token_hex(4)


async def _stored(url: str, org: str) -> dict[str, object]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(STORED_CHECKSUMS, org)
        assert row is not None
        return dict(row)
    finally:
        await conn.close()


async def test_a_seed_gives_the_same_graph(database_url):
    org = _org()
    spec = GraphSpec(entities=ENTITIES, edges=EDGES, seed=7, org=org)
    first = await load(database_url, spec, fresh=False)
    stored_first = await _stored(database_url, org)
    second = await load(database_url, spec, fresh=False)  # replaces the org's rows
    stored_second = await _stored(database_url, org)

    assert first.counts == second.counts
    assert first.checksum == second.checksum
    assert stored_first == stored_second
    assert first.counts["entities"] == ENTITIES
    assert first.counts["edges"] == EDGES
    assert first.counts["passages"] > 0
    assert first.hubs == second.hubs

    other = GraphSpec(entities=ENTITIES, edges=EDGES, seed=8, org=_org())
    third = await load(database_url, other, fresh=False)
    assert third.checksum != first.checksum


async def test_passages_are_what_the_cutter_makes(database_url):
    org = _org()
    summary = await generate(
        database_url, GraphSpec(entities=600, edges=3_000, seed=3, org=org), fresh=False
    )
    assert 0.35 <= summary.readable_share[summary.readers[0]] <= 0.65
    conn = await asyncpg.connect(database_url)
    try:
        memories = await conn.fetch(
            """SELECT id, type, content, revision, passage_kind, passage_total, passages_lossless
               FROM entities WHERE org_id = $1 AND passage_total > 0 ORDER BY id""",
            org,
        )
        assert memories
        for m in memories:
            spans = await conn.fetch(
                """SELECT id, passage_index, start_offset, end_offset, breadcrumb, content,
                          parent_revision
                   FROM passages WHERE org_id = $1 AND parent_id = $2 ORDER BY passage_index""",
                org,
                m["id"],
            )
            body = m["content"]
            cut = cut_evidence(body) if m["type"] == "observation" else cut_prose(body)
            assert cut is not None
            assert cut.kind == m["passage_kind"]
            assert cut.lossless == m["passages_lossless"]
            assert len(cut.spans) == m["passage_total"] == len(spans)
            for index, (expected, got) in enumerate(zip(cut.spans, spans, strict=True)):
                assert got["passage_index"] == index
                assert (got["start_offset"], got["end_offset"]) == (expected.start, expected.end)
                assert got["breadcrumb"] == expected.breadcrumb
                assert got["content"] == body[expected.start : expected.end]
                assert got["parent_revision"] == m["revision"]
                assert got["id"] == passage_id(m["id"], m["revision"], index, got["content"])
    finally:
        await conn.close()


@pytest.mark.parametrize("depth", [1, 2])
async def test_baseline_and_service_reach_the_same_nodes_uncapped(database_url, depth):
    org = _org()
    summary = await generate(
        database_url, GraphSpec(entities=ENTITIES, edges=EDGES, seed=11, org=org), fresh=False
    )
    uncapped = Settings(walk_hop_cap=100_000, walk_level_cap=1_000_000)
    engine = make_engine(database_url)
    rng = random.Random(depth)
    try:
        async with engine.connect() as conn:
            reader = await reader_by_user(conn, user_id=summary.readers[0])
            assert reader is not None
            ids = list(
                (
                    await conn.execute(
                        text("SELECT id FROM entities WHERE org_id = :org ORDER BY id"),
                        {"org": org},
                    )
                ).scalars()
            )
            seed_sets = [rng.sample(ids, 8) for _ in range(6 if depth == 1 else 2)]
            seed_sets.append(summary.hubs[:2] + rng.sample(ids, 2))
            compared = 0
            for seeds in seed_sets:
                origins = await walk_repo.resolve_seeds(
                    conn, reader_params=reader.params(), seeds=seeds, project=None
                )
                if not origins:
                    continue
                params = walk_params(
                    reader,
                    origins=origins,
                    depth=depth,
                    limit=100_000,
                    preview_chars=0,
                    include_incoming=True,
                    relationship_types=None,
                    types=None,
                    project=None,
                    settings=uncapped,
                )
                answer = await walk_repo.walk(conn, params=params)
                service = answer.rows
                assert not answer.capped and not answer.caps_cut
                baseline = await run_baseline(conn, params, timeout_ms=60_000)
                assert {(r.id, r.distance) for r in baseline} == {
                    (r.id, r.distance) for r in service
                }
                compared += 1
                await conn.rollback()  # SET LOCAL ends with the transaction
            assert compared >= 3
    finally:
        await engine.dispose()


async def test_a_fresh_load_rebuilds_the_schema_it_dropped(database_url):
    name = f"sibyl_benchsmoke_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(with_database(database_url, "postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(database_url, name)
    try:
        await asyncio.to_thread(upgrade, url)
        conn = await asyncpg.connect(url)
        try:
            before = [r["item"] for r in await conn.fetch(SCHEMA_SQL)]
        finally:
            await conn.close()
        summary = await load(url, GraphSpec(entities=400, edges=2_000, org=_org()), fresh=True)
        assert summary.counts["edges"] == 2_000
        conn = await asyncpg.connect(url)
        try:
            after = [r["item"] for r in await conn.fetch(SCHEMA_SQL)]
        finally:
            await conn.close()
        assert after == before
    finally:
        admin = await asyncpg.connect(with_database(database_url, "postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def test_the_served_server_runs_the_code_the_benchmark_imports(tmp_path):
    """A before/after pair runs the benchmark from two checkouts. The project is installed
    editable, so a server started as the ``sibyl-pg`` script imported the installed checkout:
    both halves of session 20's first pair measured the same server. The server's command and
    environment import the ``app`` package the benchmark imported, wherever it lies: here a copy
    of the package in another folder stands for the older checkout, and this checkout's own
    benchmark still serves this checkout."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import app
    from bench.run import server_command, server_env

    package = Path(app.__file__).resolve().parent
    other = tmp_path / "older_checkout"
    shutil.copytree(package, other / "app", ignore=shutil.ignore_patterns("__pycache__"))
    served = (
        "import subprocess, sys; from bench.run import server_command, server_env; "
        "probe = [sys.executable, '-c', 'import app; print(app.__file__)']; "
        "print(subprocess.run(probe, env=server_env({}), capture_output=True, text=True, "
        "check=True, cwd='/').stdout.strip())"
    )
    run = subprocess.run(
        [sys.executable, "-c", served], cwd=other, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == str(other / "app" / "__init__.py")
    mine = subprocess.run(
        [sys.executable, "-c", "import app; print(app.__file__)"],
        env=server_env({}),
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert mine.stdout.strip() == str(package / "__init__.py")
    assert server_command(8123)[:3] == [sys.executable, "-m", "app.cli"]


def test_a_served_benchmark_writes_no_vectors_unless_told(monkeypatch):
    """The embedding worker would compete for the CPU with what a benchmark measures: a served
    benchmark's environment turns it off, unless the caller asks for it."""
    from bench.run import server_env

    monkeypatch.setenv("SIBYL_EMBED_INTERVAL_S", "10")
    assert server_env({})["SIBYL_EMBED_INTERVAL_S"] == "0"
    assert server_env({"SIBYL_EMBED_INTERVAL_S": "5"})["SIBYL_EMBED_INTERVAL_S"] == "5"
