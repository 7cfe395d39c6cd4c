"""Plans on a graph big enough for the planner to prefer indexes, and the read statement timeout.

The graph (``tests/plan_graph.py``): 20k memories, ~100k edges with five hubs, mentions,
passages, grants and communities, vacuumed and analyzed. The plans are taken with the service's
own ``explain``, so they are the plans of the statements the service sends. The custom plans
(what the service runs: its connections set ``plan_cache_mode = force_custom_plan``) may neither
scan a table sequentially nor scan an index on ``org_id`` alone (a whole org): every access is a
probe on ``org_id`` and a key. The generic plans (what a connection without that setting would
switch to after five executions) may not scan a table sequentially either; they may read a whole
org, since they are made for an average one: the reason for the setting.

The timeout test runs a walk far longer than a tiny statement timeout on a dedicated engine and
checks that the request ends, quickly, with 503 + ``Retry-After`` and a clear message.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.app import create_app
from app.core.db import make_engine, statement_engine
from app.core.settings import Settings, get_settings
from app.domain.schemas import ExpandRequest
from app.repo import explain as explain_repo
from app.repo.readers import reader_by_user
from app.service.explain import explain, explain_for_user, verbs
from tests.builders import make_key
from tests.plan_graph import PlanGraph, generate

GRAPH_TABLES = {
    "entities",
    "edges",
    "mentions",
    "passages",
    "entity_grants",
    "community_members",
    "communities",
    "projects",
    "project_members",
    "users",
}
# A walk's work is bounded by caps (contract §5 "bounded work": default 1000 rows per node and hop
# arm, 5000 nodes per level). One walk runs with small ones, so that the caps cut it: the caps are
# bound values, the statement and its access paths must not change.
SMALL_CAPS = {"walk_hop_cap": 40, "walk_level_cap": 200}


@pytest.fixture(scope="module")
async def graph(database_url: str) -> PlanGraph:
    return await generate(database_url, "org_plans_" + secrets.token_hex(3))


@pytest.fixture(scope="module")
async def plan_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The service's engine with a generous timeout: these tests are about access paths, and a
    busy CI machine must not turn a slow plan into a failure."""
    eng = make_engine(database_url, statement_timeout_ms=120_000)
    yield eng
    await eng.dispose()


async def test_the_generated_graph_is_big_and_skewed(database_url, graph):
    conn = await asyncpg.connect(database_url)
    try:
        edges = await conn.fetchval("SELECT count(*) FROM edges WHERE org_id = $1", graph.org)
        hub_in = await conn.fetchval(
            "SELECT count(*) FROM edges WHERE org_id = $1 AND dst_id = $2",
            graph.org,
            graph.entity(1),
        )
        median_in = await conn.fetchval(
            """SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY n)
               FROM (SELECT count(*) AS n FROM edges WHERE org_id = $1 GROUP BY dst_id) d""",
            graph.org,
        )
    finally:
        await conn.close()
    assert 95_000 <= edges <= 100_000
    assert hub_in > 3_000 and median_in < 10


def _nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of a FORMAT JSON plan (init plans and subplans included)."""
    out: list[dict[str, Any]] = []
    stack = [plan[0]["Plan"]] if isinstance(plan, list) else [plan]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.get("Plans", []))
    return out


def _seq_scans(plan: Any) -> list[str]:
    return [n.get("Relation Name", "?") for n in _nodes(plan) if n["Node Type"] == "Seq Scan"]


INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}


def _wide_index_scans(plan: Any) -> list[str]:
    """Index scans bounded by a single condition: ``org_id`` alone reads a whole org (what stale
    statistics produce), a non-leading column alone reads a whole index."""
    return [
        f"{n.get('Index Name')}: {n.get('Index Cond')}"
        for n in _nodes(plan)
        if n["Node Type"] in INDEX_SCANS and " AND " not in n.get("Index Cond", "")
    ]


def _settings(**update: int) -> Settings:
    return get_settings().model_copy(update=update)


WALKS = [
    pytest.param(
        {"entity_ids": ["e000001", "e000002"], "depth": 1},
        {},
        id="depth1-hubs",
    ),
    pytest.param(
        {"entity_ids": ["e000100", "e000200", "e000300"], "depth": 2},
        {},
        id="depth2",
    ),
    pytest.param(
        {"entity_ids": ["e000001", "e000150", "passage_e000016_03"], "depth": 3, "limit": 24},
        {},
        id="depth3-hub-and-passage-seeds",
    ),
    pytest.param(
        {
            "entity_ids": ["e000001", "e000033"],
            "depth": 3,
            "relationship_types": ["DEPENDS_ON", "SUPERSEDES", "MENTIONS", "PART_OF"],
            "types": ["task", "artifact"],
            "project": "p1",
        },
        SMALL_CAPS,
        id="depth3-filtered-in-project-capped",
    ),
]


def _ids(graph: PlanGraph, body: dict[str, Any]) -> dict[str, Any]:
    """Turn the short ids of a test body into the generated org's ids."""
    out = dict(body)

    def full(x: str) -> str:
        if x.startswith("passage_"):
            return f"passage_{graph.org}_{x.removeprefix('passage_')}"
        return f"{graph.org}_{x}"

    out["entity_ids" if "entity_ids" in body else "entity_id"] = (
        [full(x) for x in body["entity_ids"]] if "entity_ids" in body else full(body["entity_id"])
    )
    if "project" in body:
        out["project"] = f"{graph.org}_{body['project']}"
    return out


