"""Search word statistics by audience (issue 12; app/repo/term_stats.py, app/domain/terms.py).

- the refresh counts exactly the project- and org-scoped memories and current passages, per
  audience; private memories never;
- a reader's weights come from the audiences it reads only: hidden documents full of a query's
  words (another project's, private ones, org-scoped ones behind a restricted key) change
  nothing it sees, byte for byte; two readers who read the same audiences see the same ranks;
- a write that changes or removes a counted row marks its audience not fresh in the same
  transaction (its readers fall back to the fixed weights), others stay fresh; a refresh
  restores them; a write and a refresh of the same org take turns (both orders tested).
"""

from __future__ import annotations

import asyncio
import json
import secrets

from sqlalchemy import text

from app.domain import terms
from app.domain.search import SearchSettings, build_query
from app.repo import term_stats
from app.repo.readers import reader_by_key
from tests.builders import (
    audience_freshness,
    hidden_stuffing,
    import_dicts,
    make_key,
    memory_record,
    org_records,
)
from tests.team import Team, call


def _org(org: str, sfx: str, users: dict[str, str]) -> list[dict]:
    return org_records(org, sfx, users, name="Stats")


def _ent(org: str, sfx: str, id_: str, name: str, content: str, **extra) -> dict:
    return memory_record(org, sfx, id_, name, content, type="note", **extra)


def _world(org: str, sfx: str, *, stuffed: bool, org_stuffed: bool = True) -> list[dict]:
    out = [
        *_org(org, sfx, {"ann": "member", "cat": "member", "bob": "member"}),
        {"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "contributor"},
        _ent(org, sfx, "v_one", "Kelp forests", "Kelp forests grow in cold water near coasts."),
        _ent(org, sfx, "v_two", "Coral", "Coral reefs grow in warm water; kelp is rare there."),
        _ent(org, sfx, "v_three", "Tides", "Tides move water along coasts twice a day."),
        _ent(org, sfx, "v_four", "Harbours", "Boats in harbours wait for the tide and the water."),
        _ent(org, sfx, "o_one", "Org kelp", "Kelp and water for every member.", scope="org"),
    ]
    if stuffed:  # another project's, private ones, and org-scoped ones: full of the query words
        stuffing = "kelp forests cold water coasts grow tides " * 40
        out += hidden_stuffing(org, sfx, stuffing, type="note")
    if stuffed and org_stuffed:
        out += [
            _ent(org, sfx, f"ho_{i}", "Kelp tides", stuffing, scope="org", owner="bob")
            for i in range(10)
        ]
    return out


QUERIES = ("kelp", "Where do kelp forests grow in cold water?", "water coasts", "tides boats")


async def _search(client, key: str, **body) -> dict:
    r = await call(client, "POST", "/api/search", key, json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def _weights(engine, key: str, query: str):
    """(the query's (word, weight) pairs, its BM25 constants), as search weighs them."""
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
        assert reader is not None
        q = await build_query(conn, reader, query, SearchSettings())
        return q.weighted, q.scoring


async def test_the_refresh_counts_each_audience_never_a_private_memory(engine):
    sfx, org = secrets.token_hex(3), "org_st_" + secrets.token_hex(4)
    await import_dicts(engine, _world(org, sfx, stuffed=True))
    assert await term_stats.refresh_orgs(engine, [org]) == {org: (3, 4 + 30 + 11)}
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT a.audience, a.documents, s.df FROM term_audiences a"
                " LEFT JOIN term_stats s ON s.org_id = a.org_id AND s.audience = a.audience"
                "  AND s.lexeme = 'kelp'"
                " WHERE a.org_id = :o ORDER BY 1"
            ),
            {"o": org},
        )
        got = {r.audience: (r.documents, r.df) for r in rows}
    # '*': o_one and the 10 org-scoped stuffed ones; p1: the 30 hidden; p2: the 4 visible
    assert got == {"*": (11, 11), "p1": (30, 30), "p2": (4, 2)}


