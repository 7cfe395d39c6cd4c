"""``search`` (contract §8, issue 4): fusion by hand, the read rule as pairs, paging, passages,
lifecycle, bounds, the capped lanes, REST and MCP, and the PEP corpus."""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets

import pytest
from mcp import Client
from sqlalchemy import text

from app.core import policy
from app.core.db import make_engine, with_database
from app.core.migrations import upgrade
from app.core.settings import Settings
from app.domain.schemas import SearchRequest
from app.domain.search import SearchSettings, build_query, search
from app.domain.search.focus import best_spans, cover_order
from app.domain.search.query import ask_positions
from app.domain.spans import HARD_MAX
from app.mcp.server import build_mcp, fixed_key
from app.repo import term_stats
from app.repo.readers import reader_by_user
from app.repo.search import Span
from tests.builders import (
    admin_sql,
    hidden_stuffing,
    import_counted,
    import_dicts,
    make_key,
    memory_record,
    org_records,
    search_as,
)
from tests.team import Team, call

SECTION = " ".join(f"filler{i}" for i in range(170))  # ~1400 characters of unmatched words
DEFAULTS = SearchSettings()


def _org(sfx: str, *, org: str, users: dict[str, str]) -> list[dict]:
    return org_records(org, sfx, users, projects=False)


_ent = memory_record


async def _post(client, key: str, body: dict, path: str = "/api/search"):
    return await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})


async def _search(client, key: str, **body) -> dict:
    r = await _post(client, key, body)
    assert r.status_code == 200, r.text
    return r.json()


# --- reciprocal rank fusion, computed by hand ---------------------------------------------------


