"""API keys (issue 9; contract §2, §3, §10): hashed at rest, revocation at once, project
restriction, and the reader's identity coming from the key alone.

- **Hashed**: the ``api_keys`` table never holds a key in clear, whichever way it was minted
  (the CLI's :func:`app.domain.keys.create_key` or ``POST /api/admin/keys``): only its SHA-256.
- **Revoked at once**: from the request after the revocation on, the key is refused on every
  surface (REST read and write, MCP tools, the ``/mcp`` gate), even by a client already
  connected.
- **Restricted to projects**: a key restricted to one project answers every read exactly as if
  the rows outside that project did not exist (a pair test against a control org lacking them).
- **Identity from the key**: no field of any request body (``user_id``, ``org_id``, ``owner``,
  ``reader``...) names the reader: every request model refuses unknown fields (422) and the MCP
  tools refuse unknown arguments; a header or query parameter naming a user is ignored (the
  answer is the one without it); a key minted for a user of another org is refused.
- **Admin routes** answer 404 to any request without an org admin's admin key, as if they did
  not exist.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any

import httpx
import pytest
from mcp import Client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.app import create_app
from app.domain.keys import create_key, revoke_key
from app.mcp.server import build_mcp, fixed_key
from tests.builders import import_dicts, make_key
from tests.samples import SAMPLES

IDENTITY_FIELDS = ("user_id", "org_id", "owner", "owner_id", "reader", "user", "as_user")
# Bodies that legitimately carry a user id: it names the user acted upon, never the reader.
ACTED_UPON = {("post", "/api/admin/keys"): "user_id"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "keys", "version": "0"},
    },
}


def secret_of(key: str) -> str:
    """The random part of a key (``sibyl_<12 hex>_<secret>``; the secret may hold ``_``)."""
    secret = key.split("_", 2)[2]
    assert len(secret) >= 32, key
    return secret


def auth(key: str) -> dict[str, str]:
    """The bearer header of ``key``."""
    return {"Authorization": f"Bearer {key}"}


def org_records(org: str, sfx: str, *, outside: bool) -> list[dict[str, Any]]:
    """An org with projects p1 and p2 (both org-visible), an org-scoped note, a private memory
    of the reader outside any project, and memories linked across the projects. Without
    ``outside`` (the control org), nothing outside p1 exists."""

    def ent(id_: str, project: str | None, scope: str, content: str = "") -> dict[str, Any]:
        rec: dict[str, Any] = {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": "note",
            "name": f"Name {id_}",
            "content": content or f"Body of {id_}: shared words plan.",
            "scope": scope,
            "owner": f"u_ann_{sfx}",
        }
        if project:
            rec["project"] = project
        return rec

    def edge(src: str, dst: str) -> dict[str, Any]:
        return {"kind": "edge", "org": org, "src": src, "dst": dst, "relationship": "RELATED_TO"}

    long = "\n\n".join(f"# P2 part {i}\n\n" + "p2word " * 250 for i in range(3))
    out = [
        {"kind": "org", "id": org, "name": "Keys"},
        {"kind": "user", "id": f"u_ann_{sfx}", "org": org, "handle": "ann", "role": "member"},
        {"kind": "user", "id": f"u_adm_{sfx}", "org": org, "handle": "adm", "role": "admin"},
        {"kind": "project", "id": "p1", "org": org, "name": "One", "visibility": "org"},
        {"kind": "project", "id": "p2", "org": org, "name": "Two", "visibility": "org"},
        {"kind": "member", "project": "p1", "user": f"u_ann_{sfx}", "role": "contributor"},
        ent("a1", "p1", "project"),
        ent("a2", "p1", "project"),
        edge("a1", "a2"),
    ]
    if outside:
        out += [
            ent("b1", "p2", "project"),
            ent("b2", "p2", "project", content=long),
            ent("o1", None, "org"),
            ent("m1", None, "private"),
            edge("a1", "b1"),
            edge("b1", "a2"),
            edge("b2", "a1"),
            edge("a2", "o1"),
            edge("m1", "a1"),
            {"kind": "mention", "org": org, "src": "a1", "dst": "m1"},
        ]
    return out


RESTRICTED_READS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/api/search/expand", {"entity_ids": ["a1"], "depth": 3, "limit": 24}),
    ("POST", "/api/search/expand", {"entity_ids": ["b1", "a1", "o1", "m1", "zz"]}),
    ("POST", "/api/search/slice", {"entity_id": "b2"}),
    ("POST", "/api/search/slice", {"entity_id": "a1", "project": "p2"}),
    ("POST", "/api/search", {"query": "shared words plan", "limit": 50}),
    ("POST", "/api/search", {"query": "p2word"}),
    ("POST", "/api/search", {"query": "plan", "project": "p2"}),
    ("POST", "/api/context/pack", {"goal": "shared words plan", "limit": 50}),
    ("GET", "/api/entities/b1", None),
    ("GET", "/api/entities/o1", None),
    ("GET", "/api/entities/m1", None),
    ("GET", "/api/entities/a1", None),
]
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T[0-9:.]+(?:Z|[+-]\d{2}:\d{2})?")


@pytest.fixture
async def pair(engine: AsyncEngine) -> dict[str, Any]:
    """The org (with rows outside p1) and its control (without), each with a key of ann
    restricted to p1 and an unrestricted one."""
    tag = secrets.token_hex(4)
    out: dict[str, Any] = {}
    for name, outside in (("real", True), ("control", False)):
        org, sfx = f"org_keys_{name[:4]}_{tag}", f"{name[:4]}{tag}"
        await import_dicts(engine, org_records(org, sfx, outside=outside))
        out[name] = {
            "org": org,
            "sfx": sfx,
            "restricted": await make_key(engine, f"u_ann_{sfx}", projects=["p1"]),
            "full": await make_key(engine, f"u_ann_{sfx}"),
        }
    return out


# --- hashed at rest ----------------------------------------------------------------------------


async def test_keys_are_stored_hashed_never_in_clear(
    client: httpx.AsyncClient, engine: AsyncEngine, pair: dict[str, Any]
) -> None:
    real = pair["real"]
    admin = await make_key(engine, f"u_adm_{real['sfx']}", scopes=("read", "admin"))
    r = await client.post(
        "/api/admin/keys", json={"user_id": f"u_adm_{real['sfx']}"}, headers=auth(admin)
    )
    assert r.status_code == 201, r.text
    async with engine.begin() as conn:
        _, from_cli = await create_key(conn, user_id=f"u_ann_{real['sfx']}")
    for key in (real["restricted"], real["full"], admin, r.json()["key"], from_cli):
        secret = secret_of(key)
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT row_to_json(k)::text FROM api_keys k"))).all()
            hashed = (
                await conn.execute(
                    text("SELECT count(*) FROM api_keys WHERE key_hash = :h"),
                    {"h": hashlib.sha256(key.encode()).hexdigest()},
                )
            ).scalar()
        assert hashed == 1, "a key is found by its SHA-256"
        assert not [row for row in rows if key in row[0] or secret in row[0]], "a key in clear"
    listed = await client.get("/api/admin/keys", headers=auth(admin))
    assert listed.status_code == 200
    for key in (real["full"], from_cli):
        assert secret_of(key) not in listed.text  # never listed either


# --- revoked at once ---------------------------------------------------------------------------


async def test_a_revoked_key_is_refused_at_once_on_every_surface(
    client: httpx.AsyncClient, engine: AsyncEngine, pair: dict[str, Any]
) -> None:
    real = pair["real"]
    admin = await make_key(engine, f"u_adm_{real['sfx']}", scopes=("read", "admin"))
    for how in ("rest", "cli"):
        async with engine.begin() as conn:
            key_id, key = await create_key(
                conn, user_id=f"u_ann_{real['sfx']}", scopes=("read", "write")
            )
        async with Client(build_mcp(lambda: engine, fixed_key(key))) as mcp:  # already open
            before = await mcp.call_tool("fetch_slice", {"entity_id": "a1"})
            assert not before.is_error
            ok = await client.post("/api/search/slice", json={"entity_id": "a1"}, headers=auth(key))
            assert ok.status_code == 200
            expand = {"entity_ids": ["a1"]}
            ok = await client.post("/api/search/expand", json=expand, headers=auth(key))
            assert ok.status_code == 200  # expand authenticates in its seed statement
            if how == "rest":
                r = await client.delete(f"/api/admin/keys/{key_id}", headers=auth(admin))
                assert r.status_code == 204, r.text
            else:
                async with engine.begin() as conn:
                    await revoke_key(conn, key_id=key_id)
            refused = [
                await client.post("/api/search/expand", json=expand, headers=auth(key)),
                await client.post("/api/search/slice", json={"entity_id": "a1"}, headers=auth(key)),
                await client.get("/api/entities/a1", headers=auth(key)),
                await client.post(
                    "/api/entities",
                    json={"type": "note", "name": "n", "project": "p1"},
                    headers=auth(key),
                ),
                await client.post(
                    "/mcp",
                    json=INITIALIZE,
                    headers={**auth(key), "Accept": "application/json, text/event-stream"},
                ),
            ]
            for r in refused:
                assert (r.status_code, r.json()) == (401, {"detail": "Invalid API key"}), r.text
            after = await mcp.call_tool("fetch_slice", {"entity_id": "a1"})
            texts = "".join(b.text for b in after.content if b.type == "text")
            assert after.is_error and texts == "Invalid API key"


# --- restricted to projects --------------------------------------------------------------------


def normalized(answer: str, side: dict[str, Any]) -> str:
    """An answer with the org id, user ids' suffix and timestamps blanked."""
    answer = answer.replace(side["org"], "<org>").replace(side["sfx"], "<sfx>")
    return TIMESTAMP.sub("<ts>", answer)