async def test_hidden_documents_full_of_the_query_words_change_no_counted_weight(engine, client):
    """No leak through ranking (§2, §8) with counted statistics: an org where 50 memories the
    reader cannot read (another project's, private ones, and, behind a key restricted to a
    project, org-scoped ones) are stuffed with the query's words answers that reader byte for
    byte as the same org without them. The counts are in use (not the fallback)."""
    answers: dict[str, list[str]] = {}
    for world in ("hidden", "hidden_and_org", "none"):
        sfx, org = secrets.token_hex(3), "org_st_" + secrets.token_hex(4)
        stuffed = world != "none"
        await import_dicts(
            engine, _world(org, sfx, stuffed=stuffed, org_stuffed=world == "hidden_and_org")
        )
        await term_stats.refresh_orgs(engine, [org])
        cat = await make_key(engine, f"user_cat_{sfx}")  # reads p2 and the org's memories
        ann_p2 = await make_key(engine, f"user_ann_{sfx}", projects=["p2"])  # p2 only
        for key in (cat, ann_p2):
            words, scoring = await _weights(engine, key, "kelp water")
            assert scoring.avg_length != 100.0  # counted statistics, not the fallback
            assert dict(words)["kelp"] != terms.weight("kelp")
        for name, key in (("cat", cat), ("ann_p2", ann_p2)):
            answers[f"{world}:{name}"] = [
                json.dumps(await _search(client, key, query=q, limit=50)) for q in QUERIES
            ]
        bob = await make_key(engine, f"user_bob_{sfx}")  # reads p1: its weights do change
        seen = await _search(client, bob, query="kelp", limit=50)
        assert any(r["id"].startswith("h_") for r in seen["results"]) == stuffed
    # another project's and private memories: hidden from both readers
    assert answers["hidden:cat"] == answers["none:cat"]
    assert answers["hidden:ann_p2"] == answers["none:ann_p2"]
    # org-scoped ones too, from a key restricted to a project
    assert answers["hidden_and_org:ann_p2"] == answers["none:ann_p2"]
    assert answers["hidden_and_org:cat"] != answers["none:cat"]  # cat reads them: they count


async def test_two_readers_of_the_same_audiences_see_the_same_ranks(engine, client):
    """Weights depend on the audiences a reader reads, nothing else: two members reading the
    same projects get byte-identical answers; a reader of one more project gets other weights."""
    sfx, org = secrets.token_hex(3), "org_st_" + secrets.token_hex(4)
    await import_dicts(engine, _world(org, sfx, stuffed=True))
    await term_stats.refresh_orgs(engine, [org])
    cat = await make_key(engine, f"user_cat_{sfx}")
    bob = await make_key(engine, f"user_bob_{sfx}")
    ann_p2 = await make_key(engine, f"user_ann_{sfx}", projects=["p2"])
    cat_p2 = await make_key(engine, f"user_cat_{sfx}", projects=["p2"])
    for q in QUERIES:
        assert await _search(client, ann_p2, query=q, limit=50) == await _search(
            client, cat_p2, query=q, limit=50
        )
    assert (await _weights(engine, cat, "kelp"))[0] != (await _weights(engine, bob, "kelp"))[0]
    assert (await _weights(engine, cat, "kelp"))[0] != (await _weights(engine, cat_p2, "kelp"))[0]


_fresh = audience_freshness


