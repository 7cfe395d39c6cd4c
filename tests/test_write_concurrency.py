"""Concurrent writers (contract §9, issue 5): identical edges from two OS processes leave one
edge and no 500; concurrent ``If-Match`` PATCHes have exactly one winner; concurrent writers
cannot close a SUPERSEDES cycle together, create one id twice, or deadlock each other; two
imports of overlapping files take turns.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter

import httpx
import pytest

from app.api.app import create_app
from app.core.db import make_engine
from app.core.settings import PROJECT_ROOT
from tests.team import LOCK_WAITERS, Team, call, scalar

# One writer process: the verb REST's POST /api/edges runs (same transaction, same mapping of
# errors), without importing the web stack, so the two processes start quickly. An unexpected
# exception (a 500 on REST) kills the process and fails the test.
WRITER = """
import asyncio, json, os, sys
from sqlalchemy import text
from app.core.db import make_engine
from app.core.errors import DomainError
from app.domain.entities import create_edge
from app.service.session import run_write
from app.domain.write_schemas import EdgeIn

async def main():
    engine = make_engine(os.environ["DATABASE_URL"])
    body = EdgeIn(**json.loads(os.environ["EDGE"]))

    async def one():
        try:
            edge = await run_write(
                engine, os.environ["KEY"], lambda conn, reader: create_edge(conn, reader, body)
            )
        except DomainError as exc:
            return exc.status
        return 201 if edge.created else 200

    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
    print("ready", flush=True)
    sys.stdin.readline()
    answers = await asyncio.gather(*[one() for _ in range(10)])
    await engine.dispose()
    print(json.dumps(answers), flush=True)

