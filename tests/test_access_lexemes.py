"""The access lexemes of private memories (migration 0015): kept by the database on every write,
and a way in for the full-text lane's private arm, never a permission.

The world is ``tests/test_search.py``'s read-rule world with its word common enough to take the
impact lists, so a reader's private matches come through the private arm (the GIN probe of
``search_tsv || access_tsv``); the pairs follow the read-rule pattern: whoever may read a row
finds it, whoever may not gets exactly what they would get if it did not exist.
"""

from __future__ import annotations

import asyncio
import json
import secrets

from sqlalchemy import text

from app.domain.schemas import SearchRequest, SearchResponse
from app.domain.search import SearchSettings
from app.repo import term_stats
from tests.builders import import_counted, import_dicts, make_key, org_records, search_as
from tests.team import call
from tests.test_search import SECTION, WORD, _ent, _ids, _rules_world, _transcript

LEXEMES = """SELECT coalesce(tsvector_to_array(t.access_tsv), '{}') AS memory,
       coalesce((SELECT array_agg(DISTINCT l) FROM passages p,
                        unnest(tsvector_to_array(p.access_tsv)) l
                 WHERE p.org_id = t.org_id AND p.parent_id = t.id), '{}') AS passages,
       (SELECT count(*) FROM passages p WHERE p.org_id = t.org_id AND p.parent_id = t.id
          AND p.access_tsv IS DISTINCT FROM t.access_tsv) AS passages_apart
FROM entities t WHERE t.org_id = :org AND t.id = :id"""


class World:
    """The read-rule world (its word on the impact lists) and what a test needs of it."""

    def __init__(self, org: str, sfx: str, keys: dict[str, str]) -> None:
        self.org, self.sfx, self.keys = org, sfx, keys

    def user(self, handle: str) -> str:
        return f"user_{handle}_{self.sfx}"


async def _world(engine) -> World:
    org, sfx = "org_access_" + secrets.token_hex(4), secrets.token_hex(3)
    await import_dicts(engine, _rules_world(org, sfx, None, common=True))
    await term_stats.refresh_orgs(engine, [org])
    keys = {n: await make_key(engine, f"user_{n}_{sfx}") for n in ("ann", "bob", "dan", "eve")}
    keys["ann:write"] = await make_key(engine, f"user_ann_{sfx}", scopes=("read", "write"))
    return World(org, sfx, keys)


async def _lexemes(engine, world: World, entity: str) -> tuple[set[str], set[str], int]:
    """(the memory's access lexemes, its passages', how many passages differ from it)."""
    async with engine.connect() as conn:
        row = (await conn.execute(text(LEXEMES), {"org": world.org, "id": entity})).one()
        handles = ["ann", "bob", "dan", "eve"]
        lexemes = await conn.execute(
            text("SELECT sibyl_access_lexeme(u) FROM unnest(CAST(:users AS text[])) AS u"),
            {"users": [world.user(n) for n in handles]},
        )
    back = dict(zip(lexemes.scalars(), handles, strict=True))
    return (
        {back.get(x, x) for x in row.memory},
        {back.get(x, x) for x in row.passages},
        row.passages_apart,
    )