async def test_a_write_to_a_counted_row_retires_its_audience_until_a_refresh(engine, client):
    t = await Team().load(engine)
    every = {"p1": True, "p2": True, "p3": True, "*": True}

    async def refresh() -> None:
        await term_stats.refresh_orgs(engine, [t.org])
        assert await _fresh(engine, t.org) == every  # an audience with no memory: no row

    await refresh()
    ann, own, bob = [await t.key(engine, n) for n in ("ann", "own", "bob")]
    own_p2 = await t.key(engine, "own", projects=["p2"])

    async def patch(key: str, id_: str, **body) -> None:
        r = await call(client, "PATCH", f"/api/entities/{id_}", key, json=body)
        assert r.status_code == 200, r.text

    # what no counted row changes retires nothing: metadata, lifecycle, a private memory
    await patch(ann, "n1", metadata={"tag": "x"})
    await patch(ann, "mine", content="Private words change no statistic.")
    await patch(bob, "shared", content="Neither do a private memory's in a project.")
    assert await _fresh(engine, t.org) == every

    await patch(ann, "n1", content="A new body for n1.")  # p1's counts are stale now
    assert await _fresh(engine, t.org) == {**every, "p1": False}
    ann_words, ann_scoring = await _weights(engine, ann, "body")
    fallback = [("body", terms.weight("body"))]
    assert ann_words == fallback and ann_scoring.avg_length == 100.0  # the fallback
    p2_words, _ = await _weights(engine, own_p2, "body")  # reads p2 only: still counted
    assert p2_words != fallback
    await refresh()

    await patch(ann, "n2", scope="private")  # it leaves p1's audience
    assert await _fresh(engine, t.org) == {**every, "p1": False}
    await refresh()
    await patch(own, "orgnote", name="Renamed org note")
    assert await _fresh(engine, t.org) == {**every, "*": False}
    await refresh()
    await patch(own, "pub", project="p1")  # moved from p2 to p1: p2 counted it, p1 did not
    assert await _fresh(engine, t.org) == {**every, "p2": False, "p1": False}
    del every["p2"]  # p2 holds no memory now
    await refresh()
    r = await call(client, "DELETE", "/api/entities/hid", bob)
    assert r.status_code == 204, r.text
    assert await _fresh(engine, t.org) == {**every, "p3": False}
    del every["p3"]
    await refresh()

    # a new memory is counted from the next refresh: nothing retired
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"id": "n9", "type": "note", "name": "New", "content": "Fresh.", "project": "p1"},
    )
    assert r.status_code in (200, 201), r.text
    assert await _fresh(engine, t.org) == every
    # ... and, being in none of the counts, it retires nothing when edited or deleted (a
    # new-user trial: every such write sent its project's readers to the fallback weights)
    await patch(ann, "n9", content="A new body for a memory no count holds.")
    await patch(ann, "n9", name="Renamed")
    assert await _fresh(engine, t.org) == every
    r = await call(client, "DELETE", "/api/entities/n9", ann)
    assert r.status_code == 204, r.text
    assert await _fresh(engine, t.org) == every
    # while a memory the count holds still retires its audience, edited or deleted
    await patch(ann, "n1", content="Counted, so its audience goes stale.")
    assert await _fresh(engine, t.org) == {**every, "p1": False}


