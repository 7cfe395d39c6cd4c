"""The MCP adapter (issue 3): tools in process through the SDK's own client, over real streamable
HTTP (uvicorn on a free port), over stdio (``sibyl-pg mcp``), and a canary for the read rule."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import text

from app.api.app import create_app
from app.core import policy
from app.core.db import make_engine
from app.domain.schemas import (
    ContextRequest,
    ContextResponse,
    ExpandRequest,
    ExpandResponse,
    SearchRequest,
    SearchResponse,
    SliceRequest,
    SliceResponse,
)
from app.mcp.server import ROUND_BUDGET, build_mcp, fixed_key
from tests.builders import import_dicts, make_key
from tests.conftest import SIBYL_PG

# every read tool: its REST request model, response model and route
TOOLS = {
    "search": (SearchRequest, SearchResponse, "/api/search"),
    "context": (ContextRequest, ContextResponse, "/api/context/pack"),
    "expand_neighbors": (ExpandRequest, ExpandResponse, "/api/search/expand"),
    "fetch_slice": (SliceRequest, SliceResponse, "/api/search/slice"),
}


async def read_tools(client) -> dict:
    """The listed tools marked read-only, by name (write tools are tested with the writes)."""
    listed = (await client.list_tools()).tools
    return {t.name: t for t in listed if t.annotations and t.annotations.read_only_hint}


@asynccontextmanager
async def mcp_as(engine, key):
    """The SDK's in-memory client on a server whose every call is made with ``key``."""
    async with Client(build_mcp(lambda: engine, fixed_key(key))) as client:
        yield client


async def rest(client, key, tool, body):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return await client.post(TOOLS[tool][2], json=body, headers=headers)


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


# --- tools, schemas, descriptions --------------------------------------------------------------


async def test_tools_are_listed_with_input_and_output_schemas():
    async with mcp_as(None, None) as client:
        tools = await read_tools(client)
        listed = await client.list_tools()
    assert set(tools) == set(TOOLS)
    for name, (request, response, _) in TOOLS.items():
        tool = tools[name]
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
        # parameters are the request model's fields: same names, same required set, unknown
        # fields refused, as REST validates a body; each with a short description of its own
        model = request.model_json_schema()
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(model["properties"])
        assert schema.get("required", []) == model.get("required", [])
        for field, spec in schema["properties"].items():
            assert 0 < len(spec["description"]) <= 80, (name, field)
            if "array" in spec.get("type", []):  # an array says what its items are
                assert spec["items"]["type"] == "string", (name, field)
        # the result is the REST response model: its fields, each with its JSON type
        assert set(tool.output_schema["properties"]) == set(
            response.model_json_schema()["properties"]
        )
    # the whole list an agent reads at every session stays within 10 KB
    wire = listed.model_dump(mode="json", exclude_none=True, by_alias=True)
    assert len(json.dumps(wire, separators=(",", ":")).encode()) <= 10_000


async def test_descriptions_state_round_budget_and_bounds():
    server = build_mcp(lambda: None, fixed_key(None))
    async with Client(server) as client:
        instructions = client.instructions or ""
        tools = {name: tool.description for name, tool in (await read_tools(client)).items()}
    # the round budget is stated once, in the server instructions; each tool points at it
    assert ROUND_BUDGET in instructions and f"at most {policy.ROUND_BUDGET} rounds" in instructions
    assert "call `context`" in instructions  # when not to traverse: one hop answers it
    for description in tools.values():
        assert ROUND_BUDGET not in description
        assert f"At most {policy.ROUND_BUDGET} retrieval rounds" in description
    d, lim, chars = policy.DEPTH, policy.LIMIT, policy.PREVIEW_CHARS
    for phrase in (
        f"seeds <= {policy.MAX_SEEDS}",
        f"depth {d.low}-{d.high} (default {d.default})",
        f"limit {lim.low}-{lim.high} (default {lim.default})",
        f"content_max_chars {chars.low}-{chars.high} (default {chars.default})",
        "`fetch_slice`",
    ):
        assert phrase in tools["expand_neighbors"], phrase
    w, budget_chars = policy.WINDOW, policy.SLICE_CHARS
    for phrase in (
        f"window {w.low}-{w.high} (default {w.default})",
        f"content_max_chars {budget_chars.low}-{budget_chars.high}",
        f"(default {budget_chars.default}",
        "Cite `parent_id`, never a span id",
    ):
        assert phrase in tools["fetch_slice"], phrase