async def test_the_database_keeps_the_lexemes_on_every_write(engine, client):
    """Owner and grantees on a private memory and all its passages; nothing elsewhere; a grant,
    a revocation, a re-scope and a re-cut each leave them right (the triggers of 0015)."""
    w = await _world(engine)
    assert await _lexemes(engine, w, "priv_loose") == ({"ann", "eve"}, set(), 0)
    assert await _lexemes(engine, w, "long_priv") == ({"ann"}, {"ann"}, 0)  # cut into passages
    assert await _lexemes(engine, w, "p1_doc") == (set(), set(), 0)
    assert await _lexemes(engine, w, "org_note") == (set(), set(), 0)

    owner = w.keys["ann:write"]
    path = f"/api/entities/long_priv/grants/{w.user('bob')}"
    assert (await call(client, "PUT", path, owner)).status_code == 200
    assert await _lexemes(engine, w, "long_priv") == ({"ann", "bob"}, {"ann", "bob"}, 0)
    assert (await call(client, "DELETE", path, owner)).status_code == 204
    assert await _lexemes(engine, w, "long_priv") == ({"ann"}, {"ann"}, 0)

    # a re-cut: new passages take the parent's lexemes
    got = await call(client, "GET", "/api/entities/long_priv", owner)
    body = got.json()["content"] + f"\n\n## Third\n\n{WORD} again\n"
    r = await call(
        client,
        "PATCH",
        "/api/entities/long_priv",
        owner,
        json={"content": body},
        headers={"If-Match": got.headers["ETag"]},
    )
    assert r.status_code == 200, r.text
    assert await _lexemes(engine, w, "long_priv") == ({"ann"}, {"ann"}, 0)

    # out of the private scope: no lexeme left on the memory or its passages
    got = await call(client, "GET", "/api/entities/long_priv", owner)
    r = await call(
        client,
        "PATCH",
        "/api/entities/long_priv",
        owner,
        json={"scope": "project"},
        headers={"If-Match": got.headers["ETag"]},
    )
    assert r.status_code == 200, r.text
    assert await _lexemes(engine, w, "long_priv") == (set(), set(), 0)


async def test_a_grant_over_rest_opens_the_private_arm_and_its_revocation_closes_it(engine, client):
    """Pair: bob (a viewer of p1) does not read ann's private memory in p1; granted it, he finds
    it and its passages through the common word; revoked, his pages are byte-identical to those
    before the grant."""
    w = await _world(engine)
    bob = w.keys["bob"]
    before = await _transcript(client, bob)
    assert "long_priv" not in _ids(before)
    path = f"/api/entities/long_priv/grants/{w.user('bob')}"
    assert (await call(client, "PUT", path, w.keys["ann:write"])).status_code == 200
    granted = await _transcript(client, bob)
    assert "long_priv" in _ids(granted)
    assert (await call(client, "DELETE", path, w.keys["ann:write"])).status_code == 204
    assert json.dumps(await _transcript(client, bob)) == json.dumps(before)


async def test_a_lexeme_is_a_way_in_never_a_permission(engine, client):
    """A stale or forged lexeme (written here by hand, the triggers bypassed) naming dan, an org
    admin who may not read ann's private memories, changes nothing dan sees: every row the
    private arm finds still passes the read rule."""
    w = await _world(engine)
    before = await _transcript(client, w.keys["dan"])
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE entities SET access_tsv = access_tsv"
                " || array_to_tsvector(ARRAY[sibyl_access_lexeme(:u)])"
                " WHERE org_id = :org AND id IN ('priv_in_p1', 'priv_loose', 'long_priv')"
            ),
            {"u": w.user("dan"), "org": w.org},
        )
    assert "dan" in (await _lexemes(engine, w, "long_priv"))[1]  # its passages too
    after = await _transcript(client, w.keys["dan"])
    assert json.dumps(after) == json.dumps(before)
    assert not {"priv_in_p1", "priv_loose", "long_priv"} & _ids(after)


async def test_a_private_memory_imported_after_its_grants_reader_exists(engine):
    """The importer writes new memories and their passages with the row-by-row checks off
    (``session_replication_role``): the triggers fire there too, so an imported private memory,
    granted in the same file, carries its owner's and grantee's lexemes, passages included."""
    org, sfx = "org_access_" + secrets.token_hex(4), secrets.token_hex(3)
    long_body = f"## A\n\n{SECTION}\n\n## B\n\n{SECTION}\n"
    records = [
        *_rules_world(org, sfx, None),
        _ent(org, sfx, "late_priv", "Late", long_body, scope="private", type="document"),
        {"kind": "grant", "entity": "late_priv", "user": f"user_bob_{sfx}"},
    ]
    await import_dicts(engine, records)
    w = World(org, sfx, {})
    assert await _lexemes(engine, w, "late_priv") == ({"ann", "bob"}, {"ann", "bob"}, 0)