async def test_a_memory_made_during_a_refresh_retires_its_audience_if_the_count_may_hold_it(
    engine,
):
    """The refresh's own count may hold a memory created after the previous count: while the
    audience is armed, any write retires it (disarms it); once stamped, a memory whose creating
    transaction the count's snapshot saw retires it, one created later does not."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])

    async def create(id_: str) -> None:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO entities (org_id, id, type, name, content, project_id, scope,"
                    " owner_id, lifecycle, metadata, revision)"
                    " SELECT org_id, :id, type, 'New', 'New words.', project_id, scope,"
                    " owner_id, lifecycle, metadata, 1"
                    " FROM entities WHERE org_id = :o AND id = 'n1'"
                ),
                {"o": t.org, "id": id_},
            )

    async def retire(id_: str) -> None:
        async with engine.begin() as conn:
            await term_stats.retire(conn, org_id=t.org, audiences=["p1"], entity_id=id_)

    await create("late1")
    async with engine.connect() as refreshing:
        token = await term_stats.arm(refreshing, org_id=t.org)
        snapshot = await term_stats.count(refreshing, org_id=t.org)  # holds late1
        await retire("late1")  # armed: disarmed, whatever the previous count held
        await term_stats.stamp(refreshing, org_id=t.org, token=token, snapshot=snapshot)
    assert (await _fresh(engine, t.org))["p1"] is False
    await term_stats.refresh_orgs(engine, [t.org])  # counts late1
    await retire("late1")  # created before that count: retires
    assert (await _fresh(engine, t.org))["p1"] is False
    await term_stats.refresh_orgs(engine, [t.org])
    await create("late2")  # after the count: in none of its counts
    await retire("late2")
    assert (await _fresh(engine, t.org))["p1"] is True
    # what decides is the count's snapshot, not a clock: a memory created later whose
    # created_at says otherwise (a clock stepped back, a loader writing it) still retires nothing,
    # and one the count saw retires whatever its created_at says
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE entities SET created_at = '2001-01-01' WHERE org_id = :o AND id = 'late2'"
            ),
            {"o": t.org},
        )
    await retire("late2")
    assert (await _fresh(engine, t.org))["p1"] is True
    await retire("gone")  # a memory no longer stored: retires (nothing says it was not counted)
    assert (await _fresh(engine, t.org))["p1"] is False


async def test_a_write_during_a_refresh_is_not_held_back_and_keeps_its_audience_stale(engine):
    """A write that changes a counted row while a refresh counts neither waits for the count
    (the refresh holds no lock then: a write used to wait for it and answer 503 past the
    statement timeout) nor lets the count, which may have missed it, be stamped fresh: its
    audience is disarmed, the others are stamped."""
    t = await Team().load(engine)
    async with engine.connect() as refreshing, engine.connect() as writing:
        token = await term_stats.arm(refreshing, org_id=t.org)
        await term_stats.count(refreshing, org_id=t.org)
        async with writing.begin():  # after the count, before the stamp: nothing to wait for
            await writing.execute(
                text("UPDATE entities SET content = 'zebra' WHERE org_id = :o AND id = 'n1'"),
                {"o": t.org},
            )
            # a guard, not a time: a retire blocked by the refresh would never end here
            await asyncio.wait_for(
                term_stats.retire(writing, org_id=t.org, audiences=["p1"]), timeout=30
            )
        await term_stats.stamp(refreshing, org_id=t.org, token=token)
    assert await _fresh(engine, t.org) == {"p1": False, "p2": True, "p3": True, "*": True}


async def test_a_refresh_waits_for_a_write_that_retired_until_it_commits(engine):
    """The other order: a write that retired (its change not yet committed) holds the lock
    shared; the refresh's arming waits for it, so the count sees the committed change and may
    stamp it fresh."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    async with engine.connect() as writing, engine.connect() as refreshing:
        await writing.begin()
        await writing.execute(
            text("UPDATE entities SET content = 'zebra' WHERE org_id = :o AND id = 'n1'"),
            {"o": t.org},
        )
        await term_stats.retire(writing, org_id=t.org, audiences=["p1"])
        refresh = asyncio.create_task(term_stats.refresh(refreshing, org_id=t.org))
        await asyncio.sleep(0.3)
        assert not refresh.done()  # the arming polls until the write's transaction ends
        await writing.commit()
        await asyncio.wait_for(refresh, timeout=10)
    assert await _fresh(engine, t.org) == {"p1": True, "p2": True, "p3": True, "*": True}
    async with engine.connect() as conn:
        df = await conn.execute(
            text("SELECT df FROM term_stats WHERE org_id = :o AND lexeme = 'zebra'"),
            {"o": t.org},
        )
        assert df.scalar() == 1  # the committed change is counted


async def _team_with_n1(engine, assignment: str) -> Team:
    """The team world with memory n1 changed by ``assignment`` (a fixed SQL ``SET`` clause of
    the test), then counted."""
    t = await Team().load(engine)
    async with engine.begin() as conn:
        await conn.execute(
            text(f"UPDATE entities SET {assignment} WHERE org_id = :o AND id = 'n1'"),
            {"o": t.org},
        )
    await term_stats.refresh_orgs(engine, [t.org])
    return t