# --- every tool called, errors as REST ---------------------------------------------------------


@pytest.mark.corpus
async def test_every_tool_returns_what_rest_returns(engine, client, pep_corpus):
    key = pep_corpus["user_typing_reader"]
    calls = {
        "search": {"query": "type hints", "limit": 5},
        "context": {"goal": "type hints for function annotations", "limit": 6},
        "expand_neighbors": {"entity_ids": ["pep_0484"], "relationship_types": ["DEPENDS_ON"]},
        "fetch_slice": {"entity_id": "pep_0484", "window": 2},
    }
    assert set(calls) == set(TOOLS)
    async with mcp_as(engine, key) as mcp:
        for tool, body in calls.items():
            result = await mcp.call_tool(tool, body)
            expected = await rest(client, key, tool, body)
            assert expected.status_code == 200
            assert not result.is_error, text_of(result)
            assert result.structured_content == expected.json()
            # the answer once: its text is a summary naming what was found, not a JSON copy
            text = text_of(result)
            assert text != json.dumps(expected.json()) and "structured content" in text
            assert len(text) < len(json.dumps(expected.json()))
    assert result.structured_content["parent_id"] == "pep_0484"


@pytest.mark.corpus
async def test_not_found_is_a_tool_error_that_says_nothing_more(engine, client, pep_corpus):
    outsider, reader = pep_corpus["user_outsider"], pep_corpus["user_typing_reader"]
    async with mcp_as(engine, reader) as mcp:
        absent = await mcp.call_tool("fetch_slice", {"entity_id": "pep_9999"})
    async with mcp_as(engine, outsider) as mcp:
        denied = await mcp.call_tool("fetch_slice", {"entity_id": "pep_0484"})
    for result in (absent, denied):
        assert result.is_error and result.structured_content is None
        assert text_of(result) == "Entity not found"
    r = await rest(client, outsider, "fetch_slice", {"entity_id": "pep_0484"})
    assert (r.status_code, r.json()) == (404, {"detail": text_of(denied)})


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("tool", "body"),
    [
        ("fetch_slice", {"entity_id": "   "}),
        ("fetch_slice", {"entity_id": "pep_0484", "project": " "}),
        ("expand_neighbors", {"entity_ids": []}),
        ("expand_neighbors", {"entity_ids": ["pep_0484", "  "]}),
        ("expand_neighbors", {"entity_ids": ["pep_0484", 7]}),
        ("expand_neighbors", {"entity_ids": ["pep_0484"], "relationship_types": ["NO-DASH"]}),
    ],
)
async def test_malformed_input_is_a_tool_error_with_rests_message(
    engine, client, pep_corpus, tool, body
):
    key = pep_corpus["user_typing_reader"]
    expected = await rest(client, key, tool, body)
    assert expected.status_code == 400
    async with mcp_as(engine, key) as mcp:
        result = await mcp.call_tool(tool, body)
    assert result.is_error and text_of(result) == expected.json()["detail"]


@pytest.mark.corpus
async def test_a_key_is_checked_on_every_call_as_on_rest(engine, client, pep_corpus):
    write_only = await make_key(engine, "user_typing_reader", scopes=("write",))
    body = {"entity_id": "pep_0484"}
    for key in (None, "sk_not_a_key", write_only):
        expected = await rest(client, key, "fetch_slice", body)
        assert expected.status_code in (401, 403)
        async with mcp_as(engine, key) as mcp:
            result = await mcp.call_tool("fetch_slice", body)
        assert result.is_error and text_of(result) == expected.json()["detail"]