async def test_concurrent_grants_and_revocations_of_one_memory_all_succeed(engine, client):
    """Six grants of one memory at once, then their six revocations at once: every one answers
    as it would alone, and the lexemes end as the grants do."""
    w = await _world(engine)
    extra = [f"user_x{i}_{w.sfx}" for i in range(6)]
    async with engine.begin() as conn:
        for user in extra:
            await conn.execute(
                text(
                    "INSERT INTO users (org_id, id, handle, role) VALUES (:org, :id, :id, 'member')"
                ),
                {"org": w.org, "id": user},
            )
    owner = w.keys["ann:write"]
    paths = [f"/api/entities/long_priv/grants/{user}" for user in extra]
    granted = await asyncio.gather(*(call(client, "PUT", p, owner) for p in paths))
    assert [r.status_code for r in granted] == [200] * 6, [r.text for r in granted]
    memory, passages, apart = await _lexemes(engine, w, "long_priv")
    assert len(memory) == 7 and memory == passages and apart == 0  # ann and the six
    revoked = await asyncio.gather(*(call(client, "DELETE", p, owner) for p in paths))
    assert [r.status_code for r in revoked] == [204] * 6, [r.text for r in revoked]
    assert await _lexemes(engine, w, "long_priv") == ({"ann"}, {"ann"}, 0)


async def test_a_grant_changed_in_place_moves_its_lexeme(engine):
    """A DBA's UPDATE of a grant (another user, another memory) leaves the lexemes of both the
    old and the new memory right."""
    w = await _world(engine)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE entity_grants SET user_id = :bob"
                " WHERE org_id = :org AND entity_id = 'priv_loose' AND user_id = :eve"
            ),
            {"org": w.org, "bob": w.user("bob"), "eve": w.user("eve")},
        )
    assert (await _lexemes(engine, w, "priv_loose"))[0] == {"ann", "bob"}
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE entity_grants SET entity_id = 'long_priv'"
                " WHERE org_id = :org AND entity_id = 'priv_loose'"
            ),
            {"org": w.org},
        )
    assert (await _lexemes(engine, w, "priv_loose"))[0] == {"ann"}
    assert await _lexemes(engine, w, "long_priv") == ({"ann", "bob"}, {"ann", "bob"}, 0)


async def test_the_triggers_work_whatever_the_session_search_path(engine):
    """A session whose search path leaves out the schema (pg_restore's empty one) can still
    write: the trigger functions keep the path they were created with."""
    w = await _world(engine)
    async with engine.begin() as conn:
        schema = (await conn.execute(text("SELECT current_schema()"))).scalar_one()
        await conn.execute(text("SET LOCAL search_path TO pg_catalog"))
        await conn.execute(
            text(
                f"INSERT INTO {schema}.entity_grants (org_id, entity_id, user_id)"
                " VALUES (:org, 'long_priv', :dan)"
            ),
            {"org": w.org, "dan": w.user("dan")},
        )
        await conn.execute(
            text(
                f"UPDATE {schema}.entities SET scope = 'project'"
                " WHERE org_id = :org AND id = 'priv_loose'"
            ),
            {"org": w.org},
        )
    assert await _lexemes(engine, w, "long_priv") == ({"ann", "dan"}, {"ann", "dan"}, 0)
    assert await _lexemes(engine, w, "priv_loose") == (set(), set(), 0)


def _crowded_world(org: str, sfx: str, *, needle: bool) -> list[dict]:
    """Two words on the impact lists (each in 205 org-wide memories), 30 private memories of
    ann holding the first (``quokka``), then, written last, ann's private ``needle`` holding
    the second (``wombat``) three times, granted to eve; bob reads neither."""
    out = [
        {"kind": "org", "id": org, "name": "Crowded"},
        *(
            {"kind": "user", "id": f"user_{n}_{sfx}", "org": org, "handle": n, "role": "member"}
            for n in ("ann", "bob", "eve")
        ),
        *(
            _ent(org, sfx, f"q_{i}", f"Open q {i}", f"quokka {SECTION}", scope="org")
            for i in range(205)
        ),
        *(
            _ent(org, sfx, f"w_{i}", f"Open w {i}", f"wombat {SECTION}", scope="org")
            for i in range(205)
        ),
        *(
            _ent(
                org,
                sfx,
                f"mine_{i:02d}",
                f"Mine {i}",
                "quokka quokka",
                scope="private",
                project=None,
            )
            for i in range(30)
        ),
    ]
    if needle:
        out += [
            _ent(
                org, sfx, "needle", "Needle", "wombat wombat wombat", scope="private", project=None
            ),
            {"kind": "grant", "entity": "needle", "user": f"user_eve_{sfx}"},
        ]
    return out