async def test_overlapping_refreshes_never_stamp_a_count_that_missed_a_write(engine):
    """Adversarial review, 2026-11-30: refresh A counts, a write makes n1 private (p1 retired),
    refresh B arms again; A's stamp must not stamp its pre-write count of p1 fresh. B's arming
    takes every audience over, so A stamps none; B counts after the write and stamps all."""
    t = await _team_with_n1(engine, "content = 'zebra'")
    zebra = "SELECT coalesce(sum(df), 0) FROM term_stats WHERE org_id = :o AND lexeme = 'zebra'"
    async with engine.connect() as a, engine.connect() as b, engine.connect() as w:
        token_a = await term_stats.arm(a, org_id=t.org)
        await term_stats.count(a, org_id=t.org)
        async with w.begin():
            await w.execute(
                text(
                    "UPDATE entities SET scope = 'private', project_id = NULL"
                    " WHERE org_id = :o AND id = 'n1'"
                ),
                {"o": t.org},
            )
            await term_stats.retire(w, org_id=t.org, audiences=["p1"])
        token_b = await term_stats.arm(b, org_id=t.org)
        assert await term_stats.stamp(a, org_id=t.org, token=token_a) == (0, 0)
        assert (await _fresh(engine, t.org))["p1"] is False
        await term_stats.count(b, org_id=t.org)
        await term_stats.stamp(b, org_id=t.org, token=token_b)
    assert await _fresh(engine, t.org) == {"p1": True, "p2": True, "p3": True, "*": True}
    async with engine.connect() as conn:
        assert (await conn.execute(text(zebra), {"o": t.org})).scalar() == 0  # private now


async def test_a_stamp_never_waits_for_a_write_that_retires_two_audiences(engine):
    """Adversarial review: a write retiring p2 then p1 in one transaction while a stamp runs
    deadlocked with the stamp (which locked the armed rows in order). The stamp now skips a row
    a write holds: p2 is left to the write (not fresh), the rest stamped, no deadlock."""
    t = await Team().load(engine)
    async with engine.connect() as r, engine.connect() as w:
        token = await term_stats.arm(r, org_id=t.org)
        await term_stats.count(r, org_id=t.org)
        await w.begin()
        await term_stats.retire(w, org_id=t.org, audiences=["p2"])
        stamped = await asyncio.wait_for(term_stats.stamp(r, org_id=t.org, token=token), timeout=10)
        await term_stats.retire(w, org_id=t.org, audiences=["p1"])
        await w.commit()
    assert stamped[0] == 3  # p1, p3 and the org's audience; p2 skipped
    assert await _fresh(engine, t.org) == {"p1": False, "p2": False, "p3": True, "*": True}


async def test_a_write_never_queues_behind_a_refresh_waiting_for_a_long_write(engine):
    """Adversarial review: an arming that waited for the lock queued every new write of the org
    behind a long open write transaction. The arming now polls: a second write passes at once,
    and the refresh completes once the long write ends."""
    t = await Team().load(engine)
    async with engine.connect() as w1, engine.connect() as w2, engine.connect() as r:
        await w1.begin()
        await term_stats.retire(w1, org_id=t.org, audiences=["p1"])  # holds the lock shared
        refresh = asyncio.create_task(term_stats.refresh(r, org_id=t.org))
        await asyncio.sleep(0.3)
        async with w2.begin():
            await asyncio.wait_for(
                # a guard, not a time: queued behind the arming it would wait for w1 forever
                term_stats.retire(w2, org_id=t.org, audiences=["p2"]),
                timeout=30,
            )
        assert not refresh.done()
        await w1.commit()
        await asyncio.wait_for(refresh, timeout=10)
    assert await _fresh(engine, t.org) == {"p1": True, "p2": True, "p3": True, "*": True}


async def test_a_word_no_counted_document_holds_does_not_empty_the_query(engine, client):
    # With counts, a misspelt or unknown word weighs the most (df 0) and finds nothing; every
    # word being a way in, the query finds what its other words find.
    sfx, org = secrets.token_hex(3), "org_st_unheld_" + secrets.token_hex(4)
    await import_dicts(engine, _world(org, sfx, stuffed=False))
    await term_stats.refresh_orgs(engine, [org])
    key = await make_key(engine, f"user_ann_{sfx}")
    words, _ = await _weights(engine, key, "reefs xyzzyq")  # "reefs": in one body, no name
    assert dict(words)["xyzzyq"] > dict(words)["reefs"]
    alone = await _search(client, key, query="reefs")
    typo = await _search(client, key, query="reefs xyzzyq")
    assert [r["id"] for r in alone["results"]] == ["v_two"]
    assert [r["id"] for r in typo["results"]] == ["v_two"]
    assert typo["filters"]["word_weights"] == "counts"  # the response says which weights


