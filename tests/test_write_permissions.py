"""Write permissions (contract §9, issue 5): every write route with allowed and denied writers.

Denied answers: 404 where the writer cannot read the target (compared with the answer for a
target that does not exist, and with a control org where the row was never written), 403 where
they can read it but not write it. Read-only keys change nothing, on REST and on MCP. The roles
are those of :mod:`tests.team`.
"""

from __future__ import annotations

import secrets

import pytest
from mcp import Client
from sqlalchemy import text

from app.domain.directory import KEYS_FOR_OTHERS
from app.domain.permissions import LACKS_READ
from app.mcp.server import build_mcp, fixed_key
from app.repo.readers import hash_key
from tests.builders import make_key
from tests.team import Team, answer, call, counts, snapshot

NOT_FOUND = (404, {"detail": "Entity not found"})


def note(**kw):
    return {"type": "note", "name": "A new note", "content": "Some text.", **kw}


async def test_create_needs_contributor_in_the_project(engine, client):
    t = await Team().load(engine)
    ann, vic, out, adm, ovw = [await t.key(engine, n) for n in ("ann", "vic", "out", "adm", "ovw")]

    r = await call(client, "POST", "/api/entities", ann, json=note(project="p1"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["scope"] == "project" and made["project_id"] == "p1"
    assert made["owner_id"] == t.u("ann") and made["revision"] == 1
    assert made["id"].startswith("note_") and len(made["id"]) == len("note_") + 12
    assert r.headers["etag"] == '"1"'

    assert (
        await call(client, "POST", "/api/entities", adm, json=note(project="p1"))
    ).status_code == 201
    assert (
        await call(client, "POST", "/api/entities", ovw, json=note(project="p1"))
    ).status_code == 201

    # readable but not writable: a viewer of p1; a non-member of the org-visible p2
    r = await call(client, "POST", "/api/entities", vic, json=note(project="p1"))
    assert r.status_code == 403
    r = await call(client, "POST", "/api/entities", ann, json=note(project="p2"))
    assert r.status_code == 403

    # a project the writer cannot read answers exactly like one that does not exist
    before = await counts(engine, t.org)
    hidden = await call(client, "POST", "/api/entities", out, json=note(project="p1"))
    missing = await call(client, "POST", "/api/entities", out, json=note(project="nope"))
    assert answer(hidden) == answer(missing) == (404, {"detail": "Project not found"})
    assert await counts(engine, t.org) == before


async def test_create_private_and_org_memories(engine, client):
    t = await Team().load(engine)
    ann, ovw = await t.key(engine, "ann"), await t.key(engine, "ovw")
    restricted = await t.key(engine, "ann", projects=["p1"])

    r = await call(client, "POST", "/api/entities", ann, json=note())
    assert r.status_code == 201 and r.json()["scope"] == "private"
    r = await call(client, "POST", "/api/entities", ann, json=note(scope="org"))
    assert r.status_code == 201 and r.json()["project_id"] is None
    # an org viewer may not write org-wide memories
    assert (
        await call(client, "POST", "/api/entities", ovw, json=note(scope="org"))
    ).status_code == 403
    # a key restricted to projects writes only inside them
    assert (await call(client, "POST", "/api/entities", restricted, json=note())).status_code == 403
    r = await call(client, "POST", "/api/entities", restricted, json=note(project="p1"))
    assert r.status_code == 201
    # scope/project combinations that cannot exist
    r = await call(client, "POST", "/api/entities", ann, json=note(scope="org", project="p1"))
    assert r.status_code == 400
    r = await call(client, "POST", "/api/entities", ann, json=note(scope="project"))
    assert r.status_code == 400


async def test_get_goes_through_the_read_rule(engine, client):
    t = await Team().load(engine)
    control = await Team().load(engine, omit="n1")
    ann, out = await t.key(engine, "ann"), await t.key(engine, "out")
    out_control = await control.key(engine, "out")

    r = await call(client, "GET", "/api/entities/n1", ann)
    assert r.status_code == 200 and r.json()["content"] == "Body of n1."
    assert r.headers["etag"] == '"1"'
    denied = await call(client, "GET", "/api/entities/n1", out)
    absent = await call(client, "GET", "/api/entities/n1", out_control)
    assert answer(denied) == answer(absent) == NOT_FOUND
    # a grant reads a private memory; an org admin does not
    assert (await call(client, "GET", "/api/entities/shared", ann)).status_code == 200
    adm = await t.key(engine, "adm")
    assert answer(await call(client, "GET", "/api/entities/mine", adm)) == NOT_FOUND


@pytest.mark.parametrize(
    ("writer", "target", "expected"),
    [
        ("ann", "n1", 200),  # contributor of p1
        ("bob", "n1", 200),  # maintainer of p1
        ("adm", "n1", 200),  # org admin
        ("vic", "n1", 403),  # viewer of p1: reads, cannot write
        ("out", "n1", 404),  # cannot read p1
        ("ann", "pub", 403),  # org-visible p2, no role there
        ("own", "pub", 200),  # org owner
        ("ann", "hid", 404),  # p3 is not readable
        ("ann", "mine", 200),  # owner of a private memory
        ("bob", "mine", 404),  # someone else's private memory
        ("adm", "mine", 404),  # even for an org admin
        ("ann", "shared", 403),  # granted: reads, cannot write
        ("bob", "shared", 200),  # its owner
        ("own", "orgnote", 200),  # its owner
        ("adm", "orgnote", 200),  # an org admin
        ("ann", "orgnote", 403),  # every member reads it
    ],
)
async def test_patch_and_delete_by_role(engine, client, writer, target, expected):
    t = await Team().load(engine)
    control = await Team().load(engine, omit=target)
    key = await t.key(engine, writer)
    control_key = await control.key(engine, writer)
    before = await snapshot(engine, t.org)

    r = await call(client, "PATCH", f"/api/entities/{target}", key, json={"name": "Renamed"})
    assert r.status_code == expected, r.text
    if expected == 200:
        assert r.json()["name"] == "Renamed" and r.json()["revision"] == 2
    else:
        assert await snapshot(engine, t.org) == before
    if expected == 404:
        absent = await call(
            client, "PATCH", f"/api/entities/{target}", control_key, json={"name": "Renamed"}
        )
        assert answer(r) == answer(absent) == NOT_FOUND

    r = await call(client, "DELETE", f"/api/entities/{target}", key)
    assert r.status_code == (204 if expected == 200 else expected)
    if expected == 404:
        absent = await call(client, "DELETE", f"/api/entities/{target}", control_key)
        assert answer(r) == answer(absent) == NOT_FOUND
    remaining = {row[0] for row in await snapshot(engine, t.org)}
    assert (target in remaining) == (expected != 200)


async def test_moving_a_memory_needs_write_access_at_the_destination(engine, client):
    t = await Team().load(engine)
    ann, vic = await t.key(engine, "ann"), await t.key(engine, "vic")
    before = await snapshot(engine, t.org)
    # into a readable project without a role: 403; into an unreadable one: as if absent
    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"project": "p2"})
    assert r.status_code == 403
    hidden = await call(client, "PATCH", "/api/entities/n1", ann, json={"project": "p3"})
    missing = await call(client, "PATCH", "/api/entities/n1", ann, json={"project": "p9"})
    assert answer(hidden) == answer(missing) == (404, {"detail": "Project not found"})
    # a private memory moved into a project where its owner is only... not a member
    r = await call(client, "PATCH", "/api/entities/mine", ann, json={"project": "p2"})
    assert r.status_code == 403
    # a viewer cannot re-scope either
    r = await call(client, "PATCH", "/api/entities/n1", vic, json={"scope": "private"})
    assert r.status_code == 403
    assert await snapshot(engine, t.org) == before
    # allowed: ann takes her project memory private, then back into p1
    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"scope": "private"})
    assert r.status_code == 200 and r.json()["scope"] == "private"
    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"scope": "org"})
    assert r.status_code == 200 and r.json()["project_id"] is None