async def test_a_restricted_key_reads_as_if_nothing_outside_its_projects_existed(
    client: httpx.AsyncClient, engine: AsyncEngine, pair: dict[str, Any]
) -> None:
    real, control = pair["real"], pair["control"]
    # the unrestricted key of the same user does see the rows outside p1: the pair means it
    seen = await client.post(
        "/api/search/expand", json={"entity_ids": ["a1"], "depth": 2}, headers=auth(real["full"])
    )
    assert {"b1", "o1", "m1"} <= {n["id"] for n in seen.json()["neighbors"]}
    for method, url, body in RESTRICTED_READS:
        answers = []
        for side in (real, control):
            r = await client.request(method, url, json=body, headers=auth(side["restricted"]))
            assert r.status_code in (200, 404), r.text
            answers.append(f"{r.status_code} {normalized(r.text, side)}")
        assert answers[0] == answers[1], (method, url, body, answers)
    for side in (real, control):  # and the same through MCP
        async with Client(build_mcp(lambda: engine, fixed_key(side["restricted"]))) as m:
            r1 = await m.call_tool("expand_neighbors", {"entity_ids": ["a1"], "depth": 3})
            r2 = await m.call_tool("search", {"query": "shared words plan"})
        side["mcp"] = normalized(json.dumps([r1.structured_content, r2.structured_content]), side)
    assert real["mcp"] == control["mcp"]


