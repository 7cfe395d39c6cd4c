"""``sibyl-pg doctor`` and ``GET /api/admin/doctor`` against the real test server.

- The report states the settings the server really has (compared with ``SHOW`` on a plain
  session), the test database is at head with every index of the walk, and the CLI exits 0.
- A known-bad database (a throwaway one: rows never vacuumed nor analyzed, an invalid index left
  by a failed ``CREATE INDEX CONCURRENTLY``, a dropped walk index) is flagged, and the CLI exits 1;
  after ``VACUUM (ANALYZE)`` the visibility and statistics checks pass. Where the server ships
  ``pg_visibility`` it is installed there, so the map itself is read.
- The REST route: an org admin's admin key gets the report without sizes or row counts; every
  other caller gets the 404 of an unknown route.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from app.cli.main import cli
from app.core.db import make_engine, with_database
from app.core.migrations import head_revision, upgrade
from app.core.settings import get_settings
from app.service.doctor import WALK_TABLES, doctor_for_operator, expected_indexes
from tests.builders import import_dicts, make_key, throwaway_database
from tests.world import World

HIDDEN = {"detail": "Not found"}


async def _show(url: str, *names: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        return {n: await conn.fetchval(f"SHOW {n}") for n in names}
    finally:
        await conn.close()


async def _installed(url: str, extension: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = $1", extension)
        )
    finally:
        await conn.close()


def _check(report: Any, name: str) -> Any:
    (found,) = [c for c in report.checks if c.name == name]
    return found


async def test_the_report_states_the_servers_real_settings(engine, database_url):
    report = await doctor_for_operator(engine)
    shown = await _show(database_url, "autovacuum", "jit", "shared_buffers", "work_mem")
    assert report.view == "operator"
    assert _check(report, "autovacuum").facts["autovacuum"] == shown["autovacuum"]
    # the service's own connections run with jit = off; the doctor reports the server's value
    assert _check(report, "jit").facts["jit"] == shown["jit"]
    assert _check(report, "shared_buffers").facts["shared_buffers"] == shown["shared_buffers"]
    assert _check(report, "work_mem").facts["work_mem"] == shown["work_mem"]
    if shown["autovacuum"] == "off":
        autovacuum = _check(report, "autovacuum")
        assert autovacuum.status == "warn"
        assert "autovacuum is off" in autovacuum.summary
        assert "VACUUM (ANALYZE)" in autovacuum.advice and "Heap Fetches" in autovacuum.advice
    assert _check(report, "migrations").status == "ok"
    assert _check(report, "migrations").facts["database"] == [head_revision()]
    indexes = _check(report, "indexes")
    assert indexes.status == "ok", indexes.summary
    assert {"pk_edges", "ix_edges_incoming", "ix_entities_read"} <= set(indexes.facts["expected"])
    assert report.status != "fail"
    version = await _show(database_url, "server_version_num")
    assert _check(report, "version").facts["server_version_num"] == int(
        version["server_version_num"]
    )


def test_cli_prints_the_checks_and_exits_0_without_failures(database_url):
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "autovacuum:" in result.output and "overall:" in result.output
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {c["name"] for c in report["checks"]} >= {"autovacuum", "indexes", "visibility"}


@pytest.mark.parametrize("database", ["no_such_database_here", None])
def test_cli_exits_2_when_the_server_cannot_be_asked(database_url, monkeypatch, database):
    url = (
        with_database(database_url, database)
        if database
        else "postgresql://postgres@127.0.0.1:1/nothing_listens_on_port_1"
    )
    monkeypatch.setenv("DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["doctor"])
    finally:
        monkeypatch.setenv("DATABASE_URL", database_url)
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and "Traceback" not in result.output


@pytest.fixture
def bad_database(database_url, monkeypatch) -> Iterator[str]:
    """A migrated throwaway database made sick: rows never vacuumed nor analyzed (autovacuum
    disabled on their tables), an invalid index, a walk index dropped. ``DATABASE_URL`` points
    at it for the CLI."""
    with throwaway_database(database_url, "sibyl_doctor") as url:
        upgrade(url)

        async def sicken() -> None:
            conn = await asyncpg.connect(url)
            try:
                # no autovacuum run may fix what the test asserts broken (on a server where it
                # is on); the doctor reports this too
                for table in ("entities", "edges"):
                    await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
                await conn.execute("INSERT INTO orgs (id, name) VALUES ('org_a', 'A')")
                await conn.execute(
                    "INSERT INTO entities (org_id, id, type, name, scope) "
                    "SELECT 'org_a', 'e' || i, 'note', 'n' || i, 'org' "
                    "FROM generate_series(1, 3000) i"
                )
                await conn.execute(
                    "INSERT INTO edges (org_id, src_id, relationship, dst_id) "
                    "SELECT 'org_a', 'e' || i, 'RELATED_TO', 'e' || (i % 3000 + 1) "
                    "FROM generate_series(1, 3000) i"
                )
                with pytest.raises(asyncpg.UniqueViolationError):
                    await conn.execute(
                        "CREATE UNIQUE INDEX CONCURRENTLY ix_bad_edges ON edges (relationship)"
                    )
                await conn.execute("DROP INDEX ix_edges_incoming")
                shipped = await conn.fetchval(
                    "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_visibility'"
                )
                if shipped:  # then the doctor reads the visibility map itself
                    await conn.execute("CREATE EXTENSION pg_visibility")
            finally:
                await conn.close()

        asyncio.run(sicken())
        monkeypatch.setenv("DATABASE_URL", url)
        get_settings.cache_clear()
        try:
            yield url
        finally:
            monkeypatch.setenv("DATABASE_URL", database_url)
            get_settings.cache_clear()


def test_a_sick_database_is_flagged_and_vacuum_heals_what_it_can(bad_database):
    async def report_of() -> Any:
        eng = make_engine(bad_database)
        try:
            return await doctor_for_operator(eng)
        finally:
            await eng.dispose()

    report = asyncio.run(report_of())
    indexes = _check(report, "indexes")
    assert indexes.status == "fail"
    assert indexes.facts["invalid"] == ["ix_bad_edges"]
    assert indexes.facts["missing"] == ["ix_edges_incoming"]
    statistics = _check(report, "statistics")
    assert statistics.status == "warn"
    assert {"edges", "entities"} <= set(statistics.facts["never_analyzed"])
    visibility = _check(report, "visibility")
    assert visibility.status == "warn"
    assert visibility.facts["tables"]["edges"]["all_visible"] == 0.0
    assert visibility.facts["tables"]["edges"]["pages"] > 0
    installed = asyncio.run(_installed(bad_database, "pg_visibility"))
    assert (visibility.facts["source"] == "pg_visibility") is installed
    autovacuum = _check(report, "autovacuum")
    assert autovacuum.status == "warn"
    assert autovacuum.facts["disabled_on"] == ["edges", "entities"]
    assert report.status == "fail"

    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 1, result.output
    assert "ix_bad_edges" in result.output and "never analyzed" in result.output

    async def vacuum() -> None:
        conn = await asyncpg.connect(bad_database)
        try:
            await conn.execute("VACUUM (ANALYZE) " + ", ".join(WALK_TABLES))
        finally:
            await conn.close()

    asyncio.run(vacuum())
    healed = asyncio.run(report_of())
    assert _check(healed, "statistics").status == "ok"
    assert _check(healed, "visibility").status == "ok"
    assert _check(healed, "visibility").facts["tables"]["edges"]["all_visible"] == 1.0
    assert _check(healed, "indexes").status == "fail"  # VACUUM does not rebuild indexes


def test_expected_indexes_are_the_walks():
    expected = expected_indexes()
    assert expected["pk_edges"] == ("edges", ("org_id", "src_id", "relationship", "dst_id"))
    assert expected["ix_entities_read"] == ("entities", ("org_id", "id"))
    assert expected["ix_passages_parent"][0] == "passages"


def _numbers_named(value: Any, path: str = "") -> list[str]:
    """Paths of facts that would count rows, pages or bytes."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            if any(word in key for word in ("bytes", "pages", "rows", "temp_files", "since")):
                found.append(here)
            found += _numbers_named(item, here)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found += _numbers_named(item, f"{path}[{n}]")
    return found


