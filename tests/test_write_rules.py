"""One write path (contract §9 revised, issue 13): every write rule through every door.

Each rule runs through REST, MCP and the NDJSON import (``DOORS``): the reserved type
``passage`` refused, SUPERSEDES cycles refused, the superseded mark set, passages cut, links
derived, and a link to a memory not there yet kept pending until that memory is created (forward
links in one import file, a later import, REST, MCP). Then: a re-import repairs links lost
before pending links existed; a repeated import of a superseded memory changes nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.types import TextContent
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import spans, write_rules
from app.importers import ndjson
from app.mcp.server import build_mcp, fixed_key
from tests.builders import import_dicts
from tests.team import Team, call, scalar

DOORS = ["rest", "mcp", "import"]
LONG = "\n\n".join(f"# Part {i}\n\n" + "lorem ipsum dolor sit amet " * 40 for i in range(4))


class Door:
    """Writes as ``ann`` (contributor of p1) through one door; every call answers
    ``(ok, detail_or_body)``."""

    def __init__(self, name: str, t: Team, engine: AsyncEngine, client: httpx.AsyncClient):
        self.name, self.t, self.engine, self.client = name, t, engine, client
        self.key = ""

    async def open(self) -> Door:
        self.key = await self.t.key(self.engine, "ann")
        return self

    async def _import(self, records: list[dict[str, Any]]) -> tuple[bool, Any]:
        try:
            summary = await ndjson.import_records(
                self.engine, ndjson.from_dicts(records), total=len(records)
            )
        except ndjson.ImportError_ as exc:
            return False, exc.reason
        return True, summary

    async def _mcp(self, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
        async with Client(build_mcp(lambda: self.engine, fixed_key(self.key))) as mcp:
            result = await mcp.call_tool(tool, args)
        if result.is_error:
            content = result.content[0]
            assert isinstance(content, TextContent)
            return False, content.text
        return True, result.structured_content

    async def entity(self, id_: str, *, content: str = "Body.", type_: str = "note"):
        """Create memory ``id_`` in p1."""
        body = {"id": id_, "type": type_, "name": f"Name {id_}", "content": content}
        if self.name == "import":
            rec = {"kind": "entity", "org": self.t.org, "project": "p1", "owner": self.t.u("ann")}
            return await self._import([{**rec, **body}])
        if self.name == "mcp":
            return await self._mcp("remember", {**body, "project": "p1"})
        r = await call(
            self.client, "POST", "/api/entities", self.key, json={**body, "project": "p1"}
        )
        return r.status_code == 201, r.json() if r.status_code == 201 else r.json()["detail"]

    async def edge(self, src: str, relationship: str, dst: str):
        """Write ``src -relationship-> dst``."""
        body = {"src": src, "relationship": relationship, "dst": dst}
        if self.name == "import":
            return await self._import([{"kind": "edge", "org": self.t.org, **body}])
        if self.name == "mcp":
            return await self._mcp("link", body)
        r = await call(self.client, "POST", "/api/edges", self.key, json=body)
        ok = r.status_code in (200, 201)
        return ok, r.json() if ok else r.json()["detail"]


@pytest.fixture(params=DOORS)
async def door(request, engine, client) -> Door:
    t = await Team().load(engine)
    return await Door(request.param, t, engine, client).open()


async def q(door: Door, sql: str, **params: Any) -> Any:
    return await scalar(door.engine, sql, o=door.t.org, **params)


async def test_the_reserved_type_is_refused(door):
    ok, detail = await door.entity("psg", type_="passage")
    assert (ok, detail) == (False, write_rules.RESERVED_TYPE)
    assert await q(door, "SELECT count(*) FROM entities WHERE org_id = :o AND id = 'psg'") == 0


async def test_a_reserved_id_is_refused(door):
    ok, detail = await door.entity("passage_x")
    assert (ok, detail) == (False, write_rules.RESERVED_ID)


async def test_supersedes_marks_its_target_and_cycles_are_refused(door):
    for id_ in ("c1", "c2", "c3"):
        assert (await door.entity(id_))[0]
    assert (await door.edge("c1", "SUPERSEDES", "c2"))[0]
    assert (await door.edge("c2", "SUPERSEDES", "c3"))[0]
    lifecycle = "SELECT lifecycle FROM entities WHERE org_id = :o AND id = :i"
    assert await q(door, lifecycle, i="c2") == "superseded"
    assert await q(door, lifecycle, i="c3") == "superseded"
    assert await q(door, lifecycle, i="c1") == "active"
    assert await door.edge("c3", "SUPERSEDES", "c1") == (False, write_rules.CYCLE)
    assert await door.edge("c2", "SUPERSEDES", "c1") == (False, write_rules.CYCLE)
    edges = "SELECT count(*) FROM edges WHERE org_id = :o AND relationship = 'SUPERSEDES'"
    assert await q(door, edges) == 2


async def test_passages_are_cut_as_on_every_door(door):
    assert (await door.entity("long", content=LONG, type_="decision"))[0]
    want = spans.project("decision", LONG, declared=None, evidence_lines=40)
    assert want is not None
    got = await q(door, "SELECT count(*) FROM passages WHERE org_id = :o AND parent_id = 'long'")
    assert got == len(want.spans) > 1


async def test_links_are_derived_and_a_missing_target_waits_for_its_memory(door):
    ok, _ = await door.entity("src", content="See [[n1]], [[later]] and [[src]].")
    assert ok
    mentions = "SELECT string_agg(dst_id, ',' ORDER BY dst_id) FROM mentions WHERE org_id = :o"
    pending = "SELECT string_agg(dst_id, ',' ORDER BY dst_id) FROM pending_links WHERE org_id = :o"
    assert await q(door, mentions) == "n1"
    assert await q(door, pending) == "later"
    assert (await door.entity("later"))[0]  # the target appears, through the same door
    assert await q(door, mentions) == "later,n1"
    assert await q(door, pending) is None


async def test_a_pending_link_resolves_whichever_door_creates_the_target(engine, client):
    t = await Team().load(engine)
    doors = {name: await Door(name, t, engine, client).open() for name in DOORS}
    for writer in DOORS:  # each door writes a link that the next door's memory resolves
        target = DOORS[(DOORS.index(writer) + 1) % len(DOORS)]
        assert (await doors[writer].entity(f"from_{writer}", content=f"[[to_{target}]]"))[0]
    for name in DOORS:
        assert (await doors[name].entity(f"to_{name}"))[0]
    rows = await scalar(
        engine,
        "SELECT string_agg(src_id || '>' || dst_id, ' ' ORDER BY src_id) FROM mentions"
        " WHERE org_id = :o",
        o=t.org,
    )
    assert rows == "from_import>to_rest from_mcp>to_import from_rest>to_mcp"
    assert (
        await scalar(engine, "SELECT count(*) FROM pending_links WHERE org_id = :o", o=t.org) == 0
    )


async def test_a_link_to_a_deleted_memory_waits_again_for_its_id(door):
    """Deleting a memory keeps the ``[[links]]`` to it in other bodies: they wait as pending
    links, and a memory created again under that id, through any door, is mentioned again."""
    assert (await door.entity("gone"))[0]
    assert (await door.entity("src", content="See [[gone]]."))[0]
    r = await call(door.client, "DELETE", "/api/entities/gone", door.key)
    assert r.status_code == 204
    pending = "SELECT string_agg(src_id || '>' || dst_id, ',') FROM pending_links WHERE org_id = :o"
    assert await q(door, pending) == "src>gone"
    assert (await door.entity("gone"))[0]
    mentions = "SELECT string_agg(src_id || '>' || dst_id, ',') FROM mentions WHERE org_id = :o"
    assert await q(door, mentions) == "src>gone"
    assert await q(door, pending) is None


async def test_a_forward_link_in_one_import_file_becomes_a_mention(engine):
    t = Team()
    ahead = {
        "kind": "entity",
        "org": t.org,
        "id": "nc_f1",
        "type": "note",
        "name": "first",
        "content": "Before its target: [[nc_f2]]; never there: [[nc_none]].",
        "project": "p1",
    }
    later = {**ahead, "id": "nc_f2", "name": "second", "content": "The target."}
    summary = await ndjson.import_records(
        engine, ndjson.from_dicts(t.records(extra=[ahead, later]))
    )
    assert summary.pending_links == 1 and "pending links: 1" in summary.render()
    got = await scalar(
        engine,
        "SELECT string_agg(src_id || '>' || dst_id, ' ') FROM mentions WHERE org_id = :o",
        o=t.org,
    )
    assert got == "nc_f1>nc_f2"
    # a later import brings the last target: nothing pending any more
    third = {**ahead, "id": "nc_none", "name": "third", "content": "Late."}
    summary = await ndjson.import_records(engine, ndjson.from_dicts([third]))
    assert summary.pending_links == 0


async def test_a_re_import_repairs_links_lost_before_pending_links_existed(engine):
    t = Team()
    ahead = {
        "kind": "entity",
        "org": t.org,
        "id": "r1",
        "type": "note",
        "name": "first",
        "content": "[[r2]]",
        "project": "p1",
    }
    later = {**ahead, "id": "r2", "name": "second", "content": "target"}
    records = t.records(extra=[ahead, later])
    await ndjson.import_records(engine, ndjson.from_dicts(records))
    async with engine.begin() as conn:  # what the old importer left: the link silently lost
        await conn.execute(text("DELETE FROM mentions WHERE org_id = :o"), {"o": t.org})
    again = await ndjson.import_records(engine, ndjson.from_dicts(records))
    assert again.outcomes["entity:repaired"] == 1
    assert await scalar(engine, "SELECT count(*) FROM mentions WHERE org_id = :o", o=t.org) == 1
    third = await ndjson.import_records(engine, ndjson.from_dicts(records))
    assert third.outcomes["entity:repaired"] == 0  # repaired once, then unchanged


async def test_a_repeated_import_keeps_the_superseded_mark_and_changes_nothing(engine):
    t = Team()
    new = {
        "kind": "entity",
        "org": t.org,
        "id": "new",
        "type": "note",
        "name": "n",
        "project": "p1",
    }
    old = {**new, "id": "old", "name": "o"}
    edge = {"kind": "edge", "org": t.org, "src": "new", "dst": "old", "relationship": "SUPERSEDES"}
    records = t.records(extra=[new, old, edge])
    await ndjson.import_records(engine, ndjson.from_dicts(records))
    state = "SELECT lifecycle || ':' || revision FROM entities WHERE org_id = :o AND id = 'old'"
    assert await scalar(engine, state, o=t.org) == "superseded:2"
    again = await ndjson.import_records(engine, ndjson.from_dicts(records))
    assert again.outcomes["entity:updated"] == 0 and again.outcomes["edge:unchanged"] == 1
    assert await scalar(engine, state, o=t.org) == "superseded:2"


async def test_a_cycle_in_one_import_file_names_the_line_that_closes_it(engine):
    t = Team()
    base = {"kind": "entity", "org": t.org, "type": "note", "project": "p1"}
    ents = [{**base, "id": i, "name": i} for i in ("k1", "k2", "k3")]

    def sup(src: str, dst: str) -> dict[str, Any]:
        return {"kind": "edge", "org": t.org, "src": src, "dst": dst, "relationship": "SUPERSEDES"}

    records = t.records(extra=[*ents, sup("k1", "k2"), sup("k2", "k3"), sup("k3", "k1")])
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.from_dicts(records))
    assert (err.value.line, err.value.reason) == (len(records), write_rules.CYCLE)
    assert await scalar(engine, "SELECT count(*) FROM entities WHERE org_id = :o", o=t.org) == 0
    # fixed (the closing edge dropped), the same file imports, marks set
    summary = await ndjson.import_records(engine, ndjson.from_dicts(records[:-1]))
    assert summary.outcomes["edge:written"] == 2
    marked = "SELECT string_agg(id, ',' ORDER BY id) FROM entities WHERE org_id = :o"
    assert await scalar(engine, marked + " AND lifecycle = 'superseded'", o=t.org) == "k2,k3"


async def test_the_bulk_import_writes_the_rows_a_rest_create_writes(engine, client):
    bulk, rest = Team(), await Team().load(engine)
    rec = {
        "kind": "entity",
        "org": bulk.org,
        "id": "same",
        "type": "decision",
        "name": "Same",
        "content": LONG + " [[n1]] [[ghost]]",
        "project": "p1",
        "owner": bulk.u("ann"),
    }
    await bulk.load(engine, extra=[rec])
    ann = await rest.key(engine, "ann")
    body = {k: rec[k] for k in ("id", "type", "name", "content", "project")}
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    rows = {}
    for t in (bulk, rest):
        async with engine.connect() as conn:
            rows[t.org] = [
                tuple(r)
                for r in await conn.execute(
                    text(
                        "SELECT 'p', id, parent_revision, passage_index, start_offset, end_offset,"
                        " breadcrumb, content FROM passages"
                        " WHERE org_id = :o AND parent_id = 'same'"
                        " UNION ALL SELECT 'e', type, revision, passage_total, 0, 0,"
                        " passage_kind || passages_lossless::text, lifecycle FROM entities"
                        " WHERE org_id = :o AND id = 'same'"
                        " UNION ALL SELECT 'm', dst_id, 0, 0, 0, 0, derived::text, '' FROM mentions"
                        " WHERE org_id = :o AND src_id = 'same'"
                        " UNION ALL SELECT 'l', dst_id, 0, 0, 0, 0, '', '' FROM pending_links"
                        " WHERE org_id = :o AND src_id = 'same' ORDER BY 1, 2"
                    ),
                    {"o": t.org},
                )
            ]
    assert rows[bulk.org] == rows[rest.org]
    assert len(rows[bulk.org]) > 3


async def test_a_link_written_while_its_target_is_being_created_is_settled(engine):
    """The race of pending links: S links [[T]] while T's creation is not committed yet (S sees
    no T; T's resolution does not see S's pending link). Each write settles after its commit,
    so the later one sees both."""
    from app.domain import memories, write_rules

    t = await Team().load(engine)

    def data(id_: str, content: str) -> memories.EntityData:
        return memories.EntityData(
            id=id_,
            type="note",
            name=id_,
            content=content,
            scope="project",
            project_id="p1",
            owner_id=t.u("ann"),
        )

    async def write_source() -> None:
        with write_rules.settling() as unsettled:
            async with engine.begin() as conn:
                await memories.save_entity(
                    conn, org_id=t.org, data=data("race_s", "[[race_t]]"), evidence_lines=40
                )
            async with engine.begin() as conn:
                await write_rules.settle(conn, unsettled, reader_params=None)

    pending = "SELECT count(*) FROM pending_links WHERE org_id = :o"
    with write_rules.settling() as unsettled:
        async with engine.begin() as conn:
            await memories.save_entity(
                conn, org_id=t.org, data=data("race_t", "target"), evidence_lines=40
            )
            await asyncio.create_task(write_source())  # commits while race_t is uncommitted
        assert await scalar(engine, pending, o=t.org) == 1  # neither saw the other
        async with engine.begin() as conn:
            assert await write_rules.settle(conn, unsettled, reader_params=None) == 1
    assert await scalar(engine, pending, o=t.org) == 0
    mentions = "SELECT string_agg(src_id || '>' || dst_id, ' ') FROM mentions WHERE org_id = :o"
    assert await scalar(engine, mentions, o=t.org) == "race_s>race_t"


@pytest.mark.parametrize("in_body", [True, False])
async def test_a_body_link_under_an_explicit_mention_waits_again_when_its_target_goes(
    engine, client, in_body
):
    """A breaker's trial: ``det_s`` saying ``[[det_t]]`` and an imported explicit mention
    det_s -> det_t (it takes over the derived one: ``derived = false``); deleting det_t left no
    pending link, so re-creating it never linked det_s again (the body still says so). Now the
    body is read: the link waits again and comes back. The pair: an explicit mention whose
    source's body does not link the target leaves nothing pending (it was no body link)."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    note = {"type": "note", "name": "t", "project": "p1"}
    created = await call(client, "POST", "/api/entities", ann, json={"id": "det_t", **note})
    assert created.status_code == 201
    content = "see [[det_t]]" if in_body else "no link here"
    source = {"kind": "entity", "org": t.org, "id": "det_s", "type": "note", "name": "s"}
    await import_dicts(
        engine,
        [
            {**source, "content": content, "project": "p1", "owner": t.u("ann")},
            {"kind": "mention", "org": t.org, "src": "det_s", "dst": "det_t"},
        ],
    )
    pending = "SELECT count(*) FROM pending_links WHERE org_id = :o AND src_id = 'det_s'"
    mention = "SELECT count(*) FROM mentions WHERE org_id = :o AND src_id = 'det_s'"
    assert await scalar(engine, mention, o=t.org) == 1
    assert (await call(client, "DELETE", "/api/entities/det_t", ann)).status_code == 204
    assert await scalar(engine, pending, o=t.org) == (1 if in_body else 0)
    created = await call(client, "POST", "/api/entities", ann, json={"id": "det_t", **note})
    assert created.status_code == 201
    assert await scalar(engine, mention, o=t.org) == (1 if in_body else 0)
