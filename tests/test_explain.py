"""``explain`` shows the statements the service really sends, their values and their plans.

The proof that no copy of the SQL is kept beside the real one: the statements (text and values)
``explain`` reports for a request are byte-identical to those an engine listener records while
the same request is served over REST. Also: the plans are ``EXPLAIN (ANALYZE, BUFFERS)`` output
(text and JSON, custom and generic), the psql replay script runs, the CLI prints it all, and the
admin route is a 404 for every key but an admin one.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import event
from typer.testing import CliRunner

from app.api.app import create_app
from app.cli.main import cli
from app.core.db import make_engine, statement_engine
from app.core.settings import get_settings
from app.domain.permissions import LACKS_READ
from app.service.explain import SEARCH_LEXICAL_SHAPES, STATEMENT_SHAPES, explain_for_user
from tests.builders import import_dicts, make_key
from tests.world import World

DOC = "\n\n".join(f"## Section {i}\n\n" + "words and more words " * 60 for i in range(5))


@pytest.fixture(scope="module")
async def world(engine) -> World:
    w = (
        World()
        .entity("alpha", type_="decision", name="Alpha decision")
        .entity("beta", name="Beta note")
        .entity("gamma", name="Gamma note")
        .entity("doc", type_="document", content=DOC, name="Long document")
        .edge("alpha", "DEPENDS_ON", "beta")
        .edge("gamma", "REFERENCES", "alpha")
        .edge("beta", "RELATED_TO", "doc")
    )
    await w.load(engine)
    return w


@pytest.fixture(scope="module")
async def keys(engine, world) -> dict[str, str]:
    admin_user = f"user_admin_{world.org}"  # the admin scope is for org owners and admins only
    await import_dicts(
        engine,
        [{"kind": "user", "id": admin_user, "org": world.org, "handle": "adm", "role": "admin"}],
    )
    return {
        "admin": await make_key(engine, admin_user, scopes=("read", "admin")),
        "read": await make_key(engine, world.user, scopes=("read", "write")),
    }


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


BODIES = {
    "expand": {"entity_ids": ["alpha", "gamma"], "depth": 3, "types": ["note", "document"]},
    "slice": {"entity_id": "doc", "window": 2},
    "search": {"query": "words zqxjunk"},  # an unknown word: the fallback probes it too
}
ROUTES = {"expand": "/api/search/expand", "slice": "/api/search/slice", "search": "/api/search"}


@pytest.mark.parametrize("verb", sorted(BODIES))
async def test_explain_reports_exactly_what_the_service_sends(engine, client, world, keys, verb):
    sent: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, tuple(parameters)))

    engines = [engine.sync_engine, statement_engine(engine).sync_engine]  # REST expand: the 2nd
    for eng in engines:
        event.listen(eng, "before_cursor_execute", record)
    try:
        r = await client.post(ROUTES[verb], json=BODIES[verb], headers=_auth(keys["admin"]))
    finally:
        for eng in engines:
            event.remove(eng, "before_cursor_execute", record)
    assert r.status_code == 200, r.text
    served = [(sql, params) for sql, params in sent if not sql.startswith("/* sibyl:reader")]
    # these bodies run every statement of the verb (REST expand: its one keyed statement)
    expected = {"expand": 1, "slice": STATEMENT_SHAPES["slice"], "search": SEARCH_LEXICAL_SHAPES}
    assert len(served) == expected[verb]

    r = await client.post(
        f"/api/admin/explain/{verb}", json=BODIES[verb], headers=_auth(keys["admin"])
    )
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["outcome"] == "ok" and report["plan_mode"] == "custom"
    explained = [
        (s["sql"], tuple(p["value"] for p in s["parameters"])) for s in report["statements"]
    ]
    if verb == "expand":
        # REST expand is one statement that authenticates the key, resolves the seeds and walks
        # (issue 15); explain reads as a user, so it shows the seed statement and the walk MCP
        # and the CLI send. The REST statement holds that very walk, with the reader's values
        # and the seeds computed in the statement (app.repo.walk.KEYED_WALK_SQL).
        # A walk that cannot reach a passage (this one: no passage seed, no relationship
        # named) is sent without the passage arms, its walk otherwise the same.
        from app.repo.walk import (
            _PASSAGE_ARMS,
            KEYED_WALK_MEMORIES_SQL,
            KEYED_WALK_SQL,
            WALK_ANSWER,
            WALK_CTES,
            WALK_SQL,
        )

        def sent_as(statement: Any) -> str:
            return str(statement.compile(dialect=engine.dialect))

        assert served[0][0] == sent_as(KEYED_WALK_MEMORIES_SQL)
        assert WALK_CTES in KEYED_WALK_SQL.text
        assert WALK_ANSWER in KEYED_WALK_SQL.text
        assert WALK_CTES.replace(_PASSAGE_ARMS, "") in KEYED_WALK_MEMORIES_SQL.text
        # passages are read only to resolve a passage seed (never one here)
        assert KEYED_WALK_MEMORIES_SQL.text.count("FROM passages") == 1
        assert KEYED_WALK_SQL.text.count("FROM passages") > 1
        assert explained[0][0].startswith("/* sibyl:expand_neighbors.seeds */")
        assert explained[1][0] == sent_as(WALK_SQL)
        assert WALK_CTES in WALK_SQL.text and WALK_ANSWER in WALK_SQL.text
    else:
        assert explained == served
    assert report["figures"] == "none"  # over REST by default: no plan spans other orgs
    for stmt in report["statements"]:
        assert stmt["sql"].startswith(f"/* {stmt['name']} */")
        assert stmt["name"].startswith(
            {"expand": "sibyl:expand_neighbors", "slice": "sibyl:fetch_slice"}.get(verb, "sibyl:")
        )
        assert all(p["name"] for p in stmt["parameters"])
        assert stmt["plan"] is None and stmt["psql"].startswith("BEGIN")
    measured = await _explain_measured(engine, keys["admin"], verb)
    assert measured["figures"] == "measured"
    assert [s["sql"] for s in measured["statements"]] == [s["sql"] for s in report["statements"]]
    for stmt in measured["statements"]:
        plan = "\n".join(stmt["plan"])
        assert "Execution Time" in plan and "Buffers" in plan, plan


async def _explain_measured(engine, key: str, verb: str) -> dict[str, Any]:
    """The REST explain of a service whose operator set ``SIBYL_REST_EXPLAIN=measured``."""
    app = create_app(
        engine, settings=get_settings().model_copy(update={"rest_explain": "measured"})
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post(f"/api/admin/explain/{verb}", json=BODIES[verb], headers=_auth(key))
    assert r.status_code == 200, r.text
    return r.json()


async def test_rest_explain_shows_nothing_another_org_writes_can_move(engine, client, world, keys):
    """Two breakers' trials: an org admin's REST explain of a search showed ``rows=0`` on the
    full-text index, then ``rows=37`` once another org wrote 37 private memories holding the
    word (the index holds every org's rows; a small table is read whole); and plans without
    figures changed their indexes when another org imported 20,000 memories (the planner's
    statistics span every org). Over REST the answer holds no plan: byte-identical before and
    after. The pair: the measured plan of the same request does count the other org's rows
    (table scans are forced here, so that this small database reads them the way a full-text
    index does on a big one)."""
    from app.repo.explain import rolled_back_read
    from app.repo.readers import reader_by_key
    from app.service.explain import explain, verbs

    word = "plughword" + secrets.token_hex(3)
    body = {"query": word}
    mine = {"kind": "entity", "id": "holds_" + word, "org": world.org, "type": "note"}
    await import_dicts(engine, [{**mine, "name": word, "content": word, "scope": "org"}])

    async def removed() -> int:
        """Rows the measured plan read and dropped (another org's among them)."""
        async with rolled_back_read(engine) as conn:
            for scan in ("indexscan", "bitmapscan", "indexonlyscan"):
                await conn.exec_driver_sql(f"SET LOCAL enable_{scan} = off")
            reader = await reader_by_key(conn, key=keys["admin"])
            assert reader is not None
            report = await explain(conn, reader, verbs()["search"], body, measured=True)
        plans = json.dumps([s.plan for s in report.statements])
        return sum(int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plans))

    async def rest() -> str:
        r = await client.post("/api/admin/explain/search", json=body, headers=_auth(keys["admin"]))
        assert r.status_code == 200 and r.json()["figures"] == "none", r.text
        assert all(s["plan"] is None for s in r.json()["statements"])
        return r.text

    before_rest, before = await rest(), await removed()
    other = "org_other_" + secrets.token_hex(4)
    owner = f"user_{other}"
    await import_dicts(
        engine,
        [
            {"kind": "org", "id": other, "name": "Other"},
            {"kind": "user", "id": owner, "org": other, "handle": "o", "role": "member"},
        ]
        + [
            {
                "kind": "entity",
                "id": f"secret_{i}",
                "org": other,
                "type": "note",
                "name": f"{word} {i}",
                "content": f"{word} private",
                "owner": owner,
            }
            for i in range(37)
        ],
    )
    assert await rest() == before_rest
    assert await removed() >= before + 37


async def test_json_and_generic_plans_and_psql_replay(engine, database_url, world):
    report = await explain_for_user(
        engine, world.user, "expand", BODIES["expand"], fmt="json", mode="generic"
    )
    assert [s.name for s in report.statements] == [
        "sibyl:expand_neighbors.seeds",
        "sibyl:expand_neighbors",
    ]
    for stmt in report.statements:
        (document,) = stmt.plan
        assert document["Plan"]["Node Type"] and "Execution Time" in document
        assert "Shared Hit Blocks" in document["Plan"]
    walk = report.statements[1]
    assert "$" in str(walk.plan), "a generic plan keeps its parameters as $n"
    assert {p.name: p.type for p in walk.parameters}["seed_ids"] == "text[]"

    conn = await asyncpg.connect(database_url)
    try:
        for stmt in report.statements:
            await conn.execute(stmt.psql)  # the replay script runs as printed
        left = await conn.fetchval(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sibyl%'"
        )
        assert left == 0
    finally:
        await conn.close()


async def test_a_verb_that_answers_404_still_shows_what_it_ran(engine, world):
    report = await explain_for_user(engine, world.user, "slice", {"entity_id": "nothing_here"})
    assert report.outcome == "404 Entity not found"
    assert [s.name for s in report.statements] == ["sibyl:fetch_slice.target"]


async def test_an_admin_key_without_read_explains_nothing(engine, client, world, keys):
    """Explain runs the verb it explains: an ``admin``-only key ranked searches and told
    readable memories from absent ones through it (a breaker's trial). It now gets 403 for every
    verb; the pair: the same admin's read,admin key explains."""
    admin_only = await make_key(engine, f"user_admin_{world.org}", scopes=("admin",))
    for verb in ("expand", "slice", "search"):
        r = await client.post(
            f"/api/admin/explain/{verb}", json=BODIES[verb], headers=_auth(admin_only)
        )
        assert (r.status_code, r.json()) == (403, {"detail": LACKS_READ}), verb
        r = await client.post(
            f"/api/admin/explain/{verb}", json=BODIES[verb], headers=_auth(keys["admin"])
        )
        assert r.status_code == 200, verb


async def test_admin_route_is_a_404_for_everyone_else(client, world, keys):
    url = "/api/admin/explain/expand"
    body = BODIES["expand"]
    hidden = {"detail": "Not found"}
    for headers in ({}, _auth(keys["read"]), _auth("not-a-key")):
        r = await client.post(url, json=body, headers=headers)
        assert (r.status_code, r.json()) == (404, hidden)
        r = await client.post(url, json={"bad": "body"}, headers=headers)
        assert (r.status_code, r.json()) == (404, hidden)
    r = await client.post("/api/admin/explain/drop_table", json=body, headers=_auth(keys["admin"]))
    assert (r.status_code, r.json()) == (404, hidden)
    r = await client.post(url, json={"entity_ids": "alpha"}, headers=_auth(keys["admin"]))
    assert r.status_code == 422
    # located in the body, as the verb's own route says it (a new-user trial: ["entity_ids"])
    same = await client.post(
        "/api/search/expand", json={"entity_ids": "alpha"}, headers=_auth(keys["read"])
    )
    assert [e["loc"] for e in r.json()["errors"]] == [e["loc"] for e in same.json()["errors"]]
    assert r.json()["errors"][0]["loc"][0] == "body"
    r = await client.post(url, json={"entity_ids": []}, headers=_auth(keys["admin"]))
    assert r.status_code == 400
    r = await client.post(f"{url}?format=json", json=body, headers=_auth(keys["admin"]))
    assert r.status_code == 200 and r.json()["format"] == "json"
    assert [s["plan"] for s in r.json()["statements"]] == [None, None]  # no plan over REST


async def test_a_malformed_request_tells_a_non_admin_no_more_than_a_clean_one(client, keys):
    """Query parameters and the body are read only once the key may use the route: for anyone
    else a bad ``format``, ``generic`` or body is the same 404 as an unknown admin route (a
    breaker told the route apart by its 401 and 422 answers); an admin gets the 422s."""
    hidden = (404, {"detail": "Not found"})
    malformed = [
        ("?format=xml", b'{"entity_ids": ["alpha"]}'),
        ("?generic=maybe", b'{"entity_ids": ["alpha"]}'),
        ("", b"{not json"),
        ("", b'{"entity_ids": "alpha"}'),
    ]
    for headers in ({}, _auth(keys["read"]), _auth("not-a-key")):
        for path in ("/api/admin/explain/expand", "/api/admin/no_such_route"):
            for query, content in malformed:
                json_headers = {**headers, "Content-Type": "application/json"}
                r = await client.post(path + query, content=content, headers=json_headers)
                assert (r.status_code, r.json()) == hidden, (headers, path, query)
    admin = {**_auth(keys["admin"]), "Content-Type": "application/json"}
    details = []
    for query, content in malformed:
        r = await client.post("/api/admin/explain/expand" + query, content=content, headers=admin)
        assert r.status_code == 422, r.text
        details.append(r.json()["detail"])
    assert details[0].startswith("Invalid request: query.format")
    assert details[1].startswith("Invalid request: query.generic")
    assert details[2].startswith("Invalid request: body")
    r = await client.post(
        "/api/admin/explain/expand?generic=true", json=BODIES["expand"], headers=admin
    )
    assert r.status_code == 200 and r.json()["plan_mode"] == "generic"


ODD_REQUESTS = [
    ("GET", "/api/admin/explain/search", None),
    ("PUT", "/api/admin/explain/search", b"{}"),
    ("OPTIONS", "/api/admin/explain/search", None),
    ("POST", "/api/admin/explain/search/", b"{}"),
    ("POST", "/api/admin/doctor", None),
    ("GET", "/api/admin/doctor/", None),
    ("POST", "/api/admin/users", b"{not json"),
    ("POST", "/api/admin/users", b'{"id": 5}'),
]


async def test_no_method_slash_or_body_tells_a_non_admin_that_an_admin_route_exists(client, keys):
    """A wrong method (405 with ``Allow``), a trailing slash (the router's 307) and a body that
    fails validation (422, or 401 without a key) each told the admin routes apart from absent
    ones (a breaker's second round): for anyone but an admin they are the one 404, headers and
    all, like an unknown admin route; an admin still gets the 405s and 422s."""
    for headers in ({}, _auth(keys["read"]), _auth("not-a-key")):
        unknown = await client.get("/api/admin/no_such_route", headers=headers)
        for method, path, content in ODD_REQUESTS:
            json_headers = {**headers, "Content-Type": "application/json"}
            r = await client.request(method, path, content=content, headers=json_headers)
            assert (r.status_code, r.json()) == (404, {"detail": "Not found"}), (method, path)
            assert dict(r.headers) == dict(unknown.headers), (method, path)
    admin = {**_auth(keys["admin"]), "Content-Type": "application/json"}
    seen = []
    for method, path, content in ODD_REQUESTS:
        r = await client.request(method, path, content=content, headers=admin)
        seen.append(r.status_code)
    assert seen == [405, 405, 405, 404, 405, 404, 422, 422]


def test_cli_prints_statements_parameters_and_plans(database_url, world):
    runner = CliRunner()
    result = runner.invoke(
        cli, ["explain", "expand", "--user", world.user, '{"entity_ids": ["alpha"], "depth": 2}']
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("-- [1/2] sibyl:expand_neighbors.seeds") < out.index(
        "-- [2/2] sibyl:expand_neighbors"
    )
    assert "/* sibyl:expand_neighbors */\nWITH RECURSIVE wr AS" in out
    assert f'r_org (text) = "{world.org}"' in out
    assert "Execution Time" in out and "Recursive Union" in out

    result = runner.invoke(
        cli, ["explain", "slice", "--user", world.user, '{"entity_id": "doc"}', "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert '"Node Type"' in result.output

    result = runner.invoke(cli, ["explain", "nope", "--user", world.user, "{}"])
    assert result.exit_code != 0 and "Unknown verb" in result.output
    result = runner.invoke(cli, ["explain", "expand", "--user", "user_nobody", "{}"])
    assert result.exit_code != 0


async def test_admin_scope_is_only_for_org_admins_and_explain_checks_the_role(engine, client):
    """Plans count rows the read rule hides: a plain member never gets them (found by a tester:
    an admin-scoped key of a member read `Rows Removed by Filter`)."""
    import pytest

    from app.core.errors import BadRequest
    from tests.builders import make_key
    from tests.world import World

    w = World().entity("x")
    await w.load(engine)
    with pytest.raises(BadRequest):
        await make_key(engine, w.user, scopes=("read", "admin"))
    # and a key that somehow holds the scope (minted before this rule) still gets 404
    from sqlalchemy import text

    key = await make_key(engine, w.user, scopes=("read",))
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE api_keys SET scopes = ARRAY['read', 'admin'] WHERE user_id = :u"),
            {"u": w.user},
        )
    r = await client.post(
        "/api/admin/explain/expand",
        json={"entity_ids": ["x"]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert (r.status_code, r.json()) == (404, {"detail": "Not found"})


async def test_single_org_measures_only_while_the_database_holds_one_org(database_url):
    """``make run`` serves measured plans on a one-org database (``SIBYL_REST_EXPLAIN=
    single-org``). A new user's trial imported a second org into the running server and its
    admin still saw measured plans, which count the other org's rows: the count is now taken on
    every request. The pair, on a database of its own: one org, measured; a second org
    imported, no plan (the same request, the same key)."""
    from app.core.migrations import upgrade
    from tests.builders import admin_sql, with_database

    name = f"sibyl_one_org_{secrets.token_hex(4)}"
    server = with_database(database_url, "postgres")
    await admin_sql(server, f'CREATE DATABASE "{name}"')
    try:
        url = with_database(database_url, name)
        await asyncio.to_thread(upgrade, url)
        engine = make_engine(url)
        try:
            first = World().entity("alpha").entity("beta").edge("alpha", "DEPENDS_ON", "beta")
            await first.load(engine)
            key = await first.admin_key(engine)
            settings = get_settings().model_copy(update={"rest_explain": "single-org"})
            app = create_app(engine, settings=settings)
            transport = httpx.ASGITransport(app=app)
            body = {"entity_ids": ["alpha"]}
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                alone = await client.post(
                    "/api/admin/explain/expand", json=body, headers=_auth(key)
                )
                await World().entity("other").load(engine)  # a second org, while it serves
                shared = await client.post(
                    "/api/admin/explain/expand", json=body, headers=_auth(key)
                )
        finally:
            await engine.dispose()
    finally:
        await admin_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert alone.status_code == shared.status_code == 200
    assert alone.json()["figures"] == "measured"
    assert all(s["plan"] for s in alone.json()["statements"])
    assert shared.json()["figures"] == "none"
    assert all(s["plan"] is None for s in shared.json()["statements"])