async def test_rest_doctor_is_for_org_admin_keys_only(engine, client, database_url):
    w = World().entity("x")
    await w.load(engine)
    admin_user = f"user_admin_{w.org}"
    await import_dicts(
        engine,
        [{"kind": "user", "id": admin_user, "org": w.org, "handle": "adm", "role": "admin"}],
    )
    admin_key = await make_key(engine, admin_user, scopes=("read", "admin"))
    admin_read_key = await make_key(engine, admin_user, scopes=("read",))
    member_key = await make_key(engine, w.user, scopes=("read", "write"))
    restricted_key = await make_key(engine, admin_user, scopes=("read", "admin"), projects=["proj"])

    r = await client.get("/api/admin/doctor", headers={"Authorization": f"Bearer {admin_key}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["view"] == "org_admin"
    names = {c["name"] for c in body["checks"]}
    assert {"autovacuum", "indexes", "migrations", "search_statistics"} <= names
    # nothing measured over the tables every org shares: its status moves with other orgs'
    # writes (a breaker watched the visibility ratios follow another org's import)
    assert not names & {"visibility", "statistics", "memory", "work_mem"}
    assert "Visibility now" not in r.text  # nor in the autovacuum advice (a breaker read it)
    # settings and health, but nothing that counts rows of the shared tables (other orgs')
    assert _numbers_named(body) == []
    assert "bytes" not in r.text and "estimated_rows" not in r.text
    shown = await _show(database_url, "autovacuum")
    (autovacuum,) = [c for c in body["checks"] if c["name"] == "autovacuum"]
    assert autovacuum["facts"]["autovacuum"] == shown["autovacuum"]

    # the same answer as for a route that does not exist (and as the explain route's)
    unknown = await client.get("/api/admin/no_such_route")
    assert unknown.status_code == 404
    for headers in (
        {},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Bearer {member_key}"},
        {"Authorization": f"Bearer {admin_read_key}"},
        {"Authorization": f"Bearer {restricted_key}"},
    ):
        r = await client.get("/api/admin/doctor", headers=headers)
        assert (r.status_code, r.json()) == (404, HIDDEN)


def _table_stats(name: str, *, pages: int, visible: int, live: int) -> Any:
    from app.repo.doctor import TableStats

    return TableStats(
        table_name=name,
        pages=pages,
        all_visible_pages=visible,
        table_bytes=8192 * pages,
        index_bytes=0,
        estimated_rows=live,
        last_vacuum=None,
        last_analyze=None,
        modified_since_analyze=0,
        inserted_since_vacuum=0,
        live_rows=live,
        autovacuum_disabled=False,
    )


def test_a_table_left_without_rows_is_not_a_visibility_warning():
    """The README's write walkthrough adds a grant and deletes it: entity_grants keeps one page
    and no row, which autovacuum never visits (1 dead row is under its threshold). Nothing can
    be fetched from it, so the doctor must not warn about it forever. Nor about a table of a few
    pages (a trial: a few grant writes, then a warning until the next VACUUM): an index-only
    scan fetches at most those pages; a table of 8 pages or more that is not all-visible warns."""
    from types import SimpleNamespace

    from app.service.doctor import check_visibility

    emptied = SimpleNamespace(
        tables=[
            _table_stats("entities", pages=10, visible=10, live=100),
            _table_stats("entity_grants", pages=1, visible=0, live=0),
        ]
    )
    check = check_visibility(emptied, detail=False)
    assert check.status == "ok", check.summary
    assert check.facts["tables"]["entity_grants"]["all_visible"] is None
    few = SimpleNamespace(tables=[_table_stats("entity_grants", pages=7, visible=0, live=9)])
    check = check_visibility(few, detail=False)
    assert check.status == "ok" and check.facts["tables"]["entity_grants"]["all_visible"] == 0
    held = SimpleNamespace(tables=[_table_stats("entity_grants", pages=8, visible=0, live=9)])
    assert check_visibility(held, detail=False).status == "warn"


async def test_search_statistics_say_when_an_org_is_due(engine, client):
    """The operator sees which orgs are due a recount (never counted, or a write made their
    counts stale) and the stale audiences; an org admin sees only whether their own org is due,
    exactly as if the other orgs did not exist (no counts, no other org's id)."""
    from app.repo import term_stats
    from app.service.doctor import gather, judge
    from tests.team import Team, call

    due, fresh = await Team().load(engine), await Team().load(engine)
    await term_stats.refresh_orgs(engine, [due.org, fresh.org])

    async def operator(orgs: list[str]) -> Any:
        return _check(judge(await gather(engine, orgs=orgs), detail=True), "search_statistics")

    async def org_admin(team: Team) -> Any:
        key = await team.key(engine, "adm", scopes=("read", "admin"))
        r = await client.get("/api/admin/doctor", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        (check,) = [c for c in r.json()["checks"] if c["name"] == "search_statistics"]
        return check

    both = [due.org, fresh.org]
    assert (await operator(both)).status == "ok"
    assert (await org_admin(due))["status"] == "ok"

    # an edit of a counted memory makes its audience stale: the org is due
    own = await due.key(engine, "own")
    r = await call(client, "PATCH", "/api/entities/orgnote", own, json={"content": "Edited."})
    assert r.status_code == 200, r.text
    seen = await operator(both)
    assert seen.status == "info" and seen.facts["orgs_due"] == [due.org]
    assert seen.facts["stale"] == 1 and seen.facts["oldest_stale"] is not None
    assert due.org in seen.summary and "sibyl-pg stats refresh" in seen.advice

    mine, theirs = await org_admin(due), await org_admin(fresh)
    assert mine["status"] == "info" and mine["facts"]["due"] is True
    assert "this org" in mine["summary"] and due.org not in json.dumps(mine)
    assert {"audiences", "stale", "orgs_due"}.isdisjoint(mine["facts"])
    assert theirs["status"] == "ok" and theirs["facts"]["due"] is False  # the other org's state
    assert due.org not in json.dumps(theirs)

    await term_stats.refresh_orgs(engine, [due.org])
    assert (await operator(both)).status == "ok"
    assert (await org_admin(due))["status"] == "ok"


def test_a_rebuild_leaves_its_tables_analyzed_not_stale(database_url, monkeypatch):
    """PostgreSQL reports a session's row counts at most once a second: the rows a rebuild wrote
    in its last second were counted *after* its ``VACUUM (ANALYZE)`` and showed as changed since
    it, so a fresh ``make run`` made doctor warn that ``community_members`` was stale (a
    new-user trial). The writer's counts are flushed before the vacuum: nothing is left changed
    since ANALYZE, and the live-row estimate is the real count (it was doubled). Own database:
    no other test's counts in flight."""
    from app.cli.main import _rebuild_communities
    from tests.team import Team

    with throwaway_database(database_url, "sibyl_flush") as url:
        upgrade(url)
        monkeypatch.setenv("DATABASE_URL", url)
        get_settings.cache_clear()
        try:
            t = Team()

            def link(src: str, dst: str) -> dict[str, Any]:
                return {"kind": "mention", "org": t.org, "src": src, "dst": dst}

            notes = [
                {
                    "kind": "entity",
                    "org": t.org,
                    "id": f"c{i}",
                    "type": "note",
                    "name": f"c{i}",
                    "content": "words",
                    "project": "p1",
                    "owner": t.u("bob"),
                }
                for i in range(12)
            ]
            links = [link(f"c{i}", f"c{j}") for i in range(12) for j in range(12) if i < j]

            async def load() -> None:
                engine = make_engine(url)
                try:
                    await t.load(engine, extra=[*notes, *links])
                finally:
                    await engine.dispose()

            asyncio.run(load())
            _rebuild_communities([t.org])

            async def stats() -> list[tuple[str, int, int, int]]:
                conn = await asyncpg.connect(url)
                try:
                    rows = await conn.fetch(
                        "SELECT relname, n_mod_since_analyze, n_live_tup FROM pg_stat_user_tables"
                        " WHERE relname IN ('communities', 'community_members')"
                    )
                    counts = {
                        t: await conn.fetchval(f"SELECT count(*) FROM {t}")
                        for t in ("communities", "community_members")
                    }
                    return [(r[0], r[1], r[2], counts[r[0]]) for r in rows]
                finally:
                    await conn.close()

            found = asyncio.run(stats())
            assert found and all(count > 0 for *_, count in found)
            for table, changed, live, count in found:
                assert (changed, live) == (0, count), table
        finally:
            get_settings.cache_clear()


async def test_text_case_says_whether_search_lower_cases_every_letter(engine, database_url):
    """``text_case``: ok where the database's locale lower-cases letters outside ASCII (the
    test database), a warning with the way out where its ``LC_CTYPE`` is ``C`` (search then
    finds ``İstanbul`` only as written)."""
    here = _check(await doctor_for_operator(engine), "text_case")
    conn = await asyncpg.connect(database_url)
    try:
        ctype = await conn.fetchval(
            "SELECT datctype FROM pg_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    assert here.facts == {"lc_ctype": ctype, "unicode_lower": True}
    assert here.status == "ok"
    name = f"sibyl_test_doctor_c_{secrets.token_hex(4)}"
    server = with_database(database_url, "postgres")
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'"
            " LC_COLLATE 'C' LC_CTYPE 'C'"
        )
        url = with_database(database_url, name)
        await asyncio.to_thread(upgrade, url)
        eng = make_engine(url)
        try:
            c_locale = _check(await doctor_for_operator(eng), "text_case")
        finally:
            await eng.dispose()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    assert c_locale.status == "warn"
    assert c_locale.facts == {"lc_ctype": "C", "unicode_lower": False}
    assert "ASCII letters only" in c_locale.summary and "C.UTF-8" in (c_locale.advice or "")


async def test_the_vectors_check_says_why_search_cannot_re_rank_and_what_waits(engine, monkeypatch):
    """This PostgreSQL 15 has no pgvector: the re-ranking (on by default) cannot run, and the
    check says so and how to get it; with vectors usable, memories still due are an ``info``
    with counts for the operator and without them for an org admin; all embedded, or the
    re-ranking and the lane both off, is ``ok``."""
    import dataclasses

    from app.core import embedder as models
    from app.service.doctor import Vectors, check_vectors, gather

    monkeypatch.setattr(models, "available", lambda name: None)  # the extra, as if installed
    facts = await gather(engine)
    check = check_vectors(facts, detail=True)
    assert check.status == "info" and "no pgvector" in check.summary
    assert "CREATE EXTENSION vector" in (check.advice or "")

    due = dataclasses.replace(facts, vectors=Vectors("minilm", None, 3, 10, 10.0))
    operator, admin = check_vectors(due, detail=True), check_vectors(due, detail=False)
    assert operator.status == admin.status == "info"
    assert "3 of 10 memories" in operator.summary and operator.facts["due"] == 3
    assert "this org" in admin.summary and admin.facts == {"model": "minilm", "due": True}
    assert "sibyl-pg embed" in (admin.advice or "") and "every 10 s" in (admin.advice or "")
    never = dataclasses.replace(facts, vectors=Vectors("minilm", None, 3, 10, 0.0))
    assert "no serving process writes them" in (check_vectors(never, detail=True).advice or "")

    done = dataclasses.replace(facts, vectors=Vectors("minilm", None, 0, 10))
    assert check_vectors(done, detail=True).status == "ok"
    # vectors by another model: the background worker leaves them; say so, and how to switch
    others = {"org_a": {"hashing": 4}}
    other = dataclasses.replace(facts, vectors=Vectors("minilm", None, 4, 10, 10.0, others))
    operator, admin = check_vectors(other, detail=True), check_vectors(other, detail=False)
    assert operator.status == admin.status == "warn"
    assert "4 of 10 memories (1 org) have vectors by hashing" in operator.summary
    assert operator.facts["other_models"] == others
    assert "4" not in admin.summary and "other_models" not in admin.facts
    assert "sibyl-pg embed --model minilm" in (admin.advice or "")
    assert "SIBYL_EMBEDDER=hashing" in (admin.advice or "")
    monkeypatch.setenv("SIBYL_SEARCH_RERANK", "false")
    get_settings.cache_clear()
    try:
        off = check_vectors(await gather(engine), detail=True)
    finally:
        monkeypatch.delenv("SIBYL_SEARCH_RERANK")
        get_settings.cache_clear()
    assert off.status == "ok" and "off" in off.summary
