"""Hostile values in every string field of every request (issue 9): never a 5xx, never SQL.

A hand-written list of values that break naive services (quotes, semicolons, ``--``, comment and
placeholder syntax of SQL and of SQLAlchemy's ``text()``, NUL, tabs, newlines, lone surrogates,
look-alike and invisible Unicode, a 10,000-character string) goes into every string field of
every request body, every string path and query parameter of every operation of the app's
OpenAPI, and every string argument of every MCP read tool; very large, negative and fractional
numbers go into every integer field. The fields are enumerated from the OpenAPI itself, so a new
field or route is fuzzed as soon as it exists (a route whose body has no valid sample here fails
the test).

What must hold:

- the answer is one of 200, 201, 204, 400, 403, 404, 409, 412, 413, 422: never a 5xx (and an
  MCP tool refuses with a tool error, never a crash);
- no value ever reaches the text of an SQL statement: every statement the service sent during
  the run is recorded, and none contains a hostile value's tag (values go as bound parameters);
- the read routes change nothing: the row count of every table is the same after them;
- what a write accepts it stores verbatim: a memory named with a hostile value reads back with
  that very name and body.
"""

from __future__ import annotations

import json
import secrets
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from mcp import Client
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.app import create_app
from app.mcp.server import build_mcp, fixed_key
from tests.builders import import_dicts, make_key
from tests.samples import READ_OPERATIONS, SAMPLES

TAG = "ZQX"  # in every value that would be recognisable inside an SQL statement's text
HOSTILE: list[str] = [
    "'",
    '"',
    "\\",
    "' OR '1'='1' --ZQX1",
    "'; DROP TABLE entities; --ZQX2",
    '"; DELETE FROM api_keys; --ZQX3',
    "x'); SELECT pg_sleep(10); --ZQX4",
    "/* ZQX5 */",
    "%ZQX6%",
    "_",
    ":r_org ZQX7",
    "$1 ZQX8",
    "%(r_org)s ZQX9",
    "{r_org} ZQXA",
    "\x00",
    "ZQXB\x00tail",
    "tab\tZQXC",
    "line\nZQXD",
    "cr\r\nZQXE",
    "\ud800",
    "реr_ZQXF",  # Cyrillic look-alikes
    "ｐｅｐ＿ZQXG",  # fullwidth
    "note\u200bZQXH",  # zero-width space
    "\u202eZQXI",  # right-to-left override
    "e\u0301ZQXJ",  # combining accent
    "\ufeffZQXK🙂",
    "../../etc/passwd",
    "[[e1]] ZQXL",
    "<script>alert('ZQXM')</script>",
    " ",
    "",
    "Z" * 10_000,
]
NUMBERS: list[Any] = [10**30, -(10**30), 2**63, 2**63 - 1, -(2**63), 2**31, -1, 0, 3.5, 1e308]
ALLOWED = {200, 201, 204, 400, 403, 404, 409, 412, 413, 422}

# --- what to send ------------------------------------------------------------------------------


def resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a ``$ref`` to ``#/components/schemas/...`` replaced by its target."""
    while "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def kind(spec: dict[str, Any], node: dict[str, Any]) -> str | None:
    """``string``, ``integer``, ``array`` (of strings or anything), ``objects`` (an array of
    objects), ``object`` (a free JSON object) or None for what takes no hostile value."""
    options = [resolve(spec, o) for o in node.get("anyOf", [node])]
    # a compact schema writes a nullable field as one node: {"type": ["string", "null"]}
    options = [
        {**o, "type": t} if isinstance(o.get("type"), list) else o
        for o in options
        for t in (o["type"] if isinstance(o.get("type"), list) else [o.get("type")])
    ]
    types = {o.get("type") for o in options}
    if "string" in types:
        return "string"
    if "integer" in types:
        return "integer"
    for o in options:
        if o.get("type") == "array":
            items = resolve(spec, o.get("items", {}))
            return "objects" if items.get("type") == "object" else "array"
        if o.get("type") == "object":
            return "object"
    return None


def variants(base: Any, field_kind: str, value: Any) -> list[Any]:
    """The values to put in a field of ``field_kind`` to carry ``value``."""
    if field_kind in ("string", "integer"):
        return [value]
    if field_kind == "array":
        return [[value], [*(base or []), value]]
    if field_kind == "object":
        return [{"k": value}, {value: "v"}] if isinstance(value, str) else [{"k": value}]
    return []