async def test_a_created_xid_from_another_cluster_never_keeps_a_deleted_memory_counted(engine):
    # A dump restored into another cluster carries the old cluster's transaction ids, which may
    # lie ahead of every snapshot of the new one (an adversarial review): such a memory looks
    # unseen by every count, yet every count holds it. The count checks its own snapshot sees
    # the created_xid of each memory it counts; where one is not seen, the audience keeps no
    # snapshot, and deleting that memory retires it.
    t = await _team_with_n1(engine, "created_xid = '4000000000'")
    assert (await _fresh(engine, t.org))["p1"] is True
    async with engine.connect() as conn:
        kept = dict(
            (
                await conn.execute(
                    text(
                        "SELECT audience, counted_snapshot IS NOT NULL FROM term_audiences"
                        " WHERE org_id = :o"
                    ),
                    {"o": t.org},
                )
            ).all()
        )
    assert kept == {"p1": False, "p2": True, "p3": True, "*": True}  # only p1 lost its own
    async with engine.begin() as conn:
        await term_stats.retire(conn, org_id=t.org, audiences=["p1"], entity_id="n1")
    assert (await _fresh(engine, t.org))["p1"] is False
    async with engine.begin() as conn:  # a memory not stored: retired all the same
        await term_stats.retire(conn, org_id=t.org, audiences=["p2"], entity_id="no_such")
    assert (await _fresh(engine, t.org))["p2"] is False


async def _stored(engine, org: str) -> dict[tuple[str, str], tuple[int, str]]:
    """Every term_stats row of ``org``: (lexeme, audience) -> (df, the xmin that wrote it)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT lexeme, audience, df, CAST(xmin AS text) AS x FROM term_stats"
                " WHERE org_id = :o"
            ),
            {"o": org},
        )
        return {(r.lexeme, r.audience): (r.df, r.x) for r in rows}


async def test_a_recount_writes_only_the_counts_that_changed_and_equals_a_full_one(engine):
    """The stamp holds its row locks while it writes (a write's retire waits for them), so it
    writes only the lexeme rows whose counts changed: after one edit in p1, every row of the
    other audiences is the row written before, and what is stored equals a count from scratch
    (a breaker's trial: a stamp that rewrote the PEP org's 57k rows made writes fail 503)."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    before = await _stored(engine, t.org)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE entities SET content = 'zebra quagga' WHERE org_id = :o AND id = 'n1'"),
            {"o": t.org},
        )
        await term_stats.retire(conn, org_id=t.org, audiences=["p1"])
    await term_stats.refresh_orgs(engine, [t.org])
    after = await _stored(engine, t.org)

    rewritten = {k for k in after if k not in before or after[k] != before[k]}
    assert {("zebra", "p1"), ("quagga", "p1")} <= rewritten
    assert {audience for _, audience in rewritten} == {"p1"}  # nothing else was rewritten
    kept_in_p1 = {k for k in after if k[1] == "p1" and k not in rewritten}
    assert kept_in_p1  # the words of p1's other memories: counts unchanged, rows untouched

    # the same counts as a recount from nothing
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM term_stats WHERE org_id = :o"), {"o": t.org})
        await conn.execute(
            text("UPDATE term_audiences SET fresh = false WHERE org_id = :o"), {"o": t.org}
        )
    await term_stats.refresh_orgs(engine, [t.org])
    scratch = await _stored(engine, t.org)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in scratch.items()}
    assert await _fresh(engine, t.org) == {"p1": True, "p2": True, "p3": True, "*": True}