@pytest.mark.parametrize("mode", ["custom", "generic"])
@pytest.mark.parametrize(("body", "caps"), WALKS)
async def test_walk_plans_never_scan_a_table(plan_engine, graph, body, caps, mode):
    report = await explain_for_user(
        plan_engine,
        graph.member,
        "expand",
        {**_ids(graph, body), "include_incoming": True},
        fmt="json",
        mode=mode,
        settings=_settings(**caps),
    )
    assert report.outcome == "ok"
    assert [s.name for s in report.statements] == [
        "sibyl:expand_neighbors.seeds",
        "sibyl:expand_neighbors",
    ]
    for stmt in report.statements:
        assert _seq_scans(stmt.plan) == [], (stmt.name, mode)
        if mode == "custom":  # the plans the service gets (plan_cache_mode = force_custom_plan)
            assert _wide_index_scans(stmt.plan) == [], stmt.name
    walk = report.statements[1].plan
    assert walk[0]["Plan"]["Actual Rows"] > 1, "the walk returned neighbors (+ the flags row)"
    nodes = _nodes(walk)
    assert any(n["Node Type"] == "Recursive Union" for n in nodes)
    assert any(n.get("Join Type") == "Anti" for n in nodes), "the visited set is an anti-join"
    read = {n.get("Relation Name") for n in nodes} & GRAPH_TABLES
    assert {"entities", "edges", "mentions", "passages"} <= read


@pytest.mark.parametrize(("body", "caps"), WALKS)
async def test_the_keyed_walk_never_scans_a_table(plan_engine, graph, body, caps):
    # REST expand's one statement (key -> reader -> readable seeds -> walk) runs on the generic
    # plans of app.core.db.statement_engine: index probes by key hash, by seed id and by node,
    # whatever the org's size; its plan is the walk's plan with the reader's values computed
    from app.service.expand import expand_for_key

    key = await make_key(plan_engine, graph.member)
    request = ExpandRequest(**_ids(graph, body), include_incoming=True)
    async with (
        statement_engine(plan_engine).connect() as conn,
        explain_repo.capture(conn) as captured,
    ):
        answer = await expand_for_key(conn, key, request, settings=_settings(**caps))
    assert json.loads(answer)["neighbors"]
    assert [c.name for c in captured] == ["sibyl:expand_neighbors.keyed"]
    async with explain_repo.rolled_back_read(plan_engine) as conn:
        plan = await explain_repo.explain_statement(conn, captured[0], fmt="json", mode="generic")
    # the memory tables only: the key's own tables (api_keys, users, projects, members) are a
    # handful of rows in the test database, where a scan is the planner's right choice; the
    # same lookup as sibyl:reader.by_key, which every other verb sends
    memory = {"entities", "passages", "entity_grants", "edges", "mentions", "community_members"}
    assert set(_seq_scans(plan.plan)) & memory == set()
    wide = _wide_index_scans(plan.plan)  # the org's project list is read whole, by design
    assert [scan for scan in wide if "entit" in scan or "passage" in scan or "edge" in scan] == []
    nodes = _nodes(plan.plan)
    assert any(n["Node Type"] == "Recursive Union" for n in nodes)
    assert {"entities", "edges", "passages"} <= {n.get("Relation Name") for n in nodes}


SLICES = [
    pytest.param({"entity_id": "e000016"}, id="cut-memory"),
    pytest.param({"entity_id": "passage_e000016_07", "window": 5}, id="named-passage"),
    pytest.param({"entity_id": "e000010"}, id="uncut-memory"),
    pytest.param({"entity_id": "e000016", "project": "p0", "window": 64}, id="in-project"),
]


@pytest.mark.parametrize("mode", ["custom", "generic"])
@pytest.mark.parametrize("body", SLICES)
async def test_slice_plans_never_scan_a_table(plan_engine, graph, body, mode):
    report = await explain_for_user(
        plan_engine, graph.member, "slice", _ids(graph, body), fmt="json", mode=mode
    )
    assert report.outcome == "ok"
    assert report.statements[0].name == "sibyl:fetch_slice.target"
    assert len(report.statements) == (1 if body["entity_id"] == "e000010" else 2)
    for stmt in report.statements:
        assert _seq_scans(stmt.plan) == [], (stmt.name, mode)
        if mode == "custom":
            assert _wide_index_scans(stmt.plan) == [], stmt.name