def body_cases(spec: dict[str, Any], op: dict[str, Any], base: Any) -> Iterator[tuple[str, Any]]:
    """(field, body) for every hostile value in every field of the request body."""
    if base is None:
        return
    schema = resolve(spec, op["requestBody"]["content"]["application/json"]["schema"])
    props = {k: resolve(spec, v) for k, v in schema.get("properties", {}).items()}
    if not props:  # a free body (explain: the verb's own request): fuzz the sample's fields
        props = {k: {"type": "string"} for k in base}
    for name, prop in props.items():
        field_kind = kind(spec, prop)
        if field_kind == "objects":  # e.g. declared spans: every string field of the item
            item_schema = resolve(
                spec, resolve(spec, prop.get("anyOf", [prop])[0]).get("items", {})
            )
            items = base.get(name) or []
            for sub, sub_prop in item_schema.get("properties", {}).items():
                if items and kind(spec, sub_prop) == "string":
                    for value in HOSTILE:
                        yield f"{name}[0].{sub}", {**base, name: [{**items[0], sub: value}]}
            continue
        pool = NUMBERS if field_kind == "integer" else HOSTILE
        for value in pool:
            for v in variants(base.get(name), field_kind or "", value):
                yield name, {**base, name: v}


def param_cases(
    op: dict[str, Any], path: str, query: dict[str, Any]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(parameter, path, query) for every hostile value in every string parameter."""
    for param in op.get("parameters", []):
        if param["in"] not in ("path", "query"):
            continue
        schema = param.get("schema", {})
        types = {o.get("type") for o in schema.get("anyOf", [schema])}
        if "string" not in types:
            continue
        for value in HOSTILE:
            if param["in"] == "path" and value == "":
                continue  # an empty segment makes another URL, not a value of the parameter
            if param["in"] == "query":
                yield param["name"], path, {**query, param["name"]: value}
            else:
                yield param["name"], path_with(op["_template"], path, param["name"], value), query


def encoded(value: str) -> str:
    """``value`` percent-encoded as UTF-8 bytes, a lone surrogate included (sent as is)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def path_with(template: str, sample: str, name: str, value: str) -> str:
    """``sample`` (a filled ``template``) with path parameter ``name`` replaced by ``value``."""
    out = []
    for t, s in zip(template.split("/"), sample.split("/"), strict=True):
        out.append(encoded(value) if t == "{" + name + "}" else s)
    return "/".join(out)


# --- the world and the recorder ----------------------------------------------------------------


@pytest.fixture(scope="module")
async def hostile_world(engine: AsyncEngine) -> dict[str, str]:
    """An org of its own: its owner's full-scope key, a second user, two memories."""
    org = "org_hostile_" + secrets.token_hex(4)
    owner, second = f"user_own_{org}", f"user_two_{org}"
    doc = "\n\n".join(f"# H{j}\n\n" + "text " * 200 for j in range(3))
    records: list[dict[str, Any]] = [
        {"kind": "org", "id": org, "name": "Hostile"},
        {"kind": "user", "id": owner, "org": org, "handle": "own", "role": "owner"},
        {"kind": "user", "id": second, "org": org, "handle": "two", "role": "member"},
        {"kind": "project", "id": "proj", "org": org, "name": "P", "visibility": "org"},
        {"kind": "member", "project": "proj", "user": owner, "role": "owner"},
    ]
    for i in range(2):
        records.append(
            {
                "kind": "entity",
                "id": f"e{i}",
                "org": org,
                "type": "note",
                "name": f"Note {i}",
                "content": doc,
                "project": "proj",
                "owner": owner,
            }
        )
    await import_dicts(engine, records)
    key = await make_key(engine, owner, scopes=("read", "write", "admin"))
    return {"org": org, "key": key, "user2": second}


@contextmanager
def recorded(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement text the engine sends inside the block."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def row_counts(engine: AsyncEngine) -> dict[str, int]:
    """The number of rows of every table of the schema."""
    async with engine.connect() as conn:
        tables = (
            await conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            )
        ).scalars()
        return {
            t: int((await conn.execute(text(f'SELECT count(*) FROM "{t}"'))).scalar() or 0)
            for t in sorted(tables)
        }


def operations(spec: dict[str, Any]) -> list[tuple[tuple[str, str], dict[str, Any]]]:
    """Every operation of the OpenAPI, with its path template attached."""
    return [
        ((method, path), {**op, "_template": path})
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    ]


async def send_all(
    client: httpx.AsyncClient,
    spec: dict[str, Any],
    world: dict[str, str],
    selected: set[tuple[str, str]],
) -> int:
    """Send every hostile case of the ``selected`` operations; return how many were sent."""
    headers = {"Authorization": f"Bearer {world['key']}"}
    sent = 0
    for (method, template), op in operations(spec):
        if (method, template) not in selected:
            continue
        path, query, base = SAMPLES[(method, template)]
        path = path.replace("$USER2", world["user2"])
        base = json.loads(json.dumps(base).replace("$USER2", world["user2"]))
        cases: list[tuple[str, str, dict[str, Any], Any]] = [
            (field, path, query, body) for field, body in body_cases(spec, op, base)
        ]
        cases += [(p, u, q, base) for p, u, q in param_cases(op, path, query)]
        for field, url, params, body in cases:
            query_string = "&".join(f"{encoded(k)}={encoded(str(v))}" for k, v in params.items())
            r = await client.request(
                method.upper(),
                f"{url}?{query_string}" if query_string else url,
                content=json.dumps(body).encode() if body is not None else None,  # \u-escaped
                headers={**headers, "Content-Type": "application/json"},
            )
            assert r.status_code in ALLOWED, (method, template, field, r.status_code, r.text)
            sent += 1
    return sent


# --- the tests ---------------------------------------------------------------------------------


def test_every_operation_has_a_valid_sample() -> None:
    spec = create_app().openapi()
    missing = {op for op, _ in operations(spec)} - set(SAMPLES)
    assert not missing, f"add a valid sample request for: {sorted(missing)}"


async def test_hostile_values_in_read_routes_never_5xx_never_sql_and_change_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, hostile_world: dict[str, str]
) -> None:
    spec = create_app().openapi()
    before = await row_counts(engine)
    with recorded(engine) as statements:
        sent = await send_all(client, spec, hostile_world, READ_OPERATIONS)
    assert sent > 500
    assert statements, "no SQL was recorded: the recorder is not wired"
    assert not [s for s in statements if TAG in s], "a value reached the text of an SQL statement"
    assert await row_counts(engine) == before