asyncio.run(main())
"""


async def edge_count(engine, org: str) -> int:
    return int(await scalar(engine, "SELECT count(*) FROM edges WHERE org_id = :o", o=org))


async def test_identical_edges_from_two_processes_leave_one_edge(engine, database_url):
    t = await Team().load(engine)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KEY": await t.key(engine, "ann"),
        "EDGE": json.dumps({"src": "n1", "relationship": "DEPENDS_ON", "dst": "n2"}),
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WRITER,
            cwd=PROJECT_ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:  # both are connected and waiting: release them together
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), timeout=60)
            assert line.strip() == b"ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
        outputs = await asyncio.wait_for(
            asyncio.gather(*[p.communicate() for p in procs]), timeout=60
        )
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
    statuses: Counter[int] = Counter()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err.decode()
        statuses.update(json.loads(out.decode().strip().splitlines()[-1]))
    assert statuses == Counter({201: 1, 200: 19})
    assert await edge_count(engine, t.org) == 1


async def test_identical_supersedes_edges_from_two_engines(engine, database_url):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    second = make_engine(database_url)
    try:
        transport = httpx.ASGITransport(app=create_app(second))
        async with httpx.AsyncClient(transport=transport, base_url="http://second") as other:
            app_first = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=app_first, base_url="http://first") as first:
                body = {"src": "n1", "relationship": "SUPERSEDES", "dst": "n2"}
                answers = await asyncio.gather(
                    *[
                        call(c, "POST", "/api/edges", ann, json=body)
                        for _ in range(10)
                        for c in (first, other)
                    ]
                )
    finally:
        await second.dispose()
    assert Counter(r.status_code for r in answers) == Counter({201: 1, 200: 19})
    assert await edge_count(engine, t.org) == 1
    revision = await scalar(
        engine, "SELECT revision FROM entities WHERE org_id = :o AND id = 'n2'", o=t.org
    )
    assert revision == 2  # marked superseded exactly once


async def test_concurrent_if_match_patches_have_one_winner(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    for field, values in (
        ("name", [f"Name {i}" for i in range(8)]),
        ("content", [f"Body {i}" for i in range(8)]),
    ):
        current = (await call(client, "GET", "/api/entities/n1", ann)).json()["revision"]
        answers = await asyncio.gather(
            *[
                call(
                    client,
                    "PATCH",
                    "/api/entities/n1",
                    ann,
                    json={field: v},
                    headers={"If-Match": f'"{current}"'},
                )
                for v in values
            ]
        )
        assert Counter(r.status_code for r in answers) == Counter({200: 1, 412: 7})
        winner = next(r.json() for r in answers if r.status_code == 200)
        stored = (await call(client, "GET", "/api/entities/n1", ann)).json()
        assert stored[field] == winner[field] and stored["revision"] == current + 1


async def test_concurrent_writers_cannot_close_a_supersedes_cycle(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    ids = [f"s{i}" for i in range(6)]
    for i in ids:
        await call(
            client,
            "POST",
            "/api/entities",
            ann,
            json={"id": i, "type": "plan", "name": i, "project": "p1"},
        )
    pairs = [("s0", "s1"), ("s2", "s3"), ("s4", "s5")]
    answers = await asyncio.gather(
        *[
            call(
                client,
                "POST",
                "/api/edges",
                ann,
                json={"src": a, "relationship": "SUPERSEDES", "dst": b},
            )
            for x, y in pairs
            for a, b in ((x, y), (y, x))
        ]
    )
    assert Counter(r.status_code for r in answers) == Counter({201: 3, 409: 3})
    assert await edge_count(engine, t.org) == 3


async def test_concurrent_creates_of_one_id_and_mixed_writers_never_fail(engine, client):
    t = await Team().load(engine)
    ann, bob = await t.key(engine, "ann"), await t.key(engine, "bob")
    body = {"id": "same", "type": "note", "name": "Same", "project": "p1"}
    answers = await asyncio.gather(
        *[call(client, "POST", "/api/entities", ann, json=body) for _ in range(8)]
    )
    assert Counter(r.status_code for r in answers) == Counter({201: 1, 409: 7})

    def edge(src, rel, dst):
        return call(
            client, "POST", "/api/edges", ann, json={"src": src, "relationship": rel, "dst": dst}
        )

    work = []
    for i in range(3):
        work += [
            edge("n1", "CONTRADICTS", "n2"),
            edge("n2", "CONTRADICTS", "n1"),
            edge("n1", "RELATED_TO", "same"),
            edge("same", "DEPENDS_ON", "n2"),
            edge("n2", "SUPERSEDES", "same"),
            call(
                client, "PATCH", "/api/entities/n2", bob, json={"content": f"Edit {i} of n2 [[n1]]"}
            ),
            call(client, "PATCH", "/api/entities/n1", bob, json={"name": f"N1 {i}"}),
            call(client, "PATCH", "/api/entities/n1", bob, json={"content": f"{i}: see [[n2]]"}),
            call(client, "PATCH", "/api/entities/same", ann, json={"content": f"[[n1]] {i}"}),
        ]
    answers = await asyncio.gather(*work)
    assert {r.status_code for r in answers} <= {200, 201}, [
        r.text for r in answers if r.status_code >= 300
    ]
    assert await edge_count(engine, t.org) == 5


async def test_two_imports_of_overlapping_files_at_once_both_complete(engine, database_url):
    """Each import reads what is stored, then inserts what is new: two at once over the same
    ids take turns (issue 13's attack), so neither fails on a duplicate key."""
    from app.importers import ndjson

    t = await Team().load(engine)

    def file(lo: int, hi: int) -> list[dict]:
        rec = {"kind": "entity", "org": t.org, "type": "note", "project": "p1"}
        out = [
            {**rec, "id": f"k{i}", "name": f"K{i}", "content": f"[[k{i + 1}]]", "owner": t.u("ann")}
            for i in range(lo, hi)
        ]
        return out + [
            {"kind": "edge", "org": t.org, "src": f"k{i}", "dst": f"k{i - 1}", "relationship": "R"}
            for i in range(lo + 1, hi)
        ]

    second = make_engine(database_url)
    try:
        for _ in range(3):
            first_file, second_file = file(0, 400), file(200, 600)
            await asyncio.gather(
                ndjson.import_records(engine, ndjson.from_dicts(first_file)),
                ndjson.import_records(second, ndjson.from_dicts(second_file)),
            )
    finally:
        await second.dispose()
    assert (
        await scalar(
            engine, "SELECT count(*) FROM entities WHERE org_id = :o AND id LIKE 'k%'", o=t.org
        )
        == 600
    )
    mentions = "SELECT count(*) FROM mentions WHERE org_id = :o AND src_id LIKE 'k%'"
    assert await scalar(engine, mentions, o=t.org) == 599
    pending = "SELECT string_agg(dst_id, ',') FROM pending_links WHERE org_id = :o"
    assert await scalar(engine, pending, o=t.org) == "k600"


async def test_a_create_racing_an_import_of_the_same_id_is_a_409(engine, client):
    """An import takes no per-id lock: a REST create of an id an import is inserting waits for
    the import, then answers 409 as for any taken id (was: a 500 on the duplicate key)."""
    from app.domain import write_rules
    from app.repo import writes

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    fields = {
        "id": "raced",
        "type": "note",
        "name": "From the import",
        "content": "",
        "project_id": "p1",
        "scope": "project",
        "owner_id": t.u("ann"),
        "lifecycle": "active",
        "metadata": {},
    }
    body = {"id": "raced", "type": "note", "name": "From REST", "project": "p1"}
    async with engine.connect() as importer:
        await importer.begin()
        await writes.insert_entity(importer, org_id=t.org, fields=fields)
        create = asyncio.create_task(call(client, "POST", "/api/entities", ann, json=body))
        await asyncio.sleep(0.5)  # the create is waiting on the import's row
        await importer.commit()
    r = await create
    assert (r.status_code, r.json()["detail"]) == (409, write_rules.ID_TAKEN)
    name = "SELECT name FROM entities WHERE org_id = :o AND id = 'raced'"
    assert await scalar(engine, name, o=t.org) == "From the import"


async def test_an_import_racing_a_create_of_the_same_id_names_it(engine, tmp_path):
    """The other way round: a REST create commits an id an import is inserting. The import
    stops naming that id (was: "refers to ... that does not exist"); run again, it completes."""
    from app.importers import ndjson
    from app.repo import writes

    t = await Team().load(engine)
    fields = {
        "id": "raced",
        "type": "note",
        "name": "From REST",
        "content": "",
        "project_id": "p1",
        "scope": "project",
        "owner_id": t.u("ann"),
        "lifecycle": "active",
        "metadata": {},
    }
    rec = {"kind": "entity", "org": t.org, "type": "note", "project": "p1", "owner": t.u("ann")}
    records = [{**rec, "id": "raced", "name": "From the import"}]
    async with engine.connect() as rest:
        await rest.begin()
        await writes.insert_entity(rest, org_id=t.org, fields=fields)
        task = asyncio.create_task(ndjson.import_records(engine, ndjson.from_dicts(records)))
        await asyncio.sleep(0.5)  # the import is waiting on the create's row
        await rest.commit()
    with pytest.raises(ndjson.ImportError_) as err:
        await task
    assert err.value.line == 1
    assert f"entity 'raced' was created in org '{t.org}' by another writer" in err.value.reason
    again = await ndjson.import_records(engine, ndjson.from_dicts(records))
    assert again.outcomes["entity:created"] == 0
    name = "SELECT name FROM entities WHERE org_id = :o AND id = 'raced'"
    assert await scalar(engine, name, o=t.org) == "From the import"


@pytest.mark.parametrize("verb", ["PATCH", "POST"])
async def test_a_link_written_while_its_target_is_deleted_stays_pending(engine, client, verb):
    """A breaker's trial: a write whose body links ``[[tgt]]``, racing ``DELETE tgt``, was a 500
    half the time (the mention's foreign key failed: the target was found, then deleted before
    the insert). Here the delete holds its row lock first, the write starts and waits, the
    delete commits: the write succeeds and the link is kept pending (nothing is dropped)."""
    from app.repo import entities as entity_repo

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    created = await call(
        client, "POST", "/api/entities", ann, json={"id": "tgt", "type": "note", "name": "T"}
    )
    assert created.status_code == 201
    if verb == "PATCH":
        write = call(client, "PATCH", "/api/entities/n1", ann, json={"content": "see [[tgt]]"})
    else:
        body = {"id": "src", "type": "note", "name": "S", "content": "see [[tgt]]"}
        write = call(client, "POST", "/api/entities", ann, json=body)
    async with engine.connect() as conn:
        tx = await conn.begin()
        await entity_repo.delete_entity(conn, org_id=t.org, entity_id="tgt")  # row lock held
        task = asyncio.ensure_future(write)
        for _ in range(200):  # until the write waits for the delete's row lock
            if await scalar(engine, LOCK_WAITERS) or task.done():
                break
            await asyncio.sleep(0.05)
        await tx.commit()
    answer = await task
    assert answer.status_code in (200, 201), answer.text
    source = "n1" if verb == "PATCH" else "src"
    links = "SELECT count(*) FROM {} WHERE org_id = :o AND src_id = :s AND dst_id = 'tgt'"
    assert await scalar(engine, links.format("pending_links"), o=t.org, s=source) == 1
    assert await scalar(engine, links.format("mentions"), o=t.org, s=source) == 0


async def test_deleting_a_memory_while_a_memory_linking_to_it_is_deleted(engine, client):
    """A breaker's trial: ``DELETE a`` and ``DELETE b`` at once, ``a`` saying ``[[b]]``, was a 500
    in 30 of 40 rounds (deleting b turns a's mention back into a pending link, whose source a
    was being deleted). Here a's delete holds its row first, b's delete starts and waits, a's
    commits: b's delete succeeds and leaves no pending link from a memory that is gone."""
    from app.repo import entities as entity_repo

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    for body in ({"id": "b", "content": "target"}, {"id": "a", "content": "see [[b]]"}):
        note = {**body, "type": "note", "name": body["id"]}
        r = await call(client, "POST", "/api/entities", ann, json=note)
        assert r.status_code == 201, r.text
    async with engine.connect() as conn:
        tx = await conn.begin()
        await entity_repo.delete_entity(conn, org_id=t.org, entity_id="a")  # row lock held
        task = asyncio.ensure_future(call(client, "DELETE", "/api/entities/b", ann))
        for _ in range(200):  # until b's delete waits for a's row
            if await scalar(engine, LOCK_WAITERS) or task.done():
                break
            await asyncio.sleep(0.05)
        await tx.commit()
    answer = await task
    assert answer.status_code == 204, answer.text
    left = "SELECT count(*) FROM {} WHERE org_id = :o AND {} IN ('a', 'b')"
    for table, column in (("entities", "id"), ("pending_links", "src_id"), ("mentions", "src_id")):
        assert await scalar(engine, left.format(table, column), o=t.org) == 0, table
