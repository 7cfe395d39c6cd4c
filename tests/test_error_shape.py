"""One error model (issue 14, README "Errors"): every error answer of every route is
``{"detail": "<message>"}`` (plus ``errors`` on a 422), never echoes the caller's input, and the
MCP tools report argument errors the same way, without the rejected values.

The routes are enumerated from the app itself, so a new route is covered the day it is added.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest

from app.api.app import create_app
from tests.builders import import_dicts, make_key
from tests.test_mcp import mcp_as, text_of

# A fixed marker (test ids must be the same on every xdist worker); no route or row holds it.
SECRET = "zz_secret_4f0c9e1a"
"""A value no answer may ever contain: every malformed request below carries it."""


def routes() -> list[tuple[str, str, list[str] | None]]:
    """Every (method, path, body fields) of the app, from its own OpenAPI (every route is
    documented there; ``None``: the route takes no body)."""
    spec = create_app().openapi()
    schemas = spec["components"]["schemas"]
    out = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            fields = None
            if body is not None:
                schema = body["content"]["application/json"]["schema"]
                ref = schema.get("$ref", "").rsplit("/", 1)[-1]
                fields = list(schemas[ref]["properties"]) if ref else ["x"]
            out.append((method.upper(), path, fields))
    return out


ROUTES = routes()


def fill(path: str) -> str:
    """``path`` with each ``{param}`` replaced by the secret marker (an id that does not exist)."""
    return re.sub(r"\{[^}]+\}", SECRET, path)


def assert_error_shape(status: int, body: Any, text: str, where: str) -> None:
    assert status >= 400 and status != 500, (where, status, text)
    assert isinstance(body, dict), (where, text)
    assert isinstance(body.get("detail"), str) and body["detail"], (where, text)
    assert set(body) <= {"detail", "errors"}, (where, text)
    if status == 422:
        assert isinstance(body["errors"], list) and body["errors"], (where, text)
        for error in body["errors"]:
            assert set(error) == {"loc", "msg", "type"}, (where, text)
    else:
        assert "errors" not in body, (where, text)
    assert SECRET not in text, (where, text)


@pytest.fixture(scope="module")
async def owner_key(engine) -> str:
    """A read,write,admin key of an org owner: every route is reachable with it."""
    org = "org_err_" + secrets.token_hex(4)
    user = f"user_{org}"
    await import_dicts(
        engine,
        [
            {"kind": "org", "id": org, "name": "Errors"},
            {"kind": "user", "id": user, "org": org, "handle": "e", "role": "owner"},
            {"kind": "project", "id": "proj", "org": org, "name": "P", "visibility": "org"},
        ],
    )
    return await make_key(engine, user, scopes=("read", "write", "admin"))


def test_every_route_is_enumerated():
    paths = {path for _, path, _ in ROUTES}
    assert {"/api/search/expand", "/api/entities", "/api/admin/users", "/healthz"} <= paths
    assert len(ROUTES) >= 30


@pytest.mark.parametrize(
    ("method", "path", "fields"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES]
)
async def test_every_error_of_every_route_has_the_one_shape(
    client, owner_key, method, path, fields
):
    url = fill(path)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("no key", {}),
        ("unknown key", {"headers": {"Authorization": f"Bearer {SECRET}"}}),
    ]
    auth = {"Authorization": f"Bearer {owner_key}"}
    if fields is not None:
        cases += [
            ("not JSON", {"headers": auth | {"Content-Type": "application/json"}, "content": "{"}),
            ("a list", {"headers": auth, "json": [SECRET]}),
            ("unknown field", {"headers": auth, "json": {SECRET: SECRET, "id": [SECRET]}}),
            ("wrong types", {"headers": auth, "json": {key: [SECRET] for key in fields}}),
        ]
    else:
        cases.append(("absent ids", {"headers": auth}))
    seen_error = False
    for label, kwargs in cases:
        r = await client.request(method, url, **kwargs)
        where = f"{method} {path} ({label})"
        if r.status_code < 400:
            continue  # e.g. /healthz, or GET of a list
        seen_error = True
        assert r.headers["content-type"].startswith("application/json"), where
        assert_error_shape(r.status_code, r.json(), r.text, where)
    assert seen_error or path in ("/healthz", "/readyz")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nowhere/" + SECRET), ("DELETE", "/api/search/expand"), ("GET", "/api/search")],
)
async def test_unknown_routes_and_methods_have_the_one_shape(client, method, path):
    r = await client.request(method, path)
    assert r.status_code in (404, 405)
    assert_error_shape(r.status_code, r.json(), r.text, f"{method} {path}")


async def test_an_unknown_route_answers_as_a_hidden_admin_route(client):
    unknown = await client.get("/api/admin/no_such_route")
    hidden = await client.get("/api/admin/users")  # no key: the admin routes do not exist
    assert (unknown.status_code, unknown.json()) == (hidden.status_code, hidden.json())
    assert unknown.json() == {"detail": "Not found"}


@pytest.mark.parametrize("path", ["/api/search/", "/api/search/expand/", "/api/entities/"])
async def test_a_trailing_slash_is_a_404_not_a_redirect_to_the_callers_host(client, path):
    """``POST /api/search/`` answered 307 to ``http://<the request's Host>/api/search``, before
    any key was checked (a trial): a path the service does not serve is a 404, key or none."""
    r = await client.post(path, json={}, headers={"Host": "attacker.example"})
    assert r.status_code == 404 and "location" not in r.headers
    assert_error_shape(r.status_code, r.json(), r.text, path)


async def test_a_422_names_fields_and_reasons_in_one_line(client, owner_key):
    r = await client.post(
        "/api/search/expand",
        json={"entity_ids": ["x"], "depth": SECRET, SECRET: 1},
        headers={"Authorization": f"Bearer {owner_key}"},
    )
    assert r.status_code == 422
    body = r.json()
    assert body["detail"].startswith("Invalid request: body.depth: Input should be a valid integer")
    assert [(e["loc"], e["type"]) for e in body["errors"]] == [
        (["body", "depth"], "int_type"),
        (["body"], "extra_forbidden"),  # an unknown field's name is the caller's text too
    ]


async def test_several_unknown_fields_are_one_reason_said_once(client, owner_key):
    r = await client.post(
        "/api/search/expand",
        json={"entity_ids": ["x"], SECRET: 1, SECRET + "2": 2, SECRET + "3": 3},
        headers={"Authorization": f"Bearer {owner_key}"},
    )
    assert r.status_code == 422
    assert r.json() == {
        "detail": "Invalid request: body: Extra inputs are not permitted",
        "errors": [
            {"loc": ["body"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
        ],
    }


async def test_a_400_is_a_message(client, owner_key):
    r = await client.post(
        "/api/search/expand",
        json={"entity_ids": ["x"], "relationship_types": ["NO-DASH"]},
        headers={"Authorization": f"Bearer {owner_key}"},
    )
    assert r.status_code == 400
    assert r.json() == {"detail": "relationship_types entries must match [A-Za-z0-9_]{1,64}"}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/search/expand", "relationship_types"),
        ("/api/search/expand", "types"),
        ("/api/search", "types"),
        ("/api/search", "lifecycle"),
    ],
)
async def test_a_name_filter_lists_at_most_256_names(client, owner_key, path, field):
    """A breaker's 25,000-name list held the event loop for 11 s (duplicates found by a list
    scan): 256 names (duplicates included) are a filter, 257 or 100,000 a 400 that says so."""
    headers = {"Authorization": f"Bearer {owner_key}"}
    base = {"entity_ids": ["x"]} if path.endswith("expand") else {"query": "kelp"}
    names = [f"R{i % 100}" for i in range(256)] if field != "lifecycle" else ["active"] * 256
    r = await client.post(path, json={**base, field: names}, headers=headers)
    assert r.status_code == 200, r.text
    for n in (257, 100_000):
        r = await client.post(
            path, json={**base, field: [f"R{i}" for i in range(n)]}, headers=headers
        )
        assert (r.status_code, r.json()) == (400, {"detail": f"{field} may list at most 256 names"})


async def test_expand_takes_at_most_256_seeds(client, owner_key):
    """A trial sent 300,000 seeds and got a 3.3 MB answer echoing every id in ``unresolved``:
    the seed list is bounded like every other list. 256 (the first 8 walked, the rest in
    ``unresolved`` as §5 says) are an answer; 257 or 300,000 a 400 that says so, echoing none."""
    headers = {"Authorization": f"Bearer {owner_key}"}
    seeds = [f"no_such_{i}" for i in range(256)]
    r = await client.post("/api/search/expand", json={"entity_ids": seeds}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["unresolved"] == seeds and r.json()["filters"]["origin_limit"] == 8
    for n in (257, 300_000):
        ids = [f"no_such_{i}" for i in range(n)]
        r = await client.post("/api/search/expand", json={"entity_ids": ids}, headers=headers)
        assert (r.status_code, r.json()) == (400, {"detail": "entity_ids may list at most 256 ids"})


def test_openapi_documents_the_one_error_body():
    spec = create_app().openapi()
    body = spec["components"]["schemas"]["ErrorBody"]
    assert set(body["properties"]) == {"detail", "errors"}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if not status.startswith(("4", "5")) or path == "/readyz":
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)


# --- MCP ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("expand_neighbors", {"entity_ids": ["x"], "depth": SECRET}),
        ("expand_neighbors", {"entity_ids": SECRET}),
        ("expand_neighbors", {"entity_ids": ["x"], SECRET: SECRET}),
        ("fetch_slice", {"entity_id": [SECRET]}),
        ("fetch_slice", {"entity_id": "x", "window": 2.5, "project": {"id": SECRET}}),
        ("search", {"query": {SECRET: SECRET}}),
        ("context", {"goal": "g", "limit": SECRET}),
        ("remember", {"type": "note", "name": "n", "scope": SECRET}),
        ("link", {"src": "a", "relationship": ["R"], "dst": SECRET + "_x"}),
        ("link", {"src": "a", "relationship": "R"}),
    ],
)
async def test_mcp_argument_errors_name_fields_never_values(owner_key, tool, arguments):
    async with mcp_as(None, owner_key) as mcp:
        result = await mcp.call_tool(tool, arguments)
    text = text_of(result)
    assert result.is_error and result.structured_content is None
    assert text.startswith("Invalid arguments: "), text
    assert SECRET not in text and "input_value" not in text, text


async def test_mcp_argument_error_reads_like_rests_422(client, owner_key):
    async with mcp_as(None, owner_key) as mcp:
        result = await mcp.call_tool("expand_neighbors", {"entity_ids": ["x"], "depth": "3"})
    r = await client.post(
        "/api/search/expand",
        json={"entity_ids": ["x"], "depth": "3"},
        headers={"Authorization": f"Bearer {owner_key}"},
    )
    assert text_of(result) == "Invalid arguments: depth: Input should be a valid integer"
    assert r.json()["detail"] == "Invalid request: body.depth: Input should be a valid integer"


async def test_mcp_http_refusal_has_the_one_shape(client):
    r = await client.post("/mcp", json={}, headers={"Authorization": f"Bearer {SECRET}"})
    assert r.status_code == 401
    assert_error_shape(r.status_code, r.json(), r.text, "POST /mcp")