@pytest.mark.parametrize(
    ("writer", "src", "rel", "dst", "expected"),
    [
        ("ann", "n1", "RELATED_TO", "n2", 201),
        ("ann", "n1", "DEPENDS_ON", "pub", 201),  # target readable is enough
        ("ann", "n1", "REFERENCES", "shared", 201),  # read through a grant
        ("ann", "n1", "SUPERSEDES", "n2", 201),
        ("ann", "n1", "SUPERSEDES", "pub", 403),  # needs write on the target
        ("ann", "n1", "CONTRADICTS", "shared", 403),
        ("ann", "n1", "CONTRADICTS", "n2", 201),
        ("ann", "pub", "RELATED_TO", "n1", 403),  # source readable, not writable
        ("vic", "n1", "RELATED_TO", "n2", 403),
        ("ann", "n1", "RELATED_TO", "hid", 404),  # target unreadable
        ("ann", "hid", "RELATED_TO", "n1", 404),  # source unreadable
        ("out", "n1", "RELATED_TO", "pub", 404),
        ("adm", "n1", "SUPERSEDES", "pub", 201),
    ],
)
async def test_edge_writes_by_role(engine, client, writer, src, rel, dst, expected):
    hidden = "hid" if "hid" in (src, dst) else src  # the row the writer cannot read (404)
    t = await Team().load(engine)
    key = await t.key(engine, writer)
    body = {"src": src, "relationship": rel, "dst": dst}
    before = await counts(engine, t.org)
    r = await call(client, "POST", "/api/edges", key, json=body)
    assert r.status_code == expected, r.text
    if expected != 201:
        assert await counts(engine, t.org) == before
    if expected == 404:
        control = await Team().load(engine, omit=hidden)
        absent = await call(
            client, "POST", "/api/edges", await control.key(engine, writer), json=body
        )
        assert answer(r) == answer(absent) == NOT_FOUND
        return
    if expected == 201:
        gone = await call(client, "DELETE", "/api/edges", key, params=body)
        assert gone.status_code == 204
        again = await call(client, "DELETE", "/api/edges", key, params=body)
        assert answer(again) == (404, {"detail": "Edge not found"})
    else:
        # deleting is authorized exactly like writing
        owner = await t.key(engine, "bob" if "shared" in (src, dst) else "own")
        assert (await call(client, "POST", "/api/edges", owner, json=body)).status_code == 201
        r = await call(client, "DELETE", "/api/edges", key, params=body)
        assert r.status_code == expected