async def test_rrf_order_matches_the_hand_computation(engine, client):
    sfx, org = secrets.token_hex(3), "org_rrf_" + secrets.token_hex(4)
    records = _org(sfx, org=org, users={"ann": "member"})
    records += [
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        # exact lane: id equal to the query (tier 0), then names starting with it, bytewise:
        # "alpha plan" < "alphabet soup" (a space sorts before "b")
        _ent(org, sfx, "alpha", "Zeta record", "nothing relevant here"),
        _ent(org, sfx, "e_soup", "Alphabet soup", "letters and noodles"),
        # full-text lane: the name (weight A) and three body hits rank first, then three body
        # hits alone, then one body hit ("alphabet" is another lexeme: no full-text match)
        _ent(org, sfx, "e_plan", "Alpha plan", "alpha alpha alpha"),
        _ent(org, sfx, "e_body2", "Report two", "alpha beta alpha gamma alpha"),
        _ent(org, sfx, "e_body1", "Report one", "the alpha result"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")

    got = await _search(client, key, query="alpha")
    lanes = {r["id"]: r["metadata"]["match"] for r in got["results"]}
    expected_lanes = {
        "alpha": (None, 1),
        "e_plan": (1, 2),
        "e_soup": (None, 3),
        "e_body2": (2, None),
        "e_body1": (3, None),
    }
    assert {i: (m["fulltext_rank"], m["exact_rank"]) for i, m in lanes.items()} == expected_lanes

    k = 60
    by_hand = {
        "e_plan": 1 / (k + 1) + 1 / (k + 2),
        "alpha": 1 / (k + 1),
        "e_body2": 1 / (k + 2),
        "e_soup": 1 / (k + 3),  # ties with e_body1: the exact lane's hit first (fused_order)
        "e_body1": 1 / (k + 3),
    }
    assert [r["id"] for r in got["results"]] == ["e_plan", "alpha", "e_body2", "e_soup", "e_body1"]
    assert {r["id"]: r["score"] for r in got["results"]} == {
        i: round(s, 6) for i, s in by_hand.items()
    }
    assert got["filters"]["rrf_k"] == DEFAULTS.rrf_k == k
    assert got["total"] == 5 and got["has_more"] is False

    # the exact lane is case-insensitive on names, and matches an id as sent or lower-cased
    upper = await _search(client, key, query="ALPHA")
    assert [r["id"] for r in upper["results"]] == [r["id"] for r in got["results"]]
    assert (await _search(client, key, query="e_body1"))["results"][0]["id"] == "e_body1"


async def test_the_memory_an_id_names_comes_before_a_note_that_mentions_it(engine, client):
    """A note whose body holds a memory's id ranks 1st in the full-text lane for that id, the
    memory 1st in the exact lane: equal scores, and by id alone the note came first (a new-user
    trial). Of equal scores the exact lane's hit goes first."""
    sfx, org = secrets.token_hex(3), "org_idtie_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "zz_target", "Unnamed record", "nothing of the query here"),
        _ent(org, sfx, "a_note", "Meeting notes", "Follow up on zz_target next week."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="zz_target")
    assert [r["id"] for r in got["results"]] == ["zz_target", "a_note"]
    first, second = got["results"]
    assert first["score"] == second["score"]
    assert first["metadata"]["match"]["exact_rank"] == 1
    # invisible characters at the query's ends are no part of it, in the exact lane too (a
    # trial: "\ufeffzz_target" found only the note)
    for wrapped in ("\ufeffzz_target", "zz_target\u200b", "\u2066zz_target\ufe0f\u2069"):
        again = await _search(client, key, query=wrapped)
        assert [r["id"] for r in again["results"]] == ["zz_target", "a_note"], repr(wrapped)
        assert again["filters"]["query"] == "zz_target"


# --- the read rule: allowed / denied pairs against a control org -------------------------------

WORD = "zephyr"


def _rules_world(org: str, sfx: str, omit: str | None, common: bool = False) -> list[dict]:
    out = _org(
        sfx, org=org, users={"ann": "member", "bob": "member", "dan": "admin", "eve": "member"}
    )
    out += [
        {"kind": "project", "id": "p1", "org": org, "name": "Private", "visibility": "private"},
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        {"kind": "member", "project": "p1", "user": f"user_ann_{sfx}", "role": "contributor"},
        {"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "viewer"},
    ]
    long_body = f"## First\n\n{SECTION}\n\n## Second\n\n{SECTION} {WORD} {WORD}\n"
    entities = [
        # seven readable matches, of increasing strength
        *(
            _ent(org, sfx, f"open_{i}", f"Open {i}", f"{WORD} " * (i + 1) + "tail")
            for i in range(7)
        ),
        _ent(
            org, sfx, "priv_in_p1", f"Private {WORD}", f"{WORD} " * 5, scope="private", project="p1"
        ),
        _ent(org, sfx, "priv_loose", f"Loose {WORD}", f"{WORD} " * 3, scope="private"),
        _ent(org, sfx, "p1_doc", f"Project {WORD}", f"{WORD} " * 4, project="p1"),
        _ent(org, sfx, "org_note", f"Org {WORD}", f"{WORD} " * 2, scope="org", type="note"),
        _ent(
            org,
            sfx,
            "long_priv",
            "Long private",
            long_body,
            scope="private",
            project="p1",
            type="document",
        ),
    ]
    out += [e for e in entities if e["id"] != omit]
    if common:  # WORD in more documents than an impact list holds: it takes the lists
        out += [
            _ent(org, sfx, f"common_{i}", f"Common {i}", f"{WORD} {SECTION}") for i in range(210)
        ]
    if omit != "priv_loose":
        out.append({"kind": "grant", "entity": "priv_loose", "user": f"user_eve_{sfx}"})
    return out


async def _rules(engine, omit: str | None, common: bool = False) -> dict[str, str]:
    org, sfx = "org_srules_" + secrets.token_hex(4), secrets.token_hex(3)
    await import_dicts(engine, _rules_world(org, sfx, omit, common))
    if common:
        await term_stats.refresh_orgs(engine, [org])
        async with engine.connect() as conn:
            listed = await conn.scalar(
                text("SELECT count(*) FROM term_impact_lists WHERE org_id = :o AND lexeme = :w"),
                {"o": org, "w": WORD},
            )
        assert listed, "the world's word must take the impact lists"
    keys = {n: await make_key(engine, f"user_{n}_{sfx}") for n in ("ann", "bob", "dan", "eve")}
    keys["ann@p1"] = await make_key(engine, f"user_ann_{sfx}", projects=["p1"])
    keys["bob@p1"] = await make_key(engine, f"user_bob_{sfx}", projects=["p1"])
    return keys


async def _transcript(client, key: str) -> list[dict]:
    """Every page a reader can turn (limit 2), a whole list, and the exact lane's answers."""
    pages: list[dict] = []
    for offset in range(0, 16, 2):
        pages.append(await _search(client, key, query=WORD, limit=2, offset=offset))
    pages.append(await _search(client, key, query=WORD, limit=50))
    pages.append(await _search(client, key, query="priv", limit=50))
    pages.append(await _search(client, key, query="priv_in_p1"))
    pages.append(await _search(client, key, query=WORD, project="p1", limit=50))
    return pages


def _ids(transcript: list[dict]) -> set[str]:
    return {
        i
        for page in transcript
        for r in page["results"]
        for i in (r["id"], r["parent_entity_id"], *r["metadata"].get("collapsed", []))
        if i
    }


PAIRS = [
    ("priv_in_p1", ("ann",), ("bob", "dan", "eve"), "private in a project: owner only"),
    ("priv_loose", ("ann", "eve"), ("bob", "dan", "ann@p1"), "private, no project: owner, grant"),
    ("org_note", ("bob", "eve"), ("bob@p1",), "org scope vs a project-restricted key"),
    ("p1_doc", ("bob", "dan", "bob@p1"), ("eve",), "private project: members and org admins"),
    ("long_priv", ("ann",), ("bob", "dan"), "a passage is exactly as readable as its parent"),
]


@pytest.mark.parametrize("row, allowed, denied, why", PAIRS[:2], ids=[p[0] for p in PAIRS[:2]])
async def test_read_rule_pairs_of_private_memories_through_impact_lists(
    engine, client, row, allowed, denied, why
):
    """The same pairs when the word is common enough to take the impact lists: private
    memories, which no list holds, reach their owner and grantees through the private arm
    (own, then granted: two index ranges), and nobody else."""
    full = await _rules(engine, omit=None, common=True)
    control = await _rules(engine, omit=row, common=True)
    for reader in allowed:
        assert row in _ids(await _transcript(client, full[reader])), (why, reader)
    for reader in denied:
        got = await _transcript(client, full[reader])
        want = await _transcript(client, control[reader])
        assert json.dumps(got) == json.dumps(want), (why, reader)
        assert row not in _ids(got), (why, reader)


@pytest.mark.parametrize("row, allowed, denied, why", PAIRS, ids=[p[0] for p in PAIRS])
async def test_read_rule_pairs(engine, client, row, allowed, denied, why):
    full = await _rules(engine, omit=None)
    control = await _rules(engine, omit=row)
    for reader in allowed:
        assert row in _ids(await _transcript(client, full[reader])), (why, reader)
    for reader in denied:
        got = await _transcript(client, full[reader])
        want = await _transcript(client, control[reader])
        # byte-identical to an org where the row does not exist: same pages, ranks, scores,
        # has_more; nothing counts, ranks around or hints at the hidden row
        assert json.dumps(got) == json.dumps(want), (why, reader)
        assert row not in _ids(got), (why, reader)


def _heron_world(org: str, sfx: str, *, hidden: bool) -> list[dict]:
    """``heron`` in 150 memories of the open project p2 and, written after them, in ann's 120
    private notes and 3 stronger ones; (``hidden``) also in 60 memories of the private project
    p1, which ann does not read: the org then holds it in 210 counted documents, more than an
    impact list keeps, ann's audiences in 150."""
    out = org_records(org, sfx, {"ann": "member", "bob": "member"})
    out.append({"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "owner"})
    out += [_ent(org, sfx, f"pub_{i:03d}", f"Pub {i}", f"heron {SECTION}") for i in range(150)]
    if hidden:
        out += [
            _ent(org, sfx, f"h_{i}", f"H {i}", f"heron {SECTION}", project="p1", owner="bob")
            for i in range(60)
        ]
    out += [
        _ent(org, sfx, f"weak_{i:03d}", f"Weak {i}", f"heron {SECTION}", scope="private")
        for i in range(120)
    ]
    out += [
        _ent(
            org, sfx, f"strong_{i}", f"Strong {i}", "heron heron heron heron egret", scope="private"
        )
        for i in range(3)
    ]
    return out


async def test_rows_a_reader_cannot_read_never_decide_how_a_word_is_searched(engine):
    """Pair: whether a word is read from the impact lists or scanned follows the reader's own
    counts, not the org's: 60 memories of a project ann does not read, which tip the org's count
    of ``heron`` over a list's length, change none of ann's pages, nor whether the lane says it
    cut anything."""
    got = {}
    for hidden in (True, False):
        org, sfx = "org_heron_" + secrets.token_hex(4), secrets.token_hex(3)
        listed = await import_counted(engine, org, _heron_world(org, sfx, hidden=hidden), ["heron"])
        assert bool(listed) == hidden, "only the org with the hidden rows has lists"
        got[hidden] = [
            await search_as(engine, f"user_ann_{sfx}", SearchRequest(query=q, limit=5, offset=o))
            for q in ("heron", "heron egret")
            for o in (0, 150)
        ]
    for with_hidden, without in zip(got[True], got[False], strict=True):
        assert [(r.id, r.score) for r in with_hidden.results] == [
            (r.id, r.score) for r in without.results
        ]
        assert with_hidden.filters["candidates_capped"] == without.filters["candidates_capped"]
        assert with_hidden.filters["words"] == without.filters["words"]


async def test_a_scanned_word_keeps_its_strongest_matches_wherever_rows_lie(engine):
    """A word without impact lists is found by a scan that a GIN index gives in the table's
    physical order: with more readable matches than a scan keeps, the strongest are kept
    (highest contribution), not the first met. Three strong matches written after 250 weak
    ones come first, and the lane says the bound cut the rest."""
    org, sfx = "org_scan_" + secrets.token_hex(4), secrets.token_hex(3)
    records = org_records(org, sfx, {"ann": "member"})
    records += [
        _ent(org, sfx, f"weak_{i:03d}", f"Weak {i}", f"osprey {SECTION}") for i in range(250)
    ]
    records += [
        _ent(org, sfx, f"strong_{i}", f"Strong {i}", "osprey osprey osprey osprey")
        for i in range(3)
    ]
    await import_dicts(engine, records)  # not counted: no impact lists, the word is scanned
    got = await search_as(engine, f"user_ann_{sfx}", SearchRequest(query="osprey", limit=5))
    assert {r.id for r in got.results[:3]} == {"strong_0", "strong_1", "strong_2"}
    assert got.filters["candidates_capped"] is True


async def test_paging_has_no_gaps_for_a_reader_who_cannot_see_some_matches(engine, client):
    keys = await _rules(engine, omit=None)
    everything = (await _search(client, keys["eve"], query=WORD, limit=50))["results"]
    assert len(everything) == 9  # 7 open, the org note, the granted loose one; 3 are hidden
    seen: list[str] = []
    for offset in range(0, 12, 2):
        page = await _search(client, keys["eve"], query=WORD, limit=2, offset=offset)
        assert page["total"] == len(page["results"]) <= 2
        assert page["has_more"] == (offset + 2 < len(everything))
        seen += [r["id"] for r in page["results"]]
    assert seen == [r["id"] for r in everything]  # no gap, no duplicate
    assert page["results"] == [] and page["has_more"] is False


# --- passages, folding, lifecycle, bounds -------------------------------------------------------


async def test_passage_hits_carry_widen_with_and_fold_with_their_memory(engine, client):
    keys = await _rules(engine, omit=None)
    got = await _search(client, keys["ann"], query=WORD, limit=50, content_max_chars=40)
    passages = [r for r in got["results"] if r["type"] == "passage"]
    assert passages, got
    hit = passages[0]
    assert hit["parent_entity_id"] == "long_priv"
    assert hit["widen_with"] == "fetch_slice"
    assert isinstance(hit["passage_index"], int)
    assert hit["metadata"]["parent_type"] == "document"
    assert hit["content"].startswith("## Second") and len(hit["content"]) <= 43
    assert hit["metadata"]["content_truncated"] is True
    # one result per memory: the memory and its passages never both crowd a page
    memories = [r["parent_entity_id"] or r["id"] for r in got["results"]]
    assert len(memories) == len(set(memories))
    # the passage can be widened by fetch_slice, as its parent for a citation
    r = await _post(client, keys["ann"], {"entity_id": hit["id"]}, "/api/search/slice")
    assert r.status_code == 200 and r.json()["parent_id"] == "long_priv"


async def test_a_memory_and_its_passage_both_matching_keep_the_better_and_say_so(engine, client):
    sfx, org = secrets.token_hex(3), "org_fold_" + secrets.token_hex(4)
    body = f"## One\n\n{SECTION}\n\n## Two\n\n{SECTION} quokka\n"
    records = [
        *_org(sfx, org=org, users={"ann": "member"}),
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        _ent(org, sfx, "doc_q", "Quokka handbook", body, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="quokka")
    assert got["total"] == 1
    (only,) = got["results"]
    # the name (weight A) beats one word in a long span: the memory is kept, its passage folded
    assert only["id"] == "doc_q"
    (folded,) = only["metadata"]["collapsed"]
    assert folded.startswith("passage_")
    passage_only = await _search(client, key, query="quokka", types=["passage"])
    assert [r["id"] for r in passage_only["results"]] == [folded]


async def test_lifecycle_default_active_and_superseded_never_retired(engine, client):
    sfx, org = secrets.token_hex(3), "org_life_" + secrets.token_hex(4)
    records = [
        *_org(sfx, org=org, users={"ann": "member"}),
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        _ent(org, sfx, "d_active", "Wombat active", "wombat"),
        _ent(org, sfx, "d_super", "Wombat superseded", "wombat", lifecycle="superseded"),
        _ent(org, sfx, "d_retired", "Wombat retired", "wombat", lifecycle="retired"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    default = await _search(client, key, query="wombat")
    assert {r["id"]: r["lifecycle"] for r in default["results"]} == {
        "d_active": "active",
        "d_super": "superseded",
    }
    assert default["filters"]["lifecycle"] == ["active", "superseded"]
    active = await _search(client, key, query="wombat", lifecycle=["active", "retired"])
    assert [r["id"] for r in active["results"]] == ["d_active"]
    assert active["filters"]["lifecycle"] == ["active"]
    assert (await _search(client, key, query="d_retired"))["results"] == []
    r = await _post(client, key, {"query": "wombat", "lifecycle": ["retired"]})
    assert r.status_code == 400


async def test_bounds_are_clamped_and_malformed_input_refused(engine, client):
    keys = await _rules(engine, omit=None)
    key = keys["ann"]
    got = await _search(client, key, query=WORD, limit=500, offset=-3, content_max_chars=10**9)
    assert (got["limit"], got["offset"]) == (policy.SEARCH_LIMIT.high, 0)
    assert got["filters"]["content_max_chars"] == policy.PREVIEW_CHARS.high
    assert (await _search(client, key, query=WORD, limit=0))["limit"] == 1
    assert (await _search(client, key, query=WORD))["limit"] == policy.SEARCH_LIMIT.default
    for body in (
        {"query": "  "},
        {"query": "\u200b\u2066 \ufeff"},  # only invisible characters: as blank
        {"query": "\u3164\u115f \u034f\ufe0f\u0301"},  # fillers, lone marks: as blank
        {"query": "\u2800\x01\x7f"},  # the braille blank, control characters: as blank
        {"query": WORD, "types": ["bad type"]},
        {"query": WORD, "lifecycle": ["zombie"]},
        {"query": "x" * 2001},
    ):
        r = await _post(client, key, body)
        assert r.status_code == 400, body
        assert set(r.json()) == {"detail"}
    for body in ({"query": WORD, "limit": "3"}, {"query": 7}, {"query": WORD, "nope": 1}):
        assert (await _post(client, key, body)).status_code == 422, body
    assert (await client.post("/api/search", json={"query": WORD})).status_code == 401


async def test_capped_lanes_rank_a_bounded_deterministic_candidate_set(engine, client):
    sfx, org = secrets.token_hex(3), "org_cap_" + secrets.token_hex(4)
    records = [
        *_org(sfx, org=org, users={"ann": "member"}),
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        *(_ent(org, sfx, f"m_{i:02d}", f"Numbat {i}", "numbat " * (i % 5 + 1)) for i in range(12)),
    ]
    await import_dicts(engine, records)
    settings = Settings(search_candidate_cap=4)
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=f"user_ann_{sfx}", key_projects=None)
        assert reader is not None
        request = SearchRequest(query="numbat", limit=50)
        first = await search(conn, reader, request, settings=settings)
        again = await search(conn, reader, request, settings=settings)
        uncapped = await search(conn, reader, request)
    assert first == again
    assert first.filters["candidates_capped"] is True and first.filters["candidate_cap"] == 4
    ranked = [r for r in first.results if r.metadata["match"]["fulltext_rank"] is not None]
    assert len(ranked) == 4  # the full-text lane ranked 4 candidates, not 12
    assert uncapped.filters["candidates_capped"] is False and len(uncapped.results) == 12


# --- MCP: the same verb as a tool ----------------------------------------------------------------


async def test_the_search_tool_returns_what_rest_returns(engine, client):
    keys = await _rules(engine, omit=None)
    body = {"query": WORD, "limit": 3, "offset": 1}
    async with Client(build_mcp(lambda: engine, fixed_key(keys["bob"]))) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert tools["search"].annotations.read_only_hint is True
        assert "At most 3 retrieval rounds" in tools["search"].description
        result = await mcp.call_tool("search", body)
        blank = await mcp.call_tool("search", {"query": " "})
    assert not result.is_error
    assert result.structured_content == await _search(client, keys["bob"], **body)
    assert blank.is_error


# --- the PEP corpus -------------------------------------------------------------------------------


@pytest.mark.corpus
async def test_type_hints_on_the_pep_corpus(client, pep_corpus):
    typing = await _search(client, pep_corpus["user_typing_reader"], query="type hints")
    assert "pep_0484" in [r["id"] for r in typing["results"][:3]]
    outsider_pages = [
        await _search(
            client, pep_corpus["user_outsider"], query="type hints", limit=50, offset=offset
        )
        for offset in (0, 50, 100)
    ]
    seen = [r for page in outsider_pages for r in page["results"]]
    assert seen, "the outsider still finds the public PEPs"
    assert "pep_0484" not in _ids(outsider_pages)
    assert all(r["project_id"] != "proj_typing" for r in seen)


# --- issue 12: relevance, no leak through ranking, every word findable, titles ------------------


def _open_org(sfx: str, org: str, users: dict[str, str]) -> list[dict]:
    return org_records(org, sfx, users)


async def test_a_question_finds_memories_holding_some_of_its_words_rarest_first(engine, client):
    sfx, org = secrets.token_hex(3), "org_nl_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        # the answer holds the rare words of the question, not all of them
        _ent(org, sfx, "d_build", "Build settings", "The [build-system] table of pyproject.toml."),
        # commoner words, repeated, and one of the rarer ones in its name (a name is scanned for
        # the 3 rarest words, a body for the rarest: every word then counts in the score)
        _ent(org, sfx, "d_table", "Build tables", "A table of data. Which table? The data table."),
        _ent(org, sfx, "d_none", "Unrelated", "Nothing of the question here at all."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="Which table of pyproject.toml holds build data?")
    ids = [r["id"] for r in got["results"]]
    assert ids == ["d_build", "d_table"]  # any word matches; the rare one weighs most
    first, second = got["results"]
    assert first["metadata"]["match"]["text_rank"] > second["metadata"]["match"]["text_rank"] > 0
    # stop words alone find nothing, and never fail
    assert (await _search(client, key, query="which of the"))["results"] == []


async def test_the_passage_holding_the_answer_outranks_a_long_memorys_opening(engine, client):
    sfx, org = secrets.token_hex(3), "org_long_" + secrets.token_hex(4)
    sections = "".join(f"## Part {i}\n\n{SECTION}\n\n" for i in range(12))
    body = sections + "## Answer\n\nThe quokka lives on Rottnest island.\n\n" + sections
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_long", "Handbook", body, type="document"),
        _ent(org, sfx, "doc_short", "Island note", "An island somewhere."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="Where does the quokka live?")
    top = got["results"][0]
    assert top["type"] == "passage" and top["parent_entity_id"] == "doc_long"
    assert "Rottnest" in top["content"] and top["widen_with"] == "fetch_slice"


async def test_a_word_at_offset_200000_of_a_250k_memory_is_found_with_its_passage(engine, client):
    sfx, org = secrets.token_hex(3), "org_deep_" + secrets.token_hex(4)
    rare = "xylophonic" + secrets.token_hex(3)
    paragraph = ("lorem ipsum dolor sit amet " * 33).strip() + "\n\n"  # ~900 characters
    body = "# Manual\n\n" + paragraph * 300
    at = body.index("\n\n", 200_000) + 2
    body = body[:at] + rare + " " + body[at:]
    assert len(body) > 250_000 and body.index(rare) > 200_000
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_huge", "Manual", body, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query=rare, content_max_chars=50_000)
    (hit,) = got["results"]
    assert hit["type"] == "passage" and hit["parent_entity_id"] == "doc_huge"
    assert rare in hit["content"]
    # every character of the body lies in one passage, each within the span bound
    async with engine.connect() as conn:
        spans = (
            await conn.execute(
                text(
                    "SELECT start_offset, end_offset FROM passages"
                    " WHERE org_id = :o AND parent_id = 'doc_huge' ORDER BY passage_index"
                ),
                {"o": org},
            )
        ).all()
    assert spans[0][0] == 0 and spans[-1][1] == len(body)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert all(end - start <= HARD_MAX for start, end in spans)


async def test_the_exact_lane_matches_titles_after_a_prefix_and_whole_word_prefixes(engine, client):
    sfx, org = secrets.token_hex(3), "org_title_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "kep_753", "KEP-753: Sidecar Containers", "containers that run beside"),
        _ent(org, sfx, "pep_8", "PEP 8: Style Guide for Python Code", "indentation"),
        _ent(org, sfx, "pep_80", "PEP 80: Other", "nothing"),
        _ent(org, sfx, "plain", "Sidecar notes", "notes"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="Sidecar Containers")
    assert got["results"][0]["id"] == "kep_753"
    assert got["results"][0]["metadata"]["match"]["exact_rank"] == 1
    title = await _search(client, key, query="style guide")  # a whole-word prefix of a title
    assert title["results"][0]["id"] == "pep_8"
    assert title["results"][0]["metadata"]["match"]["exact_rank"] == 1
    # "PEP 8" is a whole-word prefix of "PEP 8: ..." and a mere prefix of "PEP 80: ..."
    pep = await _search(client, key, query="PEP 8")
    exact = sorted(
        (r["metadata"]["match"]["exact_rank"], r["id"])
        for r in pep["results"]
        if r["metadata"]["match"]["exact_rank"]
    )
    assert [i for _, i in exact] == ["pep_8", "pep_80"]


def _stuffed_world(org: str, sfx: str, *, stuffed: bool) -> list[dict]:
    out = [
        *_open_org(sfx, org, {"ann": "member", "bob": "member"}),
        {"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "contributor"},
        _ent(org, sfx, "v_one", "Kelp forests", "Kelp forests grow in cold water near coasts."),
        _ent(org, sfx, "v_two", "Coral", "Coral reefs grow in warm water; kelp is rare there."),
        _ent(org, sfx, "v_three", "Tides", "Tides move water along coasts twice a day."),
    ]
    if stuffed:  # hidden from ann: another project's and bob's private memories, full of the
        # query's words (so corpus-wide statistics would make them common, and rank others lower)
        stuffing = "kelp forests cold water coasts grow " * 40
        out += hidden_stuffing(org, sfx, stuffing)
    return out


async def test_hidden_documents_full_of_the_query_words_change_nothing_a_reader_sees(
    engine, client
):
    """No leak through ranking (§2, §8): an org where 40 hidden memories are stuffed with the
    query's words and one without them answer a reader who cannot read them byte for byte the
    same: same hits, ranks, scores, text ranks, flags. The reader who may read them (the pair's
    allowed side) does see them."""
    answers = {}
    for stuffed in (True, False):
        sfx, org = secrets.token_hex(3), "org_stuff_" + secrets.token_hex(4)
        await import_dicts(engine, _stuffed_world(org, sfx, stuffed=stuffed))
        ann = await make_key(engine, f"user_ann_{sfx}")
        bob = await make_key(engine, f"user_bob_{sfx}")
        pages = [
            await _search(client, ann, query=q, limit=50)
            for q in ("kelp", "Where do kelp forests grow in cold water?", "water coasts")
        ]
        answers[stuffed] = json.dumps(pages)
        seen_by_bob = await _search(client, bob, query="kelp", limit=50)
        assert any(r["id"].startswith("h") for r in seen_by_bob["results"]) == stuffed
    assert answers[True] == answers[False]


async def test_a_cut_made_before_issue_12_that_dropped_text_keeps_it_searchable(engine, client):
    """A memory cut under the old rule (64 spans kept, the rest dropped, not lossless) is indexed
    whole on its own row until an edit re-cuts it (migration 0003), so no word is lost."""
    sfx, org = secrets.token_hex(3), "org_legacy_" + secrets.token_hex(4)
    body = f"## One\n\n{SECTION}\n\n## Two\n\n{SECTION}\n\n## Three\n\n{SECTION} wallaroo\n"
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_old", "Old cut", body, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    assert (await _search(client, key, query="wallaroo"))["results"][0]["type"] == "passage"
    async with engine.begin() as conn:  # what the old cutter left: the last span dropped
        await conn.execute(
            text(
                "DELETE FROM passages WHERE org_id = :o AND parent_id = 'doc_old'"
                " AND passage_index = (SELECT max(passage_index) FROM passages"
                " WHERE org_id = :o AND parent_id = 'doc_old')"
            ),
            {"o": org},
        )
        await conn.execute(
            text(
                "UPDATE entities SET passage_total = 64, passages_lossless = false"
                " WHERE org_id = :o AND id = 'doc_old'"
            ),
            {"o": org},
        )
    (hit,) = (await _search(client, key, query="wallaroo"))["results"]
    assert hit["id"] == "doc_old"


async def test_a_long_memory_competes_through_every_span_holding_a_query_word(engine, client):
    """A long memory whose answering span holds the question's commoner words (and whose name
    holds one of them) is found through that span, every word being a way in, and comes before
    a short memory holding the rarest word once; its focus names that span."""
    sfx, org = secrets.token_hex(3), "org_rerank_" + secrets.token_hex(4)
    sections = "".join(f"## Part {i}\n\n{SECTION}\n\n" for i in range(4))
    answer = (
        "## Habits\n\n" + SECTION + "\n\nThey swim in murky rivers at night; murky rivers hide"
        " them, and at night they swim far up the rivers.\n\n"
    )
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_rivers", "River notes", sections + answer + sections, type="document"),
        _ent(org, sfx, "doc_short", "Short note", "A platypus was seen once."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    question = "Where does the platypus swim in murky rivers at night?"
    got = await _search(client, key, query=question)
    ranked = [r["parent_entity_id"] or r["id"] for r in got["results"]]
    assert ranked[:2] == ["doc_rivers", "doc_short"]
    holder = await _passage_holding(engine, org, "doc_rivers", "murky rivers hide")
    first = got["results"][0]
    assert first["metadata"]["focus"]["id"] == holder


async def test_pages_across_the_re_ranked_memories_are_one_order(engine, client):
    # The re-ranking covers a fixed number of memories (SearchSettings.rerank_depth, 40), never
    # one derived from limit or offset: pages of 7 read across it give exactly the one page of 50.
    sfx, org = secrets.token_hex(3), "org_rerank_pages_" + secrets.token_hex(4)
    records = [*_open_org(sfx, org, {"ann": "member"})]
    for i in range(60):
        body = " ".join(["heron"] * (1 + i % 5) + ["marsh"] * (i % 3) + [SECTION[: 40 * i]])
        name = f"Heron note {i}"
        if i % 2 == 0:  # long, cut, found by its name only: its span found by the re-ranking
            body = f"## A\n\n{SECTION}\n\n## Birds\n\n{body}\n\n## B\n\n{SECTION}\n"
            name = f"Marsh note {i}"
        elif i % 3 == 0:
            body += " egret"  # the rarest word: the body scan looks for it only
        records.append(_ent(org, sfx, f"m{i:02d}", name, body))
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    query = "heron marsh egret"
    whole = await _search(client, key, query=query, limit=50)
    assert whole["total"] == 50 and whole["has_more"]
    paged: list[str] = []
    for offset in range(0, 56, 7):
        page = await _search(client, key, query=query, limit=7, offset=offset)
        paged += [r["id"] for r in page["results"]]
    assert paged[:50] == [r["id"] for r in whole["results"]]
    assert len(paged) == len(set(paged)) == 56


async def _passage_holding(engine, org: str, memory: str, word: str) -> str:
    """The id of ``memory``'s one passage whose text holds ``word``."""
    async with engine.connect() as conn:
        sql = (
            "SELECT id FROM passages WHERE org_id = :o AND parent_id = :m"
            " AND content LIKE '%' || :w || '%'"
        )
        return (await conn.execute(text(sql), {"o": org, "m": memory, "w": word})).scalar_one()


async def _bm25_spans(engine, user_id: str, memory: str, query: str) -> list[Span]:
    """``memory``'s spans holding a word of ``query``, best plain BM25 first (the order before
    any coverage or ask rule), as ``user_id`` reads them."""
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=user_id)
        assert reader is not None
        q = await build_query(conn, reader, query, DEFAULTS)
        scored = await best_spans(conn, reader, [memory], q, DEFAULTS, per_memory=64)
    return list(scored[memory].spans)


async def test_focus_names_the_best_span_of_a_memory_and_a_query_centred_excerpt(engine, client):
    """``metadata.focus`` (issue 12): every current span of a result's memory is scored with the
    query (not only those the candidate scans found): the span where the query's words are is
    named, with an excerpt around them within ``content_max_chars``; ``content`` stays the
    preview (the hit's opening)."""
    sfx, org = secrets.token_hex(3), "org_focus_" + secrets.token_hex(4)
    sections = "".join(f"## Part {i}\n\n{SECTION}\n\n" for i in range(6))
    answer = (
        "## Habitat\n\n" + SECTION + "\n\nThe wombat burrows under eucalyptus roots at dusk, "
        "and a wombat burrow has one entrance.\n\n"
    )
    body = sections + answer + sections
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_wombat", "Wombat handbook", body, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(
        client, key, query="Where does the wombat burrow under eucalyptus?", content_max_chars=120
    )
    (hit,) = [r for r in got["results"] if (r["parent_entity_id"] or r["id"]) == "doc_wombat"]
    focus = hit["metadata"]["focus"]
    holder = await _passage_holding(engine, org, "doc_wombat", "eucalyptus")
    assert focus["id"] == holder and isinstance(focus["passage_index"], int)
    assert "eucalyptus" in focus["excerpt"] and len(focus["excerpt"]) <= 120
    assert focus["excerpt"].startswith("...")  # the span's opening is filler: cut before
    assert len(focus["next"]) <= DEFAULTS.focus_spans - 1 and holder not in focus["next"]
    assert len(hit["content"]) <= 120 + 3  # the preview rule: cut, plus "..."
    # a memory never cut names itself; with no room for text the excerpt is empty
    got = await _search(client, key, query="wombat eucalyptus", content_max_chars=0)
    for r in got["results"]:
        assert r["metadata"]["focus"]["excerpt"] == ""


async def test_focus_excerpt_is_empty_when_the_rows_preview_already_says_it(engine, client):
    """A row that is its own best span and whose preview already holds the query-centred
    excerpt sends the words once: ``focus.excerpt`` is ``""`` (a trial found 8 of 10 rows
    saying them twice). A row whose preview misses them keeps its excerpt."""
    sfx, org = secrets.token_hex(3), "org_dedup_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "note_short", "Quoll", "The quoll hunts at night in the forest."),
        _ent(org, sfx, "note_long", "Numbat", SECTION + " The numbat eats termites, not quolls."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    got = await _search(client, key, query="quoll", content_max_chars=200)
    by_id = {r["id"]: r for r in got["results"]}
    short = by_id["note_short"]
    assert short["metadata"]["focus"]["id"] == "note_short"
    assert "quoll hunts" in short["content"] and short["metadata"]["focus"]["excerpt"] == ""
    long = by_id["note_long"]
    assert "quolls" not in long["content"]  # the preview is the opening: filler
    assert "quolls" in long["metadata"]["focus"]["excerpt"]


async def test_an_unknown_word_no_readable_row_holds_does_not_empty_the_query(engine, client):
    """Every word is a way in: a word no row the reader reads holds (a typo, with the fallback
    weights: the heaviest word) finds nothing and takes nothing away, so "reefs xyzzyq" answers
    as "reefs" does; one a hidden row holds changes nothing the reader sees; an unknown word
    that readable rows hold (an identifier) leads."""
    sfx, org = secrets.token_hex(3), "org_unheld_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member", "bob": "member"}),
        _ent(org, sfx, "d_reefs", "Coral", "Coral reefs grow in warm water."),
        _ent(org, sfx, "d_ident", "Config", "Set zqxtoken to enable reefs monitoring."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")

    async def ids(query: str) -> list[str]:
        got = await _search(client, key, query=query)
        assert got["filters"]["word_weights"] == "fallback"  # never counted here
        return [r["id"] for r in got["results"]]

    alone = await ids("reefs")
    assert sorted(alone) == ["d_ident", "d_reefs"]
    assert await ids("reefs xyzzyq") == alone
    assert await ids("xyzzyq") == []
    assert (await ids("zqxtoken reefs"))[:1] == ["d_ident"]  # a held unknown word leads
    # a private memory of bob holding the unknown word changes nothing ann sees
    await import_dicts(
        engine,
        [_ent(org, sfx, "h_bob", "Hidden", "xyzzyq reefs xyzzyq", scope="private", owner="bob")],
    )
    assert await ids("reefs xyzzyq") == alone


async def test_a_query_of_hundreds_of_words_keeps_its_heaviest_and_answers(engine, client):
    """A 300-word query (2,000 characters) is answered, not refused or timed out: its
    :attr:`~SearchSettings.max_words` heaviest words reach the full-text lane (ties: query
    order), so one held word among unknown ones still finds its memory."""
    sfx, org = secrets.token_hex(3), "org_manyw_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "d_ident", "Config", "Set zqxtoken to enable reefs monitoring."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    noise = [f"w{i}qx" for i in range(300)]
    got = await _search(client, key, query=" ".join(["zqxtoken", *noise])[:2000])
    assert got["filters"]["word_weights"] == "fallback"
    assert [r["id"] for r in got["results"]] == ["d_ident"]
    assert got["filters"]["words"][0] == "zqxtoken"
    assert len(got["filters"]["words"]) == DEFAULTS.max_words


async def test_filters_say_which_words_the_full_text_lane_used(engine, client):
    """``filters.words``: the query's words the full-text lane looked for, rarest first; with
    counted weights, an empty list for a query of stop words only (it finds nothing, and now
    says why)."""
    t = await Team().load(engine)
    await term_stats.refresh_orgs(engine, [t.org])
    ann = await t.key(engine, "ann")
    r = await call(client, "POST", "/api/search", ann, json={"query": "the of and"})
    assert r.status_code == 200, r.text
    assert r.json()["filters"]["word_weights"] == "counts"
    assert r.json()["results"] == [] and r.json()["filters"]["words"] == []
    r = await call(client, "POST", "/api/search", ann, json={"query": "The zebra of Kelp"})
    assert r.status_code == 200, r.text
    assert sorted(r.json()["filters"]["words"]) == ["kelp", "zebra"]


# --- the best result's strongest typed neighbour follows it (issue 12) --------------------------


def _graph_world(org: str, sfx: str, *, omit: str | None = None) -> list[dict]:
    """``old`` matches the query best; ``succ`` supersedes it and ``dep`` is what it depends on
    (neither holds the query's words); ``weak`` is linked to ``old`` only by RELATED_TO;
    ``a_hidden_dep`` (a DEPENDS_ON neighbour in the private project p1, which only ann reads)
    has the smallest id of its dependencies, so ann gets it and eve gets ``dep``;
    ``a_dependent`` depends on ``old`` and ``a_succ_withdrawn`` supersedes it but was superseded
    itself: neither is promoted."""
    records = [
        *_open_org(sfx, org, {"ann": "member", "eve": "member"}),
        {"kind": "member", "project": "p1", "user": f"user_ann_{sfx}", "role": "contributor"},
        _ent(org, sfx, "old", "Widget cache", "widget cache eviction " * 5),
        *(
            _ent(org, sfx, f"other_{i}", f"Other {i}", "widget " * (i + 1) + "cache")
            for i in range(4)
        ),
        _ent(org, sfx, "succ", "Replacement plan", "the new approach"),
        _ent(org, sfx, "dep", "Storage layer", "where bytes live"),
        _ent(org, sfx, "a_hidden_dep", "Closed storage", "where secret bytes live", project="p1"),
        _ent(org, sfx, "weak", "Loosely related", "a thought"),
        # depends on `old` (its id sorts first): a dependent is never promoted
        _ent(org, sfx, "a_dependent", "Consumer", "uses it"),
        # a second successor with a smaller id, itself superseded by `z_newer`: the live one wins
        _ent(org, sfx, "a_succ_withdrawn", "Withdrawn replacement", "an attempt"),
        _ent(org, sfx, "z_newer", "Newer attempt", "later"),
        {"kind": "edge", "org": org, "src": "succ", "dst": "old", "relationship": "SUPERSEDES"},
        {"kind": "edge", "org": org, "src": "old", "dst": "dep", "relationship": "DEPENDS_ON"},
        {
            "kind": "edge",
            "org": org,
            "src": "old",
            "dst": "a_hidden_dep",
            "relationship": "DEPENDS_ON",
        },
        {"kind": "edge", "org": org, "src": "old", "dst": "weak", "relationship": "RELATED_TO"},
        {
            "kind": "edge",
            "org": org,
            "src": "a_dependent",
            "dst": "old",
            "relationship": "DEPENDS_ON",
        },
        {
            "kind": "edge",
            "org": org,
            "src": "a_succ_withdrawn",
            "dst": "old",
            "relationship": "SUPERSEDES",
        },
        {
            "kind": "edge",
            "org": org,
            "src": "z_newer",
            "dst": "a_succ_withdrawn",
            "relationship": "SUPERSEDES",
        },
    ]
    dropped = {omit} if omit else set()
    return [
        r
        for r in records
        if r.get("id") not in dropped and dropped.isdisjoint({r.get("src"), r.get("dst")})
    ]


async def _graph_keys(engine, omit: str | None = None) -> dict[str, str]:
    sfx, org = secrets.token_hex(3), "org_promo_" + secrets.token_hex(4)
    await import_dicts(engine, _graph_world(org, sfx, omit=omit))
    keys = {n: await make_key(engine, f"user_{n}_{sfx}") for n in ("ann", "eve")}
    return {**keys, "org": org}


async def test_the_best_results_strongest_typed_neighbour_is_listed_right_after_it(engine, client):
    keys = await _graph_keys(engine)
    got = await _search(client, keys["eve"], query="widget cache eviction", limit=10)
    ids = [r["id"] for r in got["results"]]
    # DEPENDS_ON (0.98) outranks SUPERSEDES (0.95): the dependency follows its dependent, and
    # the other matches keep their order behind it; the successor and the weak link are not
    # promoted (one neighbour, and RELATED_TO is no strong relationship)
    assert ids[:2] == ["old", "dep"], ids
    assert ids[2:] == [f"other_{i}" for i in (3, 2, 1, 0)], ids
    first, second = got["results"][:2]
    assert second["metadata"]["match"]["promoted_by"] == {
        "id": "old",
        "relationship": "DEPENDS_ON",
        "direction": "outgoing",
    }
    assert second["score"] == first["score"]
    assert "promoted_by" not in first["metadata"]["match"]
    # a page is a slice of that one order
    page = await _search(client, keys["eve"], query="widget cache eviction", limit=1, offset=1)
    assert [r["id"] for r in page["results"]] == ["dep"] and page["has_more"] is True
    # the filters apply to the neighbour as to every result: no decision-typed one for notes
    notes = await _search(client, keys["eve"], query="widget cache eviction", types=["note"])
    assert notes["results"] == []


async def test_a_superseded_memory_is_followed_by_its_successor(engine, client):
    keys = await _graph_keys(engine, omit="dep")
    got = await _search(client, keys["eve"], query="widget cache eviction")
    assert [r["id"] for r in got["results"]][:2] == ["old", "succ"]
    assert got["results"][0]["lifecycle"] == "superseded"
    # of the two successors, the one not itself superseded, though its id sorts later
    assert got["results"][1]["lifecycle"] == "active"
    assert got["results"][1]["metadata"]["match"]["promoted_by"] == {
        "id": "old",
        "relationship": "SUPERSEDES",
        "direction": "incoming",
    }
    # a retired successor is never a result, promoted or not
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE entities SET lifecycle = 'retired' WHERE org_id = :o AND id = 'succ'"),
            {"o": keys["org"]},
        )
    retired = await _search(client, keys["eve"], query="widget cache eviction")
    assert "succ" not in [r["id"] for r in retired["results"]]


async def test_a_hidden_neighbour_is_passed_over_exactly_as_an_absent_one(engine, client):
    full = await _graph_keys(engine)
    control = await _graph_keys(engine, omit="a_hidden_dep")
    # allowed: ann reads p1, so the hidden dependency (smallest id at weight 0.98) is hers
    ann = await _search(client, full["ann"], query="widget cache eviction")
    assert [r["id"] for r in ann["results"]][:2] == ["old", "a_hidden_dep"]
    # denied: eve sees byte for byte what she sees where it does not exist
    for query, extra in (("widget cache eviction", {}), ("widget", {"limit": 3, "offset": 1})):
        got = await _search(client, full["eve"], query=query, **extra)
        want = await _search(client, control["eve"], query=query, **extra)
        assert json.dumps(got) == json.dumps(want)
        assert "a_hidden_dep" not in json.dumps(got)


def _edge(org: str, src: str, dst: str, relationship: str) -> dict:
    return {"kind": "edge", "org": org, "src": src, "dst": dst, "relationship": relationship}


async def test_a_promoted_rows_focus_follows_the_questions_ask(engine, client):
    """A promoted row is listed for its edge, and a hop question's lead-in describes the row
    above it: the promoted memory's ``focus`` is chosen by the words after the question's last
    interrogative word only. Here its sections repeat the lead-in's rare word, one section holds
    the ask's words; scored with every word, the focus was a lead-in section."""
    sfx, org = secrets.token_hex(3), "org_askfocus_" + secrets.token_hex(4)
    lead = "## Part {i}\n\n" + SECTION + "\n\nThe zorblat layer keeps its pages.\n\n"
    answer = "## Sweeping\n\n" + SECTION + "\n\nCold blocks are evicted by the sweeper.\n\n"
    body = "".join(lead.format(i=i) for i in range(3)) + answer + lead.format(i=3)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "plan", "Zorblat fennix plan", "zorblat fennix " * 4),
        _ent(org, sfx, "layer", "Storage layer handbook", body, type="document"),
        {"kind": "edge", "org": org, "src": "plan", "dst": "layer", "relationship": "DEPENDS_ON"},
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    query = "The zorblat fennix plan rests on a layer; in it, how are cold blocks evicted?"
    got = await _search(client, key, query=query)
    assert [r["id"] for r in got["results"]][:1] == ["plan"]
    (row,) = [r for r in got["results"] if (r["parent_entity_id"] or r["id"]) == "layer"]
    assert row["metadata"]["match"]["promoted_by"]["id"] == "plan"
    holder = await _passage_holding(engine, org, "layer", "evicted")
    assert row["metadata"]["focus"]["id"] == holder
    assert "evicted" in row["metadata"]["focus"]["excerpt"]
    # the setup: scored with every word of the question, the best span is a lead-in section
    plain = await _bm25_spans(engine, f"user_ann_{sfx}", "layer", query)
    assert plain[0].id != holder


def test_cover_order_lets_a_span_with_the_questions_other_words_into_next():
    """``focus.next`` in coverage order (``cover_order``): after the best span by BM25, each
    next one is the span whose query words add the most, a word counting half as much once a
    chosen span holds it. Spans that only repeat the best one's words wait behind a span with
    another query word, though BM25 alone ranks them higher; ``covered`` 1 is BM25's order."""

    def span(name: str, **words: float) -> Span:
        shares = tuple((int(w[1:]), s) for w, s in sorted(words.items()))
        return Span(id=name, passage_index=0, text_rank=sum(words.values()), words=shares)

    topic = [span(f"topic{i}", w1=5.0 - i / 10, w2=5.0 - i / 10) for i in range(4)]  # 10 .. 9.7
    other = span("other", w3=6.0)  # BM25 6: last of five
    bm25 = [*topic, other]
    assert [s.id for s in cover_order(bm25, 5, DEFAULTS.focus_covered)] == [
        "topic0",
        "other",
        "topic1",
        "topic2",
        "topic3",
    ]
    assert [s.id for s in cover_order(bm25, 2, DEFAULTS.focus_covered)] == ["topic0", "other"]
    assert [s.id for s in cover_order(bm25, 5, 1.0)] == [s.id for s in bm25]
    assert cover_order(bm25, 0, 0.5) == bm25[:1] and cover_order([], 3, 0.5) == []
    # a span adding no new word still beats one adding less: gains, not word counts
    weak = span("weak", w3=1.0)
    assert [s.id for s in cover_order([topic[0], topic[1], weak], 3, DEFAULTS.focus_covered)] == [
        "topic0",
        "topic1",
        "weak",
    ]


async def test_focus_next_names_the_span_holding_the_questions_other_words(engine, client):
    """End to end: a memory whose sections all repeat its topic words and one section holds the
    question's other word. BM25 over its spans ranks that section below five topic sections;
    ``metadata.focus.next`` names it right after the best span, and the best span is BM25's."""
    sfx, org = secrets.token_hex(3), "org_cover_" + secrets.token_hex(4)
    topic = "The wombat digs a burrow."
    sections = "".join(f"## Part {i}\n\n{SECTION}\n\n{topic}\n\n" for i in range(4))
    answer = f"## Diet\n\n{SECTION}\n\nAt dusk it grazes on tussock grass.\n\n"
    body = sections + answer + sections
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_wombat", "Wombat handbook", body, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    query = "what tussock grass does the wombat in its burrow eat"
    got = await _search(client, key, query=query)
    (hit,) = [r for r in got["results"] if (r["parent_entity_id"] or r["id"]) == "doc_wombat"]
    focus = hit["metadata"]["focus"]
    holder = await _passage_holding(engine, org, "doc_wombat", "tussock")
    plain = await _bm25_spans(engine, f"user_ann_{sfx}", "doc_wombat", query)
    bm25 = [s.id for s in plain]
    assert holder in bm25 and bm25.index(holder) >= DEFAULTS.focus_spans  # the setup
    assert focus["id"] == bm25[0] != holder
    assert focus["next"][0] == holder
    assert len(focus["next"]) == DEFAULTS.focus_spans - 1


async def test_format_characters_around_a_word_are_not_part_of_it(engine, client):
    """A bidi control or zero-width character wrapping a query word is no part of it: the
    database's parser, which split the indexed text, splits the query too (``filters.words``
    lists ``quorvex`` and ``blimnar``, never ``quorvex\u202c``); one alone is no word."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    for query, words in (
        ("\u202equorvex\u202c blimnar", ["quorvex", "blimnar"]),
        ("\u200b\u2066 quorvex \u2069", ["quorvex"]),
        ("quorvex \u202equorvex\u202c", ["quorvex"]),
        ("type\ufe0f \u3164hints\u3164 type\u034f", ["type", "hints"]),
    ):
        r = await call(client, "POST", "/api/search", ann, json={"query": query})
        assert r.status_code == 200, r.text
        assert sorted(r.json()["filters"]["words"]) == sorted(words), repr(query)


async def test_query_words_are_split_and_stemmed_as_the_index_was(engine, client):
    """One definition of a word: the database's parser and ``english`` dictionaries split and
    stem the query as they built every ``search_tsv`` (a file name stays one word, a compound
    counts through its parts, stop words have none, two spellings of one lexeme are one word);
    ``filters.words`` echoes each word as written, lower-cased."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    question = "Which table of pyproject.toml holds build-related data? Don't 'quote' it. TABLE"
    r = await call(client, "POST", "/api/search", ann, json={"query": question})
    assert r.status_code == 200, r.text
    assert sorted(r.json()["filters"]["words"]) == sorted(
        ["table", "pyproject.toml", "holds", "build", "related", "data", "quote"]
    )


async def test_a_word_wordfreq_would_case_fold_finds_the_memory_holding_it(engine, client):
    """A memory writing ``Straße``, ``ﬁnance`` or ``İSTANBUL`` is found by that word as a user
    types it; before, the query was case-folded (``strasse``, ``finance``) while the index
    holds ``straße`` and ``ﬁnanc``, and nothing matched."""
    sfx, org = secrets.token_hex(3), "org_fold_" + secrets.token_hex(4)
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_street", "Street notes", "The office moved to the Hauptstraße."),
        _ent(org, sfx, "doc_money", "Money notes", "The ﬁnance team signs every invoice."),
        _ent(org, sfx, "doc_city", "City notes", "The second office is in İSTANBUL."),
        _ent(org, sfx, "doc_other", "Other notes", "Nothing of the kind is kept here."),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    both = await _search(client, key, query="istanbul İSTANBUL")  # one lexeme here: once
    assert [r["id"] for r in both["results"]] == ["doc_city"]
    assert both["filters"]["words"] == ["istanbul"]
    for query, want in [
        ("Hauptstraße", "doc_street"),
        ("hauptstraße", "doc_street"),
        ("ﬁnance", "doc_money"),
        ("İstanbul", "doc_city"),
        ("istanbul", "doc_city"),
    ]:
        got = await _search(client, key, query=query)
        assert [r["id"] for r in got["results"]] == [want], query
    got = await _search(client, key, query="Hauptstrasse")  # another spelling: another word
    assert got["results"] == []


async def test_in_a_database_that_does_not_lower_case_unicode_a_word_is_found_as_written(
    database_url,
):
    """Where the database's ``LC_CTYPE`` is ``C``, its parser lower-cases ASCII only, so the
    index keeps ``İstanbul`` and ``ΣΟΦΙΑΣ`` as written. Search sends each word as written and
    the database lower-cases it the same way, so the word typed as stored is found (a trial:
    a query lower-cased in Python found nothing there)."""
    server = with_database(database_url, "postgres")
    name = f"sibyl_test_cctype_{secrets.token_hex(4)}"
    await admin_sql(
        server,
        f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'"
        " LC_COLLATE 'C' LC_CTYPE 'C'",
    )
    url = with_database(database_url, name)
    try:
        await asyncio.to_thread(upgrade, url)
        eng = make_engine(url)
        try:
            sfx, org = secrets.token_hex(3), "org_cctype_" + secrets.token_hex(4)
            records = [
                *_open_org(sfx, org, {"ann": "member"}),
                _ent(org, sfx, "doc_city", "Trip notes", "We flew to İstanbul in May."),
                _ent(org, sfx, "doc_names", "Σημειώσεις", "Τα βιβλία της ΣΟΦΙΑΣ."),
                _ent(org, sfx, "doc_other", "Other notes", "Nothing of the kind is kept here."),
            ]
            await import_dicts(eng, records)
            async with eng.connect() as conn:
                reader = await reader_by_user(conn, user_id=f"user_ann_{sfx}")
                assert reader is not None
                for query, want in (
                    ("İstanbul", "doc_city"),
                    ("ΣΟΦΙΑΣ", "doc_names"),
                    # two spellings that differ beyond ASCII case stay two words: either order
                    ("istanbul İstanbul", "doc_city"),
                    ("İstanbul istanbul", "doc_city"),
                ):
                    got = await search(conn, reader, SearchRequest(query=query))
                    assert [r.id for r in got.results] == [want], query
        finally:
            await eng.dispose()
    finally:
        await admin_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_ask_is_the_last_interrogative_clause():
    """The ask: the words after the query's last interrogative word (contractions too) that has
    a word after it; none for a keyword query; a trailing "..., or what?" does not end it."""

    def asked(tokens: list[str]) -> list[str]:
        return [tokens[i] for i in sorted(ask_positions(tokens))]

    q = "The proposal was withdrawn what replaced it and which comment line opens its block"
    assert asked(q.split()) == ["comment", "line", "opens", "its", "block"]
    assert asked(["How", "do", "context", "variables", "work"]) == [
        "do",
        "context",
        "variables",
        "work",
    ]
    assert asked(["wheel", "archive", "format"]) == []
    assert asked(["what"]) == []
    for contraction in ("what's", "what\u2019s", "what\u02bcs"):
        assert asked(["tag", "replaced", contraction, "the", "new", "pattern"]) == [
            "the",
            "new",
            "pattern",
        ]
    assert asked(["Which", "layer", "keeps", "cold", "pages", "or", "what"]) == [
        "layer",
        "keeps",
        "cold",
        "pages",
        "or",
        "what",
    ]


def test_cover_order_weighs_the_asked_words_more():
    """A word of the question's ask counts ``asked[w]`` times its share in the coverage order:
    the span holding it comes before one holding a lead-in word of a higher BM25 share. The
    same weight on every word changes nothing (the order is by comparison)."""

    def span(name: str, **words: float) -> Span:
        shares = tuple((int(w[1:]), s) for w, s in sorted(words.items()))
        return Span(id=name, passage_index=0, text_rank=sum(words.values()), words=shares)

    topic = [span(f"topic{i}", w1=5.0 - i / 10, w2=5.0 - i / 10) for i in range(3)]
    lead, ask = span("lead", w3=6.0), span("ask", w4=4.0)  # w4 is a word of the ask
    spans = [*topic, lead, ask]
    assert [s.id for s in cover_order(spans, 3, DEFAULTS.focus_covered)] == [
        "topic0",
        "lead",
        "topic1",
    ]
    weighed = cover_order(spans, 3, DEFAULTS.focus_covered, asked={4: DEFAULTS.focus_asked})
    assert [s.id for s in weighed] == ["topic0", "ask", "lead"]
    every = {w: DEFAULTS.focus_asked for w in (1, 2, 3, 4)}
    assert [s.id for s in cover_order(spans, 5, DEFAULTS.focus_covered, asked=every)] == [
        s.id for s in cover_order(spans, 5, DEFAULTS.focus_covered)
    ]


async def test_focus_next_puts_the_span_answering_the_ask_first(engine, client):
    """End to end: the question's lead-in names a word of one section ("nocturnal") and its ask
    a word of another ("tussock"); ``focus.next`` names the ask's section first, though the
    coverage order without the ask's weight names the lead-in's first."""
    sfx, org = secrets.token_hex(3), "org_ask_" + secrets.token_hex(4)
    topic = "The wombat digs a burrow."
    sections = "".join(f"## Part {i}\n\n{SECTION}\n\n{topic}\n\n" for i in range(3))
    habits = f"## Habits\n\n{SECTION}\n\nIt is nocturnal and nocturnal.\n\n"
    diet = f"## Diet\n\n{SECTION}\n\nAt dusk it grazes on tussock.\n\n"
    records = [
        *_open_org(sfx, org, {"ann": "member"}),
        _ent(org, sfx, "doc_wombat", "Wombat handbook", sections + habits + diet, type="document"),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    query = "The nocturnal wombat digs a burrow; what tussock does it eat?"
    got = await _search(client, key, query=query)
    (hit,) = [r for r in got["results"] if (r["parent_entity_id"] or r["id"]) == "doc_wombat"]
    diet_span = await _passage_holding(engine, org, "doc_wombat", "tussock")
    habits_span = await _passage_holding(engine, org, "doc_wombat", "nocturnal")
    plain = await _bm25_spans(engine, f"user_ann_{sfx}", "doc_wombat", query)
    unweighed = [s.id for s in cover_order(plain, DEFAULTS.focus_spans, DEFAULTS.focus_covered)]
    focus = hit["metadata"]["focus"]
    assert focus["id"] == unweighed[0] not in (diet_span, habits_span)  # the setup: a topic span
    assert unweighed.index(habits_span) < unweighed.index(diet_span)  # the setup
    assert focus["next"][0] == diet_span