async def test_a_rare_private_match_is_not_crowded_out_by_a_common_words_many(engine):
    """The private arm's bound is shared equally among the query's words that take the impact
    lists (``scan_limit`` 10, two words: 5 matches each a table), so ann's 30 private
    ``quokka`` memories, written first, cannot use up the reads that find her one private
    ``wombat`` memory: it is found (first: it holds its word three times in three words) and
    the lane says it cut the ``quokka`` matches. Pair: eve, granted it, finds it too; bob gets
    exactly the page he gets where it does not exist."""
    pipeline = SearchSettings(scan_limit=10)
    request = SearchRequest(query="quokka wombat", limit=10)
    pages: dict[tuple[bool, str], SearchResponse] = {}
    for needle in (True, False):
        org, sfx = "org_crowd_" + secrets.token_hex(4), secrets.token_hex(3)
        listed = await import_counted(
            engine, org, _crowded_world(org, sfx, needle=needle), ["quokka", "wombat"]
        )
        assert listed == {"quokka", "wombat"}, "both words must take the impact lists"
        for handle in ("ann", "eve", "bob"):
            user = f"user_{handle}_{sfx}"
            pages[needle, handle] = await search_as(engine, user, request, pipeline=pipeline)
    for handle in ("ann", "eve"):
        page = pages[True, handle]
        assert page.results and page.results[0].id == "needle", handle
    assert pages[True, "ann"].filters["candidates_capped"] is True
    bob, bob_without = pages[True, "bob"], pages[False, "bob"]
    assert "needle" not in {r.id for r in bob.results}
    assert [(r.id, r.score) for r in bob.results] == [(r.id, r.score) for r in bob_without.results]
    assert bob.filters["candidates_capped"] == bob_without.filters["candidates_capped"]


def _restricted_world(org: str, sfx: str, *, hidden: bool) -> list[dict]:
    """One word on the impact lists (205 memories of the open project p2); ann's private
    memories holding it: (``hidden``) 30 with no project, written first, then one in p2."""
    out = [
        *org_records(org, sfx, {"ann": "member"}, name="Restricted"),
        *(_ent(org, sfx, f"q_{i}", f"Open q {i}", f"quokka {SECTION}") for i in range(205)),
    ]
    if hidden:
        out += [
            _ent(
                org,
                sfx,
                f"loose_{i:02d}",
                f"Loose {i}",
                "quokka quokka",
                scope="private",
                project=None,
            )
            for i in range(30)
        ]
    out.append(_ent(org, sfx, "in_p2", "In p2", "quokka quokka quokka", scope="private"))
    return out


async def test_rows_a_restricted_key_may_not_read_take_no_private_share(engine):
    """Pair: ann's key restricted to project p2 may not read her private memories that have no
    project, though they carry her access lexeme. They must not use up the private arm's reads
    (``scan_limit`` 10): her private memory in p2 is found, and her pages (and whether the lane
    says it cut anything) are those of the org where the others do not exist."""
    pipeline = SearchSettings(scan_limit=10)
    pages = {}
    for hidden in (True, False):
        org, sfx = "org_restr_" + secrets.token_hex(4), secrets.token_hex(3)
        listed = await import_counted(
            engine, org, _restricted_world(org, sfx, hidden=hidden), ["quokka"]
        )
        assert listed == {"quokka"}
        pages[hidden] = await search_as(
            engine,
            f"user_ann_{sfx}",
            SearchRequest(query="quokka", limit=50),
            key_projects=["p2"],
            pipeline=pipeline,
        )
    assert "in_p2" in {r.id for r in pages[True].results}
    assert not {r.id for r in pages[True].results if r.id.startswith("loose_")}
    assert [(r.id, r.score) for r in pages[True].results] == [
        (r.id, r.score) for r in pages[False].results
    ]
    assert pages[True].filters["candidates_capped"] == pages[False].filters["candidates_capped"]