async def test_grants_by_the_owner_and_by_admins(engine, client):
    t = await Team().load(engine)
    ann, vic, adm = [await t.key(engine, n) for n in ("ann", "vic", "adm")]
    vic_read = await t.key(engine, "vic", scopes=("read",))
    assert answer(await call(client, "GET", "/api/entities/mine", vic_read)) == NOT_FOUND
    r = await call(client, "PUT", f"/api/entities/mine/grants/{t.u('vic')}", ann)
    assert r.status_code == 200
    assert (await call(client, "GET", "/api/entities/mine", vic_read)).status_code == 200
    # a grantee reads but may not share further, or write
    r = await call(client, "PUT", f"/api/entities/mine/grants/{t.u('out')}", vic)
    assert r.status_code == 403
    # the admin grant routes look memories up through the admin's read rule: an admin-only key
    # gets 403 whether or not the memory exists (an admin-only key told them apart: a breaker)
    admin_only = await t.key(engine, "adm", scopes=("admin",))
    for memory in ("n1", "mine", "no_such_memory"):
        url = f"/api/admin/entities/{memory}/grants"
        for method, path in (("GET", url), ("PUT", f"{url}/{t.u('adm')}"), ("DELETE", f"{url}/x")):
            r = await call(client, method, path, admin_only)
            assert answer(r) == (403, {"detail": LACKS_READ}), (method, path)
    # an org admin cannot grant (even themselves) what they cannot read
    admin = await t.key(engine, "adm", scopes=("read", "admin"))
    r = await call(client, "PUT", f"/api/admin/entities/mine/grants/{t.u('adm')}", admin)
    assert answer(r) == NOT_FOUND
    assert answer(await call(client, "GET", "/api/entities/mine", adm)) == NOT_FOUND
    # ... nor share one they can read: granting widens a memory's readers, its owner's call
    r = await call(client, "PUT", f"/api/admin/entities/n1/grants/{t.u('out')}", admin)
    assert answer(r) == (403, {"detail": "Only the memory's owner may share it"})
    # the owner shares; an admin who can read the memory lists and may revoke its grants
    r = await call(client, "PUT", f"/api/entities/n1/grants/{t.u('out')}", ann)
    assert r.status_code == 200
    r = await call(client, "GET", "/api/admin/entities/n1/grants", admin)
    # n1 is a project memory: the grant is kept but changes nothing while it is not private
    assert r.json() == [{"entity_id": "n1", "user_id": t.u("out"), "in_effect": False}]
    r = await call(client, "DELETE", f"/api/admin/entities/n1/grants/{t.u('out')}", admin)
    assert r.status_code == 204
    assert (await call(client, "GET", "/api/admin/entities/n1/grants", admin)).json() == []
    r = await call(client, "DELETE", f"/api/entities/mine/grants/{t.u('vic')}", ann)
    assert r.status_code == 204
    assert answer(await call(client, "GET", "/api/entities/mine", vic_read)) == NOT_FOUND