async def test_walk_longer_than_the_statement_timeout_is_a_503_not_a_hang(
    database_url, graph, engine
):
    # A depth-3 walk from the five hubs with caps opened wide examines thousands of rows per
    # level (about 2 s of work, 600k buffers), while authenticating a key takes well under 1 ms.
    # (With the default caps, sized from `limit`, that walk stops after level 1 in milliseconds.)
    key = await make_key(engine, graph.admin, scopes=("read", "admin"))
    tiny = make_engine(database_url, statement_timeout_ms=250, settings=_settings(pool_size=1))
    wide = _settings(walk_hop_cap=100_000, walk_level_cap=1_000_000, walk_hub_degree=100_000)
    failed: list[str] = []

    def on_error(context: Any) -> None:
        failed.append(explain_repo.statement_name(context.statement or ""))

    event.listen(tiny.sync_engine, "handle_error", on_error)
    event.listen(statement_engine(tiny).sync_engine, "handle_error", on_error)  # REST expand
    app = create_app(tiny, settings=wide)
    headers = {"Authorization": f"Bearer {key}"}
    walk = {"entity_ids": [graph.entity(i) for i in range(1, 6)], "depth": 3, "types": ["zzz"]}
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            cheap = {"entity_id": graph.document(), "window": 1}
            r = await client.post("/api/search/slice", json=cheap, headers=headers)
            assert r.status_code == 200, r.text  # a fast read passes under the same timeout

            r = await client.post("/api/search/expand", json=walk, headers=headers)
            assert r.status_code == 503, r.text
            assert r.json() == {"detail": "The query took longer than the statement timeout"}
            assert int(r.headers["Retry-After"]) > 0
            assert failed == ["sibyl:expand_neighbors.keyed"]  # REST expand: its one statement

            r = await client.post("/api/admin/explain/expand", json=walk, headers=headers)
            assert r.status_code == 503 and "Retry-After" in r.headers

            r = await client.post("/api/search/slice", json=cheap, headers=headers)
            assert r.status_code == 200, "the pooled connection is usable after a timeout"
    finally:
        await tiny.dispose()


async def test_an_explain_cut_by_the_timeout_leaves_no_prepared_statement(database_url, graph):
    one = make_engine(database_url, statement_timeout_ms=60_000, settings=_settings(pool_size=1))
    try:
        request = ExpandRequest(
            entity_ids=[graph.entity(1), graph.entity(2)], depth=3, types=["zzz"]
        )
        wide = _settings(walk_hop_cap=100_000, walk_level_cap=1_000_000, walk_hub_degree=100_000)
        with pytest.raises(sa_exc.DBAPIError) as caught:
            async with explain_repo.rolled_back_read(one) as conn:
                reader = await reader_by_user(conn, user_id=graph.member)
                assert reader is not None
                async with explain_repo.capture(conn) as captured:
                    await verbs()["expand"].run(conn, reader, request, wide)
                await conn.exec_driver_sql("SET LOCAL statement_timeout = 20")
                await explain_repo.explain_statement(conn, captured[-1])
        assert "57014" in str(getattr(caught.value.orig, "sqlstate", "")) or "cancel" in str(
            caught.value
        )
        async with one.connect() as conn:
            left = (
                await conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sibyl_explain%'"
                )
            ).scalar()
        assert left == 0
    finally:
        await one.dispose()


async def test_a_cancel_reported_after_prepare_stored_the_statement_leaves_none(database_url):
    """A name is registered before its PREPARE: one the server stored and one it never did are
    both settled after the rollback, and the connection stays in the pool (not discarded)."""
    one = make_engine(database_url, statement_timeout_ms=60_000, settings=_settings(pool_size=1))
    try:
        with pytest.raises(RuntimeError):
            async with explain_repo.rolled_back_read(one) as conn:
                backend = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar()
                await conn.exec_driver_sql("PREPARE sibyl_explain_stored AS SELECT 1")
                conn.info["sibyl_explain_prepared"] |= {
                    "sibyl_explain_stored",
                    "sibyl_explain_never_prepared",
                }
                raise RuntimeError("cancelled")
        async with one.connect() as conn:
            again = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar()
            left = (
                await conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sibyl_explain%'"
                )
            ).scalar()
        assert left == 0
        assert again == backend, "the connection was kept, not invalidated"
    finally:
        await one.dispose()


async def test_explain_of_a_walk_matches_a_direct_explain_call(plan_engine, graph):
    """``explain_for_user`` and ``explain`` on a caller's connection report the same statements."""
    body = _ids(graph, {"entity_ids": ["e000100"], "depth": 1})
    a = await explain_for_user(plan_engine, graph.member, "expand", body)
    async with explain_repo.rolled_back_read(plan_engine) as conn:
        reader = await reader_by_user(conn, user_id=graph.member)
        assert reader is not None
        b = await explain(conn, reader, verbs()["expand"], body)
    assert [(s.sql, s.parameters) for s in a.statements] == [
        (s.sql, s.parameters) for s in b.statements
    ]