# --- identity from the key alone ---------------------------------------------------------------


async def test_no_request_field_can_name_the_reader(
    client: httpx.AsyncClient, engine: AsyncEngine, pair: dict[str, Any]
) -> None:
    real = pair["real"]
    other = f"u_adm_{real['sfx']}"
    admin = await make_key(engine, other, scopes=("read", "write", "admin"))
    spec = create_app().openapi()
    checked = 0
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            if "requestBody" not in op:
                continue
            url, _, base = SAMPLES[(method, path)]
            for field in IDENTITY_FIELDS:
                if ACTED_UPON.get((method, path)) == field:
                    continue
                body = {**(base or {}), field: other}
                r = await client.request(
                    method.upper(),
                    url.replace("$USER2", other),
                    json=body,
                    headers=auth(admin),
                )
                assert r.status_code == 422, (method, path, field, r.status_code, r.text)
                assert other not in r.text  # and not echoed
                checked += 1
    assert checked >= 60
    async with Client(build_mcp(lambda: engine, fixed_key(real["full"]))) as mcp:
        tools = (await mcp.list_tools()).tools
        for tool in tools:
            for field in IDENTITY_FIELDS:
                assert field not in tool.input_schema["properties"], (tool.name, field)
                assert tool.input_schema.get("additionalProperties") is False, tool.name
        result = await mcp.call_tool("fetch_slice", {"entity_id": "m1", "user_id": other})
        assert result.is_error


async def test_headers_and_query_parameters_naming_a_user_are_ignored(
    client: httpx.AsyncClient, pair: dict[str, Any]
) -> None:
    real = pair["real"]
    owner = f"u_ann_{real['sfx']}"
    key = real["restricted"]  # cannot read m1 (private, outside p1), though ann owns it
    for method, url, body in RESTRICTED_READS:
        plain = await client.request(method, url, json=body, headers=auth(key))
        dressed = await client.request(
            method,
            url,
            json=body,
            params={"user_id": owner, "org_id": real["org"], "reader": owner},
            headers={**auth(key), "X-User-Id": owner, "X-Org-Id": real["org"], "X-Reader": owner},
        )
        assert (dressed.status_code, dressed.text) == (plain.status_code, plain.text), url


async def test_a_key_of_another_org_cannot_be_minted_or_used_across(
    client: httpx.AsyncClient, engine: AsyncEngine, pair: dict[str, Any]
) -> None:
    real, control = pair["real"], pair["control"]
    admin = await make_key(engine, f"u_adm_{real['sfx']}", scopes=("read", "admin"))
    r = await client.post(
        "/api/admin/keys", json={"user_id": f"u_ann_{control['sfx']}"}, headers=auth(admin)
    )
    assert r.status_code in (400, 404), r.text  # a user of another org does not exist here
    # the control org's key reads the control org only, whatever ids it names
    r = await client.get("/api/entities/b1", headers=auth(control["full"]))
    assert r.status_code == 404


# --- admin routes hide from non-admins ---------------------------------------------------------


async def test_admin_routes_do_not_exist_without_an_admin_key(
    client: httpx.AsyncClient, pair: dict[str, Any]
) -> None:
    real = pair["real"]
    spec = create_app().openapi()
    admin_ops = [
        (method, path)
        for path, methods in spec["paths"].items()
        if path.startswith("/api/admin/")
        for method in methods
    ]
    assert len(admin_ops) >= 10
    for method, path in admin_ops:
        url, _, body = SAMPLES[(method, path)]
        url = url.replace("$USER2", f"u_ann_{real['sfx']}")
        for headers in ({}, auth("sibyl_nope_nope"), auth(real["full"])):
            r = await client.request(method.upper(), url, json=body, headers=headers)
            assert (r.status_code, r.json()) == (404, {"detail": "Not found"}), (method, url)