async def test_a_grantee_admin_cannot_share_a_private_memory_further(engine, client):
    """A breaker's trial: an org admin granted a member's private memory re-shared it through
    the admin route (the user route refused). Now only the owner widens its readers; the pair:
    the owner's same grant works."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    admin = await t.key(engine, "adm", scopes=("read", "write", "admin"))
    out_read = await t.key(engine, "out", scopes=("read",))
    assert (await call(client, "PUT", f"/api/entities/mine/grants/{t.u('adm')}", ann)).is_success
    assert (await call(client, "GET", "/api/entities/mine", admin)).status_code == 200
    before = await snapshot(engine, t.org)
    for path in (
        f"/api/admin/entities/mine/grants/{t.u('out')}",
        f"/api/entities/mine/grants/{t.u('out')}",
    ):
        r = await call(client, "PUT", path, admin)
        assert answer(r) == (403, {"detail": "Only the memory's owner may share it"}), path
    assert await snapshot(engine, t.org) == before
    assert answer(await call(client, "GET", "/api/entities/mine", out_read)) == NOT_FOUND
    assert (await call(client, "PUT", f"/api/entities/mine/grants/{t.u('out')}", ann)).is_success
    assert (await call(client, "GET", "/api/entities/mine", out_read)).status_code == 200


async def test_read_only_keys_cannot_write_on_rest(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann", scopes=("read",))
    admin_without_write = await t.key(engine, "own", scopes=("read", "admin"))
    before, state = await counts(engine, t.org), await snapshot(engine, t.org)
    edge = {"src": "n1", "relationship": "RELATED_TO", "dst": "n2"}
    for key in (ann, admin_without_write):
        for method, path, kw in [
            ("POST", "/api/entities", {"json": note(project="p1")}),
            ("PATCH", "/api/entities/n1", {"json": {"content": "changed"}}),
            ("DELETE", "/api/entities/n1", {}),
            ("POST", "/api/edges", {"json": edge}),
            ("DELETE", "/api/edges", {"params": edge}),
            ("PUT", f"/api/entities/mine/grants/{t.u('vic')}", {}),
        ]:
            r = await call(client, method, path, key, **kw)
            assert answer(r) == (403, {"detail": "This key lacks the 'write' scope"}), path
    assert (await call(client, "POST", "/api/entities", None, json=note())).status_code == 401
    assert await counts(engine, t.org) == before
    assert await snapshot(engine, t.org) == state


async def test_a_write_only_key_cannot_read_through_an_edit(engine, client):
    """An edit answers with the whole memory: a ``write``-only key read every memory it could
    edit with an empty ``PATCH`` (REST) or ``remember`` (MCP), a breaker's trial. Now an edit
    needs ``read`` too: 403 before the memory is looked up (the same for one that does not
    exist); the pair: a read,write key's empty PATCH answers the memory. Creating still works
    (its answer holds only what was sent)."""
    t = await Team().load(engine)
    write_only = await t.key(engine, "ann", scopes=("write",))
    read_write = await t.key(engine, "ann")
    state = await snapshot(engine, t.org)
    for memory in ("n1", "no_such_memory"):
        r = await call(client, "PATCH", f"/api/entities/{memory}", write_only, json={})
        assert answer(r) == (403, {"detail": LACKS_READ}), memory
    async with Client(build_mcp(lambda: engine, fixed_key(write_only))) as mcp:
        for memory in ("n1", "no_such_memory"):
            result = await mcp.call_tool("remember", {"entity_id": memory, "name": "x"})
            assert result.is_error and result.content[0].text == LACKS_READ, memory
    assert await snapshot(engine, t.org) == state
    r = await call(client, "PATCH", "/api/entities/n1", read_write, json={})
    assert r.status_code == 200 and r.json()["id"] == "n1" and r.json()["content"]
    r = await call(client, "POST", "/api/entities", write_only, json=note(project="p1"))
    assert r.status_code == 201, r.text


async def test_read_only_keys_cannot_write_on_mcp(engine):
    t = await Team().load(engine)
    read_only = await t.key(engine, "ann", scopes=("read",))
    before, state = await counts(engine, t.org), await snapshot(engine, t.org)
    async with Client(build_mcp(lambda: engine, fixed_key(read_only))) as mcp:
        for tool, args in [
            ("remember", {"type": "note", "name": "x", "project": "p1"}),
            ("remember", {"entity_id": "n1", "content": "changed"}),
            ("link", {"src": "n1", "relationship": "RELATED_TO", "dst": "n2"}),
        ]:
            result = await mcp.call_tool(tool, args)
            assert result.is_error
            assert result.content[0].text == "This key lacks the 'write' scope"
    assert await counts(engine, t.org) == before
    assert await snapshot(engine, t.org) == state


async def test_mcp_write_tools_follow_the_rest_rules(engine, client):
    t = await Team().load(engine)
    ann, out = await t.key(engine, "ann"), await t.key(engine, "out")
    async with Client(build_mcp(lambda: engine, fixed_key(ann))) as mcp:
        made = await mcp.call_tool(
            "remember",
            {"type": "decision", "name": "Use PG", "content": "See [[n1]].", "project": "p1"},
        )
        assert not made.is_error, made.content
        entity = made.structured_content
        rest = await call(client, "GET", f"/api/entities/{entity['id']}", ann)
        assert rest.json() == entity
        edited = await mcp.call_tool(
            "remember", {"entity_id": entity["id"], "content": "New.", "if_match_revision": 1}
        )
        assert edited.structured_content["revision"] == 2
        # an id among the arguments is stripped, as every id in a REST body is (README)
        spaced = await mcp.call_tool("remember", {"entity_id": f" {entity['id']}\t", "name": "Y"})
        assert not spaced.is_error and spaced.structured_content["revision"] == 3, spaced.content
        blank = await mcp.call_tool("remember", {"entity_id": "  ", "name": "Y"})
        assert blank.is_error and blank.content[0].text == "entity_id must be a non-blank string"
        stale = await mcp.call_tool(
            "remember", {"entity_id": entity["id"], "name": "x", "if_match_revision": 1}
        )
        assert stale.is_error and "revision" in stale.content[0].text
        linked = await mcp.call_tool(
            "link", {"src": entity["id"], "relationship": "supersedes", "dst": "n2"}
        )
        assert linked.structured_content == {
            "src": entity["id"],
            "relationship": "SUPERSEDES",
            "dst": "n2",
            "created": True,
            "superseded": "n2",
        }
        refused = await mcp.call_tool("remember", {"entity_id": "pub", "name": "x"})
        assert (
            refused.is_error
            and refused.content[0].text == "You may read this memory but not change it"
        )
        missing = await mcp.call_tool("remember", {"type": "note"})
        assert missing.is_error
    async with Client(build_mcp(lambda: engine, fixed_key(out))) as mcp:
        hidden = await mcp.call_tool("link", {"src": "mine", "relationship": "X", "dst": "n1"})
        assert hidden.is_error and hidden.content[0].text == "Entity not found"


async def test_admin_routes(engine, client):
    t = await Team().load(engine)
    adm = await t.key(engine, "adm", scopes=("admin",))
    own = await t.key(engine, "own", scopes=("admin",))
    # a member cannot be minted the admin scope; a key that holds it anyway (forced in the
    # table) still finds no admin route
    member_admin_key = await t.key(engine, "ann", scopes=("read", "write"))
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE api_keys SET scopes = ARRAY['read', 'write', 'admin'] WHERE key_hash = :h"
            ),
            {"h": hash_key(member_admin_key)},
        )
    adm_rw = await t.key(engine, "adm")
    restricted_admin = await t.key(engine, "adm", scopes=("admin",), projects=["p1"])

    # the routes do not exist for anyone but an org owner/admin on an unrestricted admin key
    for key in (None, "sibyl_bogus", member_admin_key, adm_rw, restricted_admin):
        r = await call(client, "GET", "/api/admin/users", key)
        assert answer(r) == (404, {"detail": "Not found"})
    before = await counts(engine, t.org)
    r = await call(client, "POST", "/api/admin/projects", member_admin_key, json={"name": "X"})
    assert r.status_code == 404 and await counts(engine, t.org) == before

    users = (await call(client, "GET", "/api/admin/users", adm)).json()
    assert {u["id"] for u in users} == {
        t.u(n) for n in ("own", "adm", "ann", "bob", "vic", "out", "ovw")
    }
    # users: minted ids; an admin cannot create or touch owners
    r = await call(client, "POST", "/api/admin/users", adm, json={"handle": "zed"})
    assert r.status_code == 201 and r.json()["role"] == "member"
    zed = r.json()["id"]
    assert (
        await call(client, "POST", "/api/admin/users", adm, json={"handle": "o", "role": "owner"})
    ).status_code == 403
    assert (
        await call(client, "PATCH", f"/api/admin/users/{t.u('own')}", adm, json={"handle": "x"})
    ).status_code == 403
    assert (
        await call(client, "PATCH", f"/api/admin/users/{zed}", adm, json={"role": "owner"})
    ).status_code == 403
    assert (
        await call(client, "PATCH", f"/api/admin/users/{zed}", own, json={"role": "admin"})
    ).json()["role"] == "admin"
    # projects and members
    r = await call(client, "POST", "/api/admin/projects", adm, json={"id": "p4", "name": "Four"})
    assert r.status_code == 201 and r.json()["visibility"] == "private"
    assert (
        await call(client, "POST", "/api/admin/projects", adm, json={"id": "p4", "name": "X"})
    ).status_code == 409
    r = await call(client, "POST", "/api/admin/projects", adm, json={"id": "..", "name": "Dots"})
    assert r.status_code == 400 and "URL path" in r.json()["detail"]  # no path could name it
    r = await call(
        client, "PUT", f"/api/admin/projects/p4/members/{zed}", adm, json={"role": "contributor"}
    )
    assert r.json() == {"project_id": "p4", "user_id": zed, "role": "contributor"}
    assert (await call(client, "GET", "/api/admin/projects/p4/members", adm)).json() == [r.json()]
    # a user of another org is not found here
    other = await Team().load(engine)
    r = await call(
        client,
        "PUT",
        f"/api/admin/projects/p4/members/{other.u('ann')}",
        adm,
        json={"role": "viewer"},
    )
    assert answer(r) == (404, {"detail": "User not found"})
    # keys: an admin key mints keys for its own user only (a breaker's trial: a key minted for a
    # member read the member's private memories), none wider than itself; the operator mints the
    # others' (sibyl-pg keys create). Listed without secrets, revoked in the org only.
    adm_rw_admin = await t.key(engine, "adm", scopes=("read", "write", "admin"))
    before_keys = await counts(engine, t.org)
    for_zed = {"user_id": zed, "scopes": ["read", "write"], "projects": ["p4"]}
    r = await call(client, "POST", "/api/admin/keys", adm_rw_admin, json=for_zed)
    assert answer(r) == (403, {"detail": KEYS_FOR_OTHERS})
    assert (
        await call(client, "POST", "/api/admin/keys", adm, json={"user_id": t.u("own")})
    ).status_code == 403
    wider = {"user_id": t.u("adm"), "scopes": ["read", "write", "admin"]}
    r = await call(client, "POST", "/api/admin/keys", adm, json=wider)  # adm holds 'admin' only
    assert answer(r) == (
        403,
        {"detail": "A key cannot mint a key with more scopes than its own (admin)"},
    )
    assert await counts(engine, t.org) == before_keys
    own_key = {"user_id": t.u("adm"), "scopes": ["read", "write"], "projects": ["p4"]}
    r = await call(client, "POST", "/api/admin/keys", adm_rw_admin, json=own_key)
    assert r.status_code == 201
    minted = r.json()
    assert minted["key"].startswith("sibyl_") and minted["projects"] == ["p4"]
    assert (await call(client, "GET", "/api/entities/n1", adm_rw_admin)).status_code == 200
    assert (await call(client, "GET", "/api/entities/n1", minted["key"])).status_code == 404
    # the operator mints zed's key; zed writes in p4 (p4 and zed are then in use, below)
    zed_key = await make_key(engine, zed, scopes=("read", "write"), projects=["p4"])
    zed_note = await call(client, "POST", "/api/entities", zed_key, json=note(project="p4"))
    assert zed_note.status_code == 201
    listed = (await call(client, "GET", "/api/admin/keys", adm, params={"user": zed})).json()
    assert len(listed) == 1 and listed[0]["projects"] == ["p4"] and "key" not in listed[0]
    listed = (await call(client, "GET", "/api/admin/keys", adm, params={"user": t.u("adm")})).json()
    assert minted["id"] in [k["id"] for k in listed] and all("key" not in k for k in listed)
    assert (
        await call(client, "POST", "/api/admin/keys", adm, json={"user_id": other.u("ann")})
    ).status_code == 404
    other_admin = await other.key(engine, "adm", scopes=("admin",))
    foreign = (await call(client, "GET", "/api/admin/keys", other_admin)).json()
    assert foreign and all(k["user_id"].endswith(other.org) for k in foreign)
    assert (
        await call(client, "DELETE", f"/api/admin/keys/{foreign[0]['id']}", adm)
    ).status_code == 404
    assert (await call(client, "DELETE", f"/api/admin/keys/{minted['id']}", adm)).status_code == 204
    assert (await call(client, "GET", "/api/entities/n1", minted["key"])).status_code == 401
    # deleting what is still in use is a 409, not a 500
    assert (await call(client, "DELETE", "/api/admin/projects/p4", adm)).status_code == 409
    assert (await call(client, "DELETE", f"/api/admin/users/{zed}", adm)).status_code == 409
    assert (await call(client, "DELETE", "/api/admin/projects/p2", own)).status_code == 409
    r = await call(client, "PATCH", "/api/admin/projects/p3", adm, json={"visibility": "org"})
    assert r.json()["visibility"] == "org"
    ann = await t.key(engine, "ann")
    assert (await call(client, "GET", "/api/entities/hid", ann)).status_code == 200
    r = await call(client, "DELETE", f"/api/admin/projects/p4/members/{zed}", adm)
    assert r.status_code == 204
    assert (await call(client, "DELETE", f"/api/admin/users/{t.u('adm')}", adm)).status_code == 403
    # nor demote yourself (a trial lost every admin route that way); another admin may, and
    # your own handle is yours to change
    mine = f"/api/admin/users/{t.u('adm')}"
    r = await call(client, "PATCH", mine, adm, json={"role": "member"})
    assert answer(r) == (403, {"detail": "You cannot change your own role"})
    assert (await call(client, "GET", "/api/admin/users", adm)).status_code == 200
    r = await call(client, "PATCH", mine, adm, json={"role": "admin", "handle": "adm2"})
    assert (r.status_code, r.json()["role"], r.json()["handle"]) == (200, "admin", "adm2")
    r = await call(client, "PATCH", mine, own, json={"role": "member"})
    assert (r.status_code, r.json()["role"]) == (200, "member")
    assert answer(await call(client, "GET", "/api/admin/users", adm)) == (
        404,
        {"detail": "Not found"},
    )


def test_cli_keys_list_and_admin_commands(database_url):
    from typer.testing import CliRunner

    from app.cli.main import cli

    org = "org_cli_" + secrets.token_hex(4)
    run = CliRunner().invoke
    steps = [
        ["admin", "org-create", org, "--name", "CLI"],
        ["admin", "user-create", f"u1_{org}", "--org", org, "--handle", "one"],
        ["admin", "project-create", "px", "--org", org, "--name", "PX"],
        ["admin", "member-set", "px", f"u1_{org}", "contributor"],
    ]
    for args in steps:
        result = run(cli, args)
        assert result.exit_code == 0, (args, result.output)
    assert run(cli, ["admin", "member-list", "px", "--org", org]).stdout == (
        f"u1_{org}\tcontributor\n"
    )
    created = run(cli, ["keys", "create", "--user", f"u1_{org}", "--scopes", "read,write"])
    secret = created.stdout.strip()
    listed = run(cli, ["keys", "list", "--org", org]).stdout.splitlines()
    assert listed[0].split("\t")[:5] == ["id", "org", "user", "scopes", "projects"]
    key_id, row_org, user, scopes, projects, _, revoked, _ = listed[1].split("\t")
    assert (row_org, user, scopes, projects, revoked) == (org, f"u1_{org}", "read,write", "*", "-")
    assert secret not in "\n".join(listed) and secret.split("_")[-1] not in "\n".join(listed)
    assert run(cli, ["keys", "revoke", key_id]).exit_code == 0
    assert run(cli, ["keys", "list", "--org", org, "--live"]).stdout.splitlines()[1:] == []
    refused = run(cli, ["admin", "member-set", "px", "nobody", "viewer"])
    assert refused.exit_code == 1 and "User not found" in refused.output

    # a key restricted to a private project its user is not a member of: minted (membership
    # may come later), with a warning on stderr; stdout is the key alone
    assert run(cli, ["admin", "project-create", "pz", "--org", org, "--name", "PZ"]).exit_code == 0
    assert (
        run(
            cli,
            ["admin", "project-create", "po", "--org", org, "--name", "PO", "--visibility", "org"],
        ).exit_code
        == 0
    )
    made = run(cli, ["keys", "create", "--user", f"u1_{org}", "--projects", "px,pz,po"])
    assert made.exit_code == 0, made.output
    assert made.stdout.strip().startswith("sibyl_") and "\n" not in made.stdout.strip()
    assert "cannot read project pz" in made.stderr
    assert "project px" not in made.stderr and "project po" not in made.stderr


async def test_a_grant_says_whether_it_widens_the_readers_now(engine, client):
    """A new user's trial: a grant on a project memory, or to the memory's owner, was a silent
    200 that changed nothing. The answer now says so (``in_effect``), and it is true exactly
    when the grant lets its user read what they could not: the pair is each grant's user
    reading the memory before and after."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    out_read = await t.key(engine, "out", scopes=("read",))
    vic_read = await t.key(engine, "vic", scopes=("read",))
    cases = [
        # (memory, grantee, grantee's key, reads before, in effect)
        ("mine", "out", out_read, False, True),  # private: the grant opens it
        ("n1", "vic", vic_read, True, False),  # project p1: vic, a viewer, reads it already
        ("n1", "out", out_read, False, False),  # project p1: a grant does not open a project
        ("mine", "ann", ann, True, False),  # the owner reads it anyway
    ]
    for memory, user, key, before, in_effect in cases:
        seen = await call(client, "GET", f"/api/entities/{memory}", key)
        assert seen.status_code == (200 if before else 404), (memory, user)
        r = await call(client, "PUT", f"/api/entities/{memory}/grants/{t.u(user)}", ann)
        assert r.status_code == 200, r.text
        assert r.json() == {"entity_id": memory, "user_id": t.u(user), "in_effect": in_effect}
        after = await call(client, "GET", f"/api/entities/{memory}", key)
        assert after.status_code == (200 if before or in_effect else 404), (memory, user)
