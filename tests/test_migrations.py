"""Migrations: one head; upgrade from empty, downgrade to base and up again; models agree."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import unicodedata

import asyncpg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from app.core.migrations import alembic_config, downgrade_base, upgrade
from app.domain import spans
from app.domain.passages import passage_id
from tests.builders import throwaway_database


async def _tables(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


def test_single_head():
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1


@pytest.fixture
def empty_database(database_url):
    with throwaway_database(database_url, "sibyl_mig") as url:
        yield url


def test_upgrade_downgrade_upgrade_and_models_agree(empty_database):
    url = empty_database
    upgrade(url)
    tables = asyncio.run(_tables(url))
    for table in (
        "orgs",
        "users",
        "api_keys",
        "projects",
        "project_members",
        "entities",
        "entity_grants",
        "edges",
        "mentions",
        "passages",
        "communities",
        "community_members",
    ):
        assert table in tables
    command.check(alembic_config(url))  # models and migrations agree
    downgrade_base(url)
    assert asyncio.run(_tables(url)) <= {"alembic_version"}
    upgrade(url)
    assert "edges" in asyncio.run(_tables(url))


def test_every_table_carries_org_id(database_url):
    async def go() -> list[str]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                """SELECT t.tablename FROM pg_tables t
                   WHERE t.schemaname = 'public' AND t.tablename <> 'alembic_version'
                     AND NOT EXISTS (SELECT 1 FROM information_schema.columns c
                                     WHERE c.table_name = t.tablename
                                       AND c.column_name IN ('org_id'))
                     AND t.tablename <> 'orgs'"""
            )
            return [r["tablename"] for r in rows]
        finally:
            await conn.close()

    assert asyncio.run(go()) == []


def _hold_lock(url: str, table: str, held: threading.Event, release: threading.Event) -> None:
    """In its own thread: hold ``table`` in ACCESS EXCLUSIVE mode until ``release`` is set."""

    async def hold() -> None:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                held.set()
                while not release.is_set():
                    await asyncio.sleep(0.02)
        finally:
            await conn.close()

    asyncio.run(hold())


def test_a_migration_gives_up_on_a_held_lock_and_changes_nothing(empty_database):
    """A migration waiting behind another session's lock would queue every later query of the
    table behind it: past the lock timeout it fails (55P03) leaving the schema as it was, and
    the same upgrade succeeds once the lock is gone (SIBYL_MIGRATION_LOCK_TIMEOUT_MS)."""
    url = empty_database
    upgrade(url)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    command.downgrade(alembic_config(url), "0009")
    before = asyncio.run(_version(url))
    assert before != head

    held, release = threading.Event(), threading.Event()
    # orgs: the table migration 0010 (a table referencing it) must lock on the way to the head
    holder = threading.Thread(target=_hold_lock, args=(url, "orgs", held, release))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(Exception) as caught:
            upgrade(url, lock_timeout_ms=200)
        raised = (caught.value, getattr(caught.value, "orig", None))
        assert "55P03" in {getattr(e, "sqlstate", None) for e in raised}
        assert asyncio.run(_version(url)) == before
    finally:
        release.set()
        holder.join(30)
    upgrade(url, lock_timeout_ms=200)
    assert asyncio.run(_version(url)) == head


def test_the_cli_says_in_one_line_that_a_migration_gave_up_on_a_lock(empty_database):
    url = empty_database
    upgrade(url)
    command.downgrade(alembic_config(url), "0009")
    held, release = threading.Event(), threading.Event()
    # orgs: the table migration 0010 (a table referencing it) must lock on the way to the head
    holder = threading.Thread(target=_hold_lock, args=(url, "orgs", held, release))
    holder.start()
    try:
        assert held.wait(30)
        env = {**os.environ, "DATABASE_URL": url, "SIBYL_MIGRATION_LOCK_TIMEOUT_MS": "200"}
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        release.set()
        holder.join(30)
    assert done.returncode == 2, done.stderr
    assert "lock timeout 200 ms" in done.stderr and "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr


async def _version(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()


def _old_rows(org: str) -> list[str]:
    """Rows as writes stored them before migration 0011: decomposed text, and a paragraph over
    the span bound stored as one passage (the old cutter's "single oversized line")."""
    nfd = unicodedata.normalize("NFD", "Zürich café, Bäckerei. ")
    long_line = "One sentence of a long paragraph. " * 100  # 3400 characters, no newline
    prose = "# Head\n\n" + "Short opening paragraph.\n\n" + long_line
    declared = unicodedata.normalize("NFD", "Crème. ") + "Tail."
    kept = passage_id("doc", 1, 0, prose[:34])
    return [
        f"INSERT INTO orgs (id, name) VALUES ('{org}', 'O')",
        f"INSERT INTO entities (org_id, id, type, name, content, scope, revision)"
        f" VALUES ('{org}', 'nfd', 'note', '{unicodedata.normalize('NFD', 'Zürich')}',"
        f" '{nfd}', 'org', 1)",
        f"INSERT INTO entities (org_id, id, type, name, content, scope, revision, passage_kind,"
        f" passage_total, passages_lossless) VALUES ('{org}', 'doc', 'document', 'Doc',"
        f" '{prose}', 'org', 1, 'prose', 2, true)",
        f"INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index,"
        f" start_offset, end_offset, breadcrumb, content) VALUES"
        f" ('{org}', '{kept}', 'doc', 1, 0, 0, 34, 'Head', '{prose[:34]}'),"
        f" ('{org}', 'passage_old1', 'doc', 1, 1, 34, {len(prose)}, 'Head', '{prose[34:]}')",
        f"INSERT INTO entities (org_id, id, type, name, content, scope, revision, passage_kind,"
        f" passage_total, passages_lossless) VALUES ('{org}', 'decl', 'document', 'Decl',"
        f" '{declared}', 'org', 1, 'declared', 2, true)",
        f"INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index,"
        f" start_offset, end_offset, breadcrumb, content) VALUES"
        f" ('{org}', 'passage_d0', 'decl', 1, 0, 0, 8, 'Cre\u0300me', '{declared[:8]}'),"
        f" ('{org}', 'passage_d1', 'decl', 1, 1, 8, 13, 'Tail', '{declared[8:]}')",
        f"INSERT INTO term_audiences (org_id, audience, documents, lengths, fresh)"
        f" VALUES ('{org}', '*', 3, 30, true)",
    ]


def test_0011_normalises_text_and_recuts_passages_keeping_unchanged_ids(empty_database):
    url = empty_database
    command.upgrade(alembic_config(url), "0010")
    org = "org_mig_nfc"

    async def seed_and_read() -> None:
        conn = await asyncpg.connect(url)
        try:
            for sql in _old_rows(org):
                await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(seed_and_read())
    upgrade(url)

    async def read() -> tuple[dict[str, str], list, list, bool]:
        conn = await asyncpg.connect(url)
        try:
            names = {
                r["id"]: r["name"] + "|" + r["content"]
                for r in await conn.fetch(
                    "SELECT id, name, content FROM entities WHERE org_id = $1", org
                )
            }
            doc = await conn.fetch(
                "SELECT id, start_offset, end_offset, content FROM passages"
                " WHERE org_id = $1 AND parent_id = 'doc' ORDER BY passage_index",
                org,
            )
            decl = await conn.fetch(
                "SELECT start_offset, end_offset, breadcrumb, content FROM passages"
                " WHERE org_id = $1 AND parent_id = 'decl' ORDER BY passage_index",
                org,
            )
            fresh = await conn.fetchval("SELECT fresh FROM term_audiences WHERE org_id = $1", org)
            return names, doc, decl, fresh
        finally:
            await conn.close()

    names, doc, decl, fresh = asyncio.run(read())
    assert names["nfd"] == "Zürich|Zürich café, Bäckerei. "  # composed now
    assert all(unicodedata.is_normalized("NFC", v) for v in names.values())
    # the paragraph over the bound is re-cut within it; the unchanged first span keeps its id
    assert len(doc) > 2 and all(len(r["content"]) <= spans.HARD_MAX for r in doc)
    body = names["doc"].split("|", 1)[1]
    assert "".join(r["content"] for r in doc) == body
    assert doc[0]["id"] == passage_id("doc", 1, 0, body[: doc[0]["end_offset"]])
    # declared spans keep their boundaries, moved onto the composed text
    assert [tuple(r) for r in decl] == [(0, 7, "Crème", "Crème. "), (7, 12, "Tail", "Tail.")]
    assert fresh is False  # the org's search statistics are recounted
    downgrade_base(url)