async def test_faults_are_tool_errors_without_internals():
    # the database is down: REST's 503 detail
    down = make_engine("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        async with mcp_as(down, "sk_any") as mcp:
            result = await mcp.call_tool("fetch_slice", {"entity_id": "pep_0484"})
        assert result.is_error and text_of(result) == "Database unavailable, retry later"
    finally:
        await down.dispose()

    # a bug: the SDK's generic message, nothing of the exception (logged on the server only)
    def broken():
        raise RuntimeError("SELECT secret FROM internals")

    async with Client(build_mcp(broken, fixed_key("sk_any"))) as mcp:
        result = await mcp.call_tool("fetch_slice", {"entity_id": "pep_0484"})
    assert result.is_error and text_of(result) == "Error executing tool fetch_slice"


# --- streamable HTTP, on a real port -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def live_url(database_url):
    """``sibyl-pg serve`` in a thread: ``create_app()`` under uvicorn on a free port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a hang guard, not a speed claim
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@asynccontextmanager
async def mcp_over_http(url, key, mode="auto"):
    """The SDK's streamable-HTTP client sending ``key`` as a bearer header on every request."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")]
)  # the per-request protocol, and the initialize handshake most clients still speak
async def test_streamable_http_serves_each_reader_what_the_read_rule_allows(
    live_url, client, pep_corpus, mode, version
):
    reader, outsider = pep_corpus["user_typing_reader"], pep_corpus["user_outsider"]
    body = {"entity_ids": ["pep_0484"], "depth": 1}
    async with mcp_over_http(f"{live_url}/mcp", reader, mode) as mcp:
        assert mcp.session.protocol_version == version
        assert set(await read_tools(mcp)) == set(TOOLS)
        seen = await mcp.call_tool("expand_neighbors", body)
    assert not seen.is_error, text_of(seen)
    assert seen.structured_content["origins"] == ["pep_0484"]
    assert seen.structured_content["neighbors"]
    assert seen.structured_content == (await rest(client, reader, "expand_neighbors", body)).json()

    async with mcp_over_http(f"{live_url}/mcp", outsider, mode) as mcp:
        hidden = await mcp.call_tool("expand_neighbors", body)
        slice_ = await mcp.call_tool("fetch_slice", {"entity_id": "pep_0484"})
    assert not hidden.is_error
    assert hidden.structured_content["origins"] == []
    assert hidden.structured_content["unresolved"] == ["pep_0484"]
    assert hidden.structured_content["neighbors"] == []
    assert slice_.is_error and text_of(slice_) == "Entity not found"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.corpus
async def test_http_without_a_valid_key_is_refused_before_any_tool(live_url, pep_corpus):
    async with httpx.AsyncClient(base_url=live_url) as http:
        for auth, detail in (
            ({}, "Missing API key"),
            ({"Authorization": "Bearer sk_not_a_key"}, "Invalid API key"),
            ({"Authorization": "Basic dXNlcjpwdw=="}, "Missing API key"),
        ):
            r = await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth})
            assert (r.status_code, r.json()) == (401, {"detail": detail})
            assert r.headers["www-authenticate"] == "Bearer"
        # with a key: the handshake answers on /mcp itself (no redirect) ...
        auth = {"Authorization": f"Bearer {pep_corpus['user_outsider']}"}
        r = await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth})
        assert r.status_code == 200 and r.json()["result"]["serverInfo"]["name"] == "sibyl-pg"
        # ... /mcp/ redirects to it, and a foreign Host is refused (DNS rebinding check)
        r = await http.post("/mcp/", json=INITIALIZE, headers={**MCP_HEADERS, **auth})
        assert r.status_code == 307 and r.headers["location"].endswith("/mcp")
        r = await http.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth, "Host": "evil.example"}
        )
        assert r.status_code == 421
    with pytest.raises((MCPError, ExceptionGroup)):  # the SDK client cannot even connect
        async with mcp_over_http(f"{live_url}/mcp", None) as mcp:
            await mcp.list_tools()