async def test_hostile_values_in_write_routes_never_5xx_never_sql(
    client: httpx.AsyncClient, engine: AsyncEngine, hostile_world: dict[str, str]
) -> None:
    spec = create_app().openapi()
    writes = {op for op, _ in operations(spec)} - READ_OPERATIONS
    with recorded(engine) as statements:
        sent = await send_all(client, spec, hostile_world, writes)
    assert sent > 500
    assert not [s for s in statements if TAG in s], "a value reached the text of an SQL statement"


@pytest.mark.parametrize("value", [v for v in HOSTILE if v.strip() and "\x00" not in v])
async def test_a_stored_hostile_value_reads_back_verbatim(
    client: httpx.AsyncClient, hostile_world: dict[str, str], value: str
) -> None:
    headers = {"Authorization": f"Bearer {hostile_world['key']}"}
    name = value[:1000]  # a name is 1-1000 characters; the body takes any length
    body = {"type": "note", "name": name, "content": value, "project": "proj"}

    async def create(payload: dict[str, str]) -> httpx.Response:
        return await client.post(
            "/api/entities",
            content=json.dumps(payload).encode(),
            headers={**headers, "Content-Type": "application/json"},
        )

    created = await create(body)
    if value == "\ud800":  # not valid Unicode: refused as bad text, never stored
        assert created.status_code == 400, created.text
        return
    refused = ("Cc", "Zl", "Zp")  # and the bidi overrides U+202A-U+202E
    if any(unicodedata.category(c) in refused or "\u202a" <= c <= "\u202e" for c in name.strip()):
        # a name is one line of printable text: refused with a reason that names the rule;
        # the same value as a body is stored and reads back verbatim
        assert created.status_code == 400, created.text
        assert "control characters" in created.json()["detail"]
        name = "hostile body"
        created = await create({**body, "name": name})
    assert created.status_code == 201, created.text
    got = await client.get(f"/api/entities/{created.json()['id']}", headers=headers)
    assert got.status_code == 200
    # verbatim but for the one form text is stored in: Unicode NFC (e + U+0301 reads back é)
    assert got.json()["name"] == unicodedata.normalize("NFC", name.strip())
    assert got.json()["content"] == unicodedata.normalize("NFC", value)


async def test_hostile_values_in_mcp_read_tools_are_tool_errors_never_crashes(
    engine: AsyncEngine, hostile_world: dict[str, str]
) -> None:
    async with Client(build_mcp(lambda: engine, fixed_key(hostile_world["key"]))) as mcp:
        tools = []
        for t in (await mcp.list_tools()).tools:
            assert t.annotations is not None, t.name
            if t.annotations.read_only_hint:
                tools.append(t)
        required = {t.name: set(t.input_schema.get("required", [])) for t in tools}
        bases = {
            "search": SAMPLES[("post", "/api/search")][2],
            "context": SAMPLES[("post", "/api/context/pack")][2],
            "expand_neighbors": SAMPLES[("post", "/api/search/expand")][2],
            "fetch_slice": SAMPLES[("post", "/api/search/slice")][2],
        }
        assert {t.name for t in tools} <= set(bases), "add a valid sample for the new tool"
        calls = 0
        for tool in tools:
            base = bases[tool.name]
            assert required[tool.name] <= set(base)
            for name, prop in tool.input_schema["properties"].items():
                field_kind = kind({}, prop)
                pool = NUMBERS if field_kind == "integer" else HOSTILE[::3]
                for value in pool:
                    for v in variants(base.get(name), field_kind or "", value):
                        result = await mcp.call_tool(tool.name, {**base, name: v})
                        texts = "".join(b.text for b in result.content if b.type == "text")
                        # a crash is the SDK's bare "Error executing tool <name>"; a refused
                        # argument is a tool error that says which validation failed
                        crashed = texts.strip() == f"Error executing tool {tool.name}"
                        assert not crashed, (tool.name, name, v)
                        if texts.startswith("Error executing tool"):
                            assert "validation error" in texts, (tool.name, name, v, texts)
                        calls += 1
        assert calls > 100