# --- stdio -------------------------------------------------------------------------------------


def sibyl_pg() -> str:
    if not SIBYL_PG.exists():
        pytest.skip(f"{SIBYL_PG} is not installed")
    return str(SIBYL_PG)


@pytest.mark.corpus
async def test_stdio_serves_the_reader_of_the_environment_key(database_url, client, pep_corpus):
    key = pep_corpus["user_typing_reader"]
    params = StdioServerParameters(
        command=sibyl_pg(),
        args=["mcp"],
        env={"DATABASE_URL": database_url, "SIBYL_PG_API_KEY": key},
    )
    body = {"entity_id": "pep_0484"}
    async with Client(params) as mcp:
        result = await mcp.call_tool("fetch_slice", body)
    assert not result.is_error, text_of(result)
    assert result.structured_content == (await rest(client, key, "fetch_slice", body)).json()


@pytest.mark.corpus
def test_stdio_refuses_to_start_without_a_usable_key(database_url, pep_corpus):
    env = {k: v for k, v in os.environ.items() if k != "SIBYL_PG_API_KEY"}
    env["DATABASE_URL"] = database_url
    for key, message in ((None, "SIBYL_PG_API_KEY is not set"), ("sk_nope", "Invalid API key")):
        if key is not None:
            env["SIBYL_PG_API_KEY"] = key
        run = subprocess.run(
            [sibyl_pg(), "mcp"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert run.stdout == ""  # stdout belongs to the protocol
        assert "Traceback" not in run.stderr


# --- the canary --------------------------------------------------------------------------------


@dataclass
class Canary:
    """An org where a reader owns a private project holding another user's private memory."""

    marker: str  # in the secret's name and in every section of its body
    secret: str  # its id
    spans: list[str]  # the ids of the passages it was cut into
    visible: str  # readable by the reader, linked to the secret both ways
    beyond: str  # readable by the reader, reachable only through the secret
    project: str
    reader_key: str
    owner_key: str


def canary_records(org: str, c: Canary, reader: str, owner: str) -> list[dict]:
    def entity(id_, name, content, scope, type_="note"):
        return {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": type_,
            "name": name,
            "content": content,
            "project": c.project,
            "scope": scope,
            "owner": owner,
        }

    def edge(src, rel, dst):
        return {"kind": "edge", "org": org, "src": src, "dst": dst, "relationship": rel}

    words = " ".join(f"word{j}" for j in range(150))
    body = f"[[{c.visible}]]\n\n" + "\n".join(
        f"# Part {i} {c.marker}\n\n{c.marker} {words}\n" for i in range(6)
    )
    return [
        {"kind": "org", "id": org, "name": "Canary"},
        {"kind": "user", "id": reader, "org": org, "handle": "reader", "role": "member"},
        {"kind": "user", "id": owner, "org": org, "handle": "owner", "role": "member"},
        {"kind": "project", "id": c.project, "org": org, "name": "P", "visibility": "private"},
        # the reader owns the project: membership alone never authorizes a private memory
        {"kind": "member", "project": c.project, "user": reader, "role": "owner"},
        {"kind": "member", "project": c.project, "user": owner, "role": "contributor"},
        entity(c.visible, "Plan", "A plan the reader may read.", "project"),
        entity(c.secret, f"Secret {c.marker}", body, "private", type_="decision"),
        entity(c.beyond, "Beyond", "Downstream of the private memory.", "project"),
        edge(c.visible, "DEPENDS_ON", c.secret),
        edge(c.secret, "SUPERSEDES", c.visible),
        edge(c.secret, "BLOCKS", c.beyond),
        {"kind": "mention", "org": org, "src": c.visible, "dst": c.secret},
    ]


@pytest.fixture
async def canary(engine, org_id) -> Canary:
    reader, owner = f"user_r_{org_id}", f"user_o_{org_id}"
    c = Canary(
        marker="CANARY" + secrets.token_hex(8).upper(),
        secret=f"decision_{secrets.token_hex(6)}",
        spans=[],
        visible="note_visible",
        beyond="note_beyond",
        project=f"proj_{org_id}",
        reader_key="",
        owner_key="",
    )
    await import_dicts(engine, canary_records(org_id, c, reader, owner))
    async with engine.connect() as conn:
        c.spans = list(
            (
                await conn.execute(
                    text("SELECT id FROM passages WHERE org_id = :o AND parent_id = :p"),
                    {"o": org_id, "p": c.secret},
                )
            ).scalars()
        )
    assert len(c.spans) >= 2, "the secret must be cut into passages"
    c.reader_key, c.owner_key = await make_key(engine, reader), await make_key(engine, owner)
    return c


def agent_rounds(c: Canary) -> dict[str, list[dict]]:
    """Round-one calls of an agent that knows ``c.visible`` and the words around it, per tool
    (calls naming the secret's marker or id are :func:`guesses`)."""
    every_link = ["DEPENDS_ON", "SUPERSEDES", "BLOCKS", "MENTIONS", "PART_OF"]
    return {
        "search": [
            {"query": "plan"},
            {"query": "secret"},
            {"query": "word1 word2 part", "limit": 50, "content_max_chars": 50_000},
            {"query": c.visible},
            {"query": "Secret", "lifecycle": ["active", "superseded", "retired"]},
        ],
        "context": [
            {"goal": "the plan"},
            {"goal": "what is decided about the secret", "limit": 50, "related_limit": 10},
            {"goal": "secret part word1", "project": c.project},
        ],
        "expand_neighbors": [
            {"entity_ids": [c.visible]},
            {"entity_ids": [c.visible], "depth": 3, "limit": 24, "content_max_chars": 50_000},
            {"entity_ids": [c.visible], "depth": 3, "limit": 24, "relationship_types": every_link},
            {"entity_ids": [c.visible], "depth": 3, "include_incoming": False},
            {"entity_ids": [c.visible], "depth": 3, "types": ["decision", "passage"]},
            {"entity_ids": [c.visible], "depth": 3, "limit": 24, "project": c.project},
        ],
        "fetch_slice": [
            {"entity_id": c.visible},
            {"entity_id": c.visible, "window": 64, "content_max_chars": 50_000},
            {"entity_id": c.visible, "project": c.project},
        ],
    }


def returned_ids(found: object) -> set[str]:
    """Every ``id`` and ``parent_entity_id`` anywhere in a tool's structured result."""
    if isinstance(found, list):
        return set().union(*(returned_ids(x) for x in found)) if found else set()
    if not isinstance(found, dict):
        return set()
    ids = {found[k] for k in ("id", "parent_entity_id") if isinstance(found.get(k), str)}
    return ids.union(*(returned_ids(v) for v in found.values()))


async def transcript(engine, key, rounds) -> dict[str, str]:
    """Everything each tool answers to ``rounds``, then to widening every id they returned."""
    seen: dict[str, list[str]] = {tool: [] for tool in TOOLS}
    followed: set[str] = set()

    async def call(mcp, tool, body):
        result = await mcp.call_tool(tool, body)
        seen[tool].append(text_of(result) + json.dumps(result.structured_content))
        return result.structured_content

    async with mcp_as(engine, key) as mcp:
        for tool, bodies in rounds.items():
            for body in bodies:
                for id_ in sorted(returned_ids(await call(mcp, tool, body)) - followed):
                    followed.add(id_)
                    await call(mcp, "expand_neighbors", {"entity_ids": [id_], "depth": 3})
                    await call(mcp, "fetch_slice", {"entity_id": id_, "window": 64})
    return {tool: "\n".join(answers) for tool, answers in seen.items()}


async def test_a_private_memory_never_reaches_another_reader_through_any_tool(engine, canary):
    rounds = agent_rounds(canary)
    async with mcp_as(None, None) as probe:
        listed = set(await read_tools(probe))
    assert listed <= set(rounds), f"add agent-like canary calls for {listed - set(rounds)}"

    # the owner gets the secret from these very calls, so a leak would show ...
    owners = await transcript(engine, canary.owner_key, rounds)
    assert canary.marker in owners["search"] and canary.marker in owners["context"]
    assert canary.secret in owners["expand_neighbors"] and canary.marker in owners["fetch_slice"]
    assert canary.beyond in owners["expand_neighbors"]
    # ... and the reader never does: not the marker, not its id, nor its spans' ...
    readers = await transcript(engine, canary.reader_key, rounds)
    for tool, answers in readers.items():
        assert canary.visible in answers, tool
        for secret in (canary.marker, canary.secret, *canary.spans):
            assert secret not in answers, (tool, secret)
    # ... and it is no route either: what lies only beyond it is never walked to
    assert canary.beyond not in readers["expand_neighbors"]


def guesses(c: Canary) -> dict[str, list[dict]]:
    """Calls naming the secret outright (its marker or its ids), per tool."""
    return {
        "search": [
            {"query": c.marker},
            {"query": c.marker.lower(), "types": ["decision"], "project": c.project},
            {"query": c.secret, "lifecycle": ["active", "superseded", "retired"]},
            *({"query": span} for span in c.spans),
        ],
        "context": [
            {"goal": f"what is decided about {c.marker}", "limit": 50, "related_limit": 10},
            {"goal": c.secret, "project": c.project},
        ],
        "expand_neighbors": [
            {"entity_ids": [c.secret], "depth": 3},
            {"entity_ids": [c.visible, *c.spans], "depth": 2, "limit": 24},
        ],
        "fetch_slice": [{"entity_id": name, "window": 64} for name in (c.secret, *c.spans)],
    }


async def test_naming_the_private_memory_gets_what_naming_nothing_gets(engine, canary):
    """Each guess is made twice: with the secret's marker and ids, and with decoys that name
    nothing. With the decoys swapped back, the two answers must be the same bytes: the secret
    shows through nothing, not even as a difference (only the caller's own words are echoed)."""
    rounds = guesses(canary)
    async with mcp_as(None, None) as probe:
        listed = set(await read_tools(probe))
    assert listed <= set(rounds), f"add canary guesses for {listed - set(rounds)}"

    decoys = {
        canary.marker: "CANARY" + secrets.token_hex(8).upper(),
        canary.secret: "decision_" + secrets.token_hex(6),
    }
    decoys.update({span: "passage_" + secrets.token_hex(8) for span in canary.spans})
    decoys.update({real.lower(): fake.lower() for real, fake in list(decoys.items())})

    def swap(value: str, pairs) -> str:
        for old, new in pairs:
            value = value.replace(old, new)
        # search echoes the query's words as the database's parser splits them: an id's parts
        # (and a hex run the parser reads as a number) are the caller's own words, not an answer
        return re.sub(r'"words": \[[^\]]*\]', '"words": [...]', value)

    async with mcp_as(engine, canary.reader_key) as mcp:
        for tool, bodies in rounds.items():
            for body in bodies:
                real = json.dumps(body)
                fake = swap(real, decoys.items())
                assert fake != real
                named = await mcp.call_tool(tool, json.loads(real))
                nothing = await mcp.call_tool(tool, json.loads(fake))
                seen = text_of(named) + json.dumps(named.structured_content)
                control = text_of(nothing) + json.dumps(nothing.structured_content)
                assert swap(seen, decoys.items()) == swap(control, ()), (tool, body)
