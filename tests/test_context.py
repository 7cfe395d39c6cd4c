"""``context`` (contract §8, issue 4): the note lane, facets, related items, covered parents,
the Markdown budget, the read rule as pairs, projects, REST and MCP."""

from __future__ import annotations

import json
import secrets

import pytest
from mcp import Client

from app.core import policy
from app.core.settings import Settings
from app.domain.context import context_pack
from app.domain.schemas import ContextRequest
from app.mcp.server import build_mcp, fixed_key
from app.repo.readers import reader_by_key
from tests.builders import import_dicts, make_key

FILLER = " ".join(f"filler{i}" for i in range(60))


def _base(org: str, sfx: str, users: tuple[str, ...] = ("ann",)) -> list[dict]:
    out: list[dict] = [{"kind": "org", "id": org, "name": "Context"}]
    out += [
        {"kind": "user", "id": f"user_{u}_{sfx}", "org": org, "handle": u, "role": "member"}
        for u in users
    ]
    out += [
        {"kind": "project", "id": "p1", "org": org, "name": "Private", "visibility": "private"},
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
        {"kind": "member", "project": "p1", "user": f"user_ann_{sfx}", "role": "contributor"},
    ]
    return out


def _ent(org: str, sfx: str, id_: str, type_: str, name: str, content: str, **extra) -> dict:
    rec = {
        "kind": "entity",
        "id": id_,
        "org": org,
        "type": type_,
        "name": name,
        "content": content,
        "project": extra.pop("project", "p2"),
        "scope": extra.pop("scope", "project"),
        "owner": f"user_{extra.pop('owner', 'ann')}_{sfx}",
    }
    rec.update(extra)
    return rec


async def _pack(client, key: str, **body) -> dict:
    r = await client.post(
        "/api/context/pack", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 200, r.text
    return r.json()


def _items(pack: dict) -> list[dict]:
    return [i for items in pack["sections"].values() for i in items]


def _ids(pack: dict) -> set[str]:
    """Every id an item, its parent or a related memory of the pack names."""
    out: set[str] = set()
    for i in _items(pack):
        out |= {i["id"], i["parent_entity_id"], *(n["id"] for n in i["related"])}
        out |= {n["parent_entity_id"] for n in i["related"]}
    return out - {None}


# --- the reserved note lane -----------------------------------------------------------------------


async def _lane_world(engine, notes: int) -> str:
    org, sfx = "org_lane_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _base(org, sfx)
    # 30 strong decisions (both words in the name and body) and weak notes (one word, long body)
    records += [
        _ent(org, sfx, f"dec_{i:02d}", "decision", f"Retry policy {i}", "retry policy " * 4)
        for i in range(30)
    ]
    records += [
        _ent(org, sfx, f"note_{i:02d}", "note", f"Jotting {i}", f"{FILLER} retry {FILLER}")
        for i in range(notes)
    ]
    await import_dicts(engine, records)
    return await make_key(engine, f"user_ann_{sfx}")


@pytest.mark.parametrize("notes", [0, 2, 3, 10])
async def test_the_note_lane_holds_exactly_three_slots_that_never_grow(engine, client, notes):
    key = await _lane_world(engine, notes)
    for limit in (10, 20, 50):
        pack = await _pack(client, key, goal="retry policy", limit=limit, include_related=False)
        notes_in_pack = pack["sections"]["notes"]
        lane = [n for n in notes_in_pack if n["metadata"].get("note_lane") is True]
        # every note is weaker than every decision, yet up to 3 are kept: never more, whatever
        # the limit; further notes only enter on merit, once the decisions are all in
        assert len(lane) == min(notes, policy.NOTE_LANE), (notes, limit)
        assert all("reserved note lane" in n["reason"] for n in lane)
        decisions = pack["sections"]["decisions"]
        assert len(decisions) == min(30, limit - len(lane))
        on_merit = min(notes - len(lane), limit - len(lane) - len(decisions))
        assert len(notes_in_pack) == len(lane) + on_merit, (notes, limit)
        assert pack["total_items"] == len(notes_in_pack) + len(decisions)
        assert pack["filters"]["note_lane"] == policy.NOTE_LANE == 3
    # the lane is inside the pack: a pack of one holds one note when any note matches
    tiny = await _pack(client, key, goal="retry policy", limit=1, include_related=False)
    assert [i["type"] for i in _items(tiny)] == (["note"] if notes else ["decision"])


# --- facets, related items, covered parents -------------------------------------------------------


async def test_facets_related_items_and_reasons(engine, client):
    org, sfx = "org_facets_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _base(org, sfx)
    records += [
        _ent(org, sfx, "dec", "decision", "Caching decision", "caching with redis"),
        _ent(
            org,
            sfx,
            "task_open",
            "task",
            "Caching task",
            "caching work",
            metadata={"status": "in_progress"},
        ),
        _ent(
            org,
            sfx,
            "task_done",
            "task",
            "Caching task done",
            "caching work",
            metadata={"status": "done"},
        ),
        _ent(org, sfx, "art", "artifact", "Caching artifact", "caching code"),
        _ent(org, sfx, "doc", "document", "Caching document", "caching guide"),
        _ent(org, sfx, "note", "note", "Caching note", "caching thought"),
        _ent(org, sfx, "person", "person", "Caching person", "caching expert"),
        _ent(org, sfx, "unrelated", "decision", "Other topic", "nothing to see"),
        {
            "kind": "edge",
            "org": org,
            "src": "task_open",
            "dst": "dec",
            "relationship": "DEPENDS_ON",
        },
        {
            "kind": "edge",
            "org": org,
            "src": "dec",
            "dst": "unrelated",
            "relationship": "DEPENDS_ON",
        },
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    pack = await _pack(client, key, goal="caching")
    facets = {f: {i["id"] for i in items} for f, items in pack["sections"].items()}
    assert facets == {
        "decisions": {"dec"},
        "active_work": {"task_open"},  # tasks not done
        "artifacts": {"art", "doc"},
        "notes": {"note"},
        "other": {"task_done", "person"},
    }
    dec = pack["sections"]["decisions"][0]
    # related: one hop of the expand_neighbors walk (both directions), previews bounded
    assert {n["id"] for n in dec["related"]} == {"task_open", "unrelated"}
    assert all(n["distance"] == 1 for n in dec["related"])
    assert "goal" in dec["reason"]
    assert pack["filters"]["round_budget"] == 3
    none = await _pack(client, key, goal="caching", related_limit=0)
    assert all(i["related"] == [] for i in _items(none))
    one = await _pack(client, key, goal="caching", related_limit=1)
    assert all(len(i["related"]) <= 1 for i in _items(one))
    off = await _pack(client, key, goal="caching", include_related=False)
    assert all(i["related"] == [] for i in _items(off))


async def test_a_parent_is_left_out_when_the_pack_holds_all_its_spans(engine, client):
    org, sfx = "org_cover_" + secrets.token_hex(4), secrets.token_hex(3)
    first, second = "Kestrel nesting sites. " * 20, "Kestrel hunting range. " * 20
    body = first + second
    spans = [
        {"start": 0, "end": len(first), "label": "Nesting"},
        {"start": len(first), "end": len(body), "label": "Hunting"},
    ]
    third = "Kestrel diet notes. " * 20
    body3 = first + second + third
    spans3 = [*spans, {"start": len(body), "end": len(body3), "label": "Diet"}]
    records = [
        *_base(org, sfx),
        _ent(org, sfx, "doc_two", "document", "Kestrel field guide", body, spans=spans),
        _ent(org, sfx, "doc_three", "document", "Kestrel survey", body3, spans=spans3),
    ]
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    pack = await _pack(client, key, goal="kestrel", include_related=False)
    items = _items(pack)
    ids = [i["id"] for i in items]
    two = [i for i in items if i["parent_entity_id"] == "doc_two"]
    # both spans of doc_two are in the pack, so doc_two itself is left out ...
    assert len(two) == 2 and "doc_two" not in ids
    assert pack["filters"]["left_out_parents"] == ["doc_two"]
    assert all("covers doc_two" in i["reason"] for i in two)
    assert all(i["widen_with"] == "fetch_slice" for i in two)
    # ... while doc_three's three spans never all fit its three slots with it: it stays
    assert "doc_three" in ids
    assert len([i for i in items if i["parent_entity_id"] == "doc_three"]) == 2


# --- Markdown within the budget -------------------------------------------------------------------


@pytest.mark.parametrize("budget", [100, 250, 1000, 4000])
async def test_markdown_stays_within_the_token_budget(engine, client, budget):
    key = await _lane_world(engine, notes=5)
    pack = await _pack(client, key, goal="retry policy", limit=50, markdown_token_budget=budget)
    md = pack["markdown"]
    assert len(md) <= budget * policy.CHARS_PER_TOKEN
    assert pack["markdown_tokens"] <= budget
    assert md.startswith("# Context: retry policy\n")
    if budget >= 1000:
        assert "## Decisions" in md and "## Notes" in md
        assert "note_" in md  # the reserved notes are the last to be left out
    if budget == 100:
        assert "left out to fit the token budget" in md
    # clamped and echoed
    low = await _pack(client, key, goal="retry policy", markdown_token_budget=5)
    assert low["filters"]["markdown_token_budget"] == policy.MARKDOWN_TOKENS.low
    assert len(low["markdown"]) <= policy.MARKDOWN_TOKENS.low * policy.CHARS_PER_TOKEN


# --- the read rule: allowed / denied pairs, projects ----------------------------------------------


def _rules_records(org: str, sfx: str, omit: str | None) -> list[dict]:
    records = _base(org, sfx, users=("ann", "bob"))
    entities = [
        _ent(org, sfx, "open_dec", "decision", "Otter decision", "otter otter"),
        _ent(org, sfx, "open_note", "note", "Otter note", "otter"),
        _ent(
            org,
            sfx,
            "secret",
            "note",
            "Otter secret",
            "otter otter otter",
            scope="private",
            project="p1",
        ),
        _ent(org, sfx, "p1_dec", "decision", "Otter plan", "otter otter", project="p1"),
    ]
    records += [e for e in entities if e["id"] != omit]
    if omit != "secret":  # the row's own edge goes with it
        records.append(
            {
                "kind": "edge",
                "org": org,
                "src": "secret",
                "dst": "open_dec",
                "relationship": "DEPENDS_ON",
            }
        )
    return records


async def _rules(engine, omit: str | None) -> dict[str, str]:
    org, sfx = "org_crules_" + secrets.token_hex(4), secrets.token_hex(3)
    await import_dicts(engine, _rules_records(org, sfx, omit))
    return {u: await make_key(engine, f"user_{u}_{sfx}") for u in ("ann", "bob")}


@pytest.mark.parametrize(
    "row, allowed, denied",
    [("secret", "ann", "bob"), ("p1_dec", "ann", "bob")],
    ids=["private-memory", "private-project"],
)
async def test_read_rule_pairs(engine, client, row, allowed, denied):
    full = await _rules(engine, omit=None)
    control = await _rules(engine, omit=row)
    assert row in _ids(await _pack(client, full[allowed], goal="otter"))
    assert row in _ids(await _pack(client, full[allowed], goal=row))
    for body in ({"goal": "otter"}, {"goal": "otter", "limit": 2}, {"goal": row}):
        got = await _pack(client, full[denied], **body)
        want = await _pack(client, control[denied], **body)
        # byte-identical to an org where the row does not exist
        assert json.dumps(got) == json.dumps(want), body
        assert row not in _ids(got), body


async def test_an_unreadable_project_answers_like_a_missing_one(engine, client):
    keys = await _rules(engine, omit=None)
    hidden = await _pack(client, keys["bob"], goal="otter", project="p1")
    missing = await _pack(client, keys["bob"], goal="otter", project="p9")
    assert json.dumps(hidden).replace('"p1"', '"p9"') == json.dumps(missing)
    assert hidden["total_items"] == 0 and hidden["truncated"] is False
    seen = await _pack(client, keys["ann"], goal="otter", project="p1")
    assert {i["id"] for i in _items(seen)} == {"secret", "p1_dec"}


async def test_malformed_input_and_clamped_bounds(engine, client):
    keys = await _rules(engine, omit=None)
    key = keys["ann"]
    headers = {"Authorization": f"Bearer {key}"}
    for body in ({"goal": " "}, {"goal": "otter", "project": "bad project"}):
        r = await client.post("/api/context/pack", json=body, headers=headers)
        assert r.status_code == 400 and set(r.json()) == {"detail"}, body
    for body in (
        {"goal": "otter", "limit": "2"},
        {"goal": "otter", "include_related": "yes"},
        {"goal": "otter", "extra": 1},
        {},
    ):
        r = await client.post("/api/context/pack", json=body, headers=headers)
        assert r.status_code == 422, body
    got = await _pack(client, key, goal="otter", limit=999, related_limit=99)
    assert got["limit"] == policy.CONTEXT_LIMIT.high
    assert got["filters"]["related_limit"] == policy.RELATED_LIMIT.high
    default = await _pack(client, key, goal="otter")
    assert default["limit"] == policy.CONTEXT_LIMIT.default
    assert default["filters"]["markdown_token_budget"] == policy.MARKDOWN_TOKENS.default


async def test_the_context_tool_returns_what_rest_returns(engine, client):
    keys = await _rules(engine, omit=None)
    body = {"goal": "otter", "limit": 3, "markdown_token_budget": 200}
    async with Client(build_mcp(lambda: engine, fixed_key(keys["bob"]))) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert tools["context"].annotations.read_only_hint is True
        assert "At most 3 retrieval rounds" in tools["context"].description
        result = await mcp.call_tool("context", body)
    assert not result.is_error
    assert result.structured_content == await _pack(client, keys["bob"], **body)


# --- lean responses: the whole pack within the budget, no body twice (issue 12) ----------------


def _long_world(org: str, sfx: str, n: int = 40) -> list[dict]:
    """``n`` long memories about kestrels (each cut into passages), each with a sentence of its
    own deep in its body, linked by edges and mentions of several kinds."""
    records = _base(org, sfx)
    rels = ["DEPENDS_ON", "SUPERSEDES", "BLOCKS", "REFERENCES", "ABOUT", "CUSTOM_LINK"]
    for i in range(n):
        sections = "\n\n".join(
            f"## Part {k}\n\nKestrel field note {i}.{k}: " + "hovering over the verge " * 40
            for k in range(5)
        )
        opening = f"Kestrel survey {i}. " + "A kestrel hovers into the wind. " * 5
        body = opening + f"Marker sentence unique{i:03d} of memory {i}.\n\n" + sections
        body += f" See [[mem_{(i + 7) % n:03d}]]."
        type_ = ("decision", "note", "document", "task")[i % 4]
        records.append(_ent(org, sfx, f"mem_{i:03d}", type_, f"Kestrel memory {i}", body))
    for i in range(n):
        for k in (1, 3):
            records.append(
                {
                    "kind": "edge",
                    "org": org,
                    "src": f"mem_{i:03d}",
                    "dst": f"mem_{(i + k) % n:03d}",
                    "relationship": rels[(i + k) % len(rels)],
                }
            )
    return records


async def _long_key(engine) -> str:
    org, sfx = "org_long_" + secrets.token_hex(4), secrets.token_hex(3)
    await import_dicts(engine, _long_world(org, sfx))
    return await make_key(engine, f"user_ann_{sfx}")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"limit": 50, "related_limit": 5},
        {"markdown_token_budget": 1000},
        {"markdown_token_budget": 12000, "limit": 50},
    ],
    ids=["default", "widest", "small-budget", "large-budget"],
)
async def test_the_whole_response_stays_within_the_budget(engine, client, body):
    key = await _long_key(engine)
    r = await client.post(
        "/api/context/pack",
        json={"goal": "kestrel hovering field note", **body},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 200, r.text
    pack = r.json()
    budget = pack["filters"]["markdown_token_budget"]
    bound = budget * policy.CHARS_PER_TOKEN * policy.CONTEXT_RESPONSE_FACTOR
    assert pack["filters"]["response_max_chars"] == bound
    assert len(r.text) <= bound, (len(r.text), bound)
    assert len(pack["markdown"]) <= budget * policy.CHARS_PER_TOKEN
    items = _items(pack)
    assert items and pack["total_items"] == len(items)
    # the Markdown carries the text: it holds every item, and the larger part of the response
    assert all(f"`{i['id']}`" in pack["markdown"] for i in items)
    assert len(pack["markdown"]) >= len(r.text) // 4
    if pack["filters"]["left_out_for_budget"]:
        assert pack["truncated"] is True
        assert "left out to fit the token budget" in pack["markdown"]


async def test_no_body_appears_twice(engine, client):
    key = await _long_key(engine)
    r = await client.post(
        "/api/context/pack",
        json={"goal": "kestrel survey marker sentence", "limit": 20},
        headers={"Authorization": f"Bearer {key}"},
    )
    pack = r.json()
    items = _items(pack)
    assert len(items) >= 5
    for item in items:
        # sections carry ids, scores, reasons, short previews; related entries carry no text
        assert len(item["preview"]) <= policy.CONTEXT_PREVIEW_CHARS + 3
        assert item["reason"] and isinstance(item["score"], float)
        assert all("content" not in n for n in item["related"])
    # each memory's own sentence, past the previews, is in the response at most once (the
    # Markdown), and is there for the best items
    shown = 0
    for i in range(40):
        count = r.text.count(f"unique{i:03d} of memory")
        assert count <= 1, i
        shown += count
    assert shown >= 3


async def test_related_items_are_the_depth_one_walk_of_each_item(engine, client):
    key = await _long_key(engine)
    headers = {"Authorization": f"Bearer {key}"}
    pack = await _pack(client, key, goal="field note part", limit=20, related_limit=4)
    items = _items(pack)
    assert any(i["parent_entity_id"] for i in items) and any(i["related"] for i in items)
    for item in items:
        is_passage = item["parent_entity_id"] is not None
        body = {"entity_ids": [item["id"]], "depth": 1, "limit": 4, "content_max_chars": 0}
        if not is_passage:  # every §4 relationship but the span links
            body["relationship_types"] = sorted(
                set(policy.RELATIONSHIPS) - {"PART_OF", "DERIVED_FROM"}
            )
        r = await client.post("/api/search/expand", json=body, headers=headers)
        want = [
            (n["id"], n["relationship"], n["direction"], n["score"]) for n in r.json()["neighbors"]
        ]
        got = [(n["id"], n["relationship"], n["direction"], n["score"]) for n in item["related"]]
        if got != want:  # only the budget may have emptied a lower-ranked item's list
            assert got == [] and pack["filters"]["related_left_out_for_budget"] > 0, item["id"]
        if is_passage:
            assert [n["id"] for n in item["related"]] in ([item["parent_entity_id"]], [])
        else:  # a memory's own spans are never its related items
            assert all(n["type"] != "passage" for n in item["related"])


async def test_a_capped_related_list_keeps_the_strongest_hops(engine):
    # §5 bounded work, for context's related items too: 70 CONTRADICTS (0.64) edges sort before
    # 30 DEPENDS_ON (0.98) by name; a cap must drop the weak ones, not the strong ones.
    org, sfx = "org_relcap_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _base(org, sfx)
    records.append(_ent(org, sfx, "hub", "decision", "Heron hub", "heron hub memory"))
    for i in range(70):
        records.append(_ent(org, sfx, f"c{i:02d}", "note", f"Weak {i}", "weak neighbour"))
        records.append(
            {
                "kind": "edge",
                "org": org,
                "src": "hub",
                "dst": f"c{i:02d}",
                "relationship": "CONTRADICTS",
            }
        )
    for i in range(30):
        records.append(_ent(org, sfx, f"d{i:02d}", "note", f"Strong {i}", "strong neighbour"))
        records.append(
            {
                "kind": "edge",
                "org": org,
                "src": "hub",
                "dst": f"d{i:02d}",
                "relationship": "DEPENDS_ON",
            }
        )
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_ann_{sfx}")
    request = ContextRequest(goal="heron", limit=1, related_limit=3)
    for cap in (None, 5):  # uncapped (the default), and a cap far below the hub's degree
        async with engine.connect() as conn:
            reader = await reader_by_key(conn, key=key)
            assert reader is not None
            pack = await context_pack(conn, reader, request, settings=Settings(walk_hop_cap=cap))
        (item,) = pack.sections.decisions
        assert item.id == "hub"
        assert [(n.id, n.relationship) for n in item.related] == [
            ("d00", "DEPENDS_ON"),
            ("d01", "DEPENDS_ON"),
            ("d02", "DEPENDS_ON"),
        ], cap


async def test_a_pack_asks_search_for_its_candidates_once(engine):
    # Context takes its candidates from search's pipeline, once: one look-up of the goal's
    # words and the reader's statistics, one statement per lane.
    from app.domain.search import SearchSettings, build_query
    from app.repo.explain import capture
    from app.repo.term_stats import refresh_orgs

    key = await _long_key(engine)
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
        assert reader is not None
    await refresh_orgs(engine, [reader.org_id])  # counted weights, not the fallback
    goal = "Where does the kestrel hover over the verge?"
    async with engine.connect() as conn:
        async with capture(conn) as captured:
            pack = await context_pack(conn, reader, ContextRequest(goal=goal))
        names = [st.name for st in captured]
        assert names.count("sibyl:search.words") == 1, names
        assert names.count("sibyl:search.fulltext") == 1, names
        assert names.count("sibyl:search.exact") == 1, names
        alone = await build_query(conn, reader, goal, SearchSettings())
    assert pack.total_items > 0 and alone.counted  # counted words, and a pack found with them


# --- what text each item shows (issue 12: the pack holds the answer) ----------------------------


def _survey_world(org: str, sfx: str) -> list[dict]:
    """A long survey cut into declared spans: an opening of weather remarks, three spans of
    filler, and deep in the body a span about gyrfalcons; a code note; kestrel filler memories."""
    opening = "Opening remarks about the weather on the ridge. " * 12
    filler = ["Notes on the moorland path and the fence line. " * 14 for _ in range(3)]
    deep = (
        "Counts along the shore were low this year. " * 6
        + "The gyrfalcon survey found the wintering range reaches the Baltic coast."
    )
    parts = [opening, *filler, deep]
    body, spans, at = "", [], 0
    for n, part in enumerate(parts):
        body += part
        spans.append({"start": at, "end": at + len(part), "label": f"Part {n}"})
        at += len(part)
    code = "Counting birds in code::\n\n    def tally(birds):\n        return len(birds)\n"
    records = [
        *_base(org, sfx),
        _ent(org, sfx, "survey", "document", "Gyrfalcon survey", body, spans=spans),
        _ent(org, sfx, "tally", "artifact", "Tally helper", code),
    ]
    records += [
        _ent(org, sfx, f"kes_{i}", "note", f"Kestrel {i}", "kestrel survey " + FILLER)
        for i in range(6)
    ]
    return records


async def _survey_key(engine) -> str:
    org, sfx = "org_survey_" + secrets.token_hex(4), secrets.token_hex(3)
    await import_dicts(engine, _survey_world(org, sfx))
    return await make_key(engine, f"user_ann_{sfx}")


async def test_a_memory_item_shows_its_best_matching_span_not_its_opening(engine, client):
    key = await _survey_key(engine)
    # the goal is the memory's name (exact lane) and its words fill one span deep in its body;
    # three kestrel notes holding "survey" take the reserved note lane
    pack = await _pack(client, key, goal="Gyrfalcon survey", limit=4, include_related=False)
    assert [i["id"] for i in _items(pack)].count("survey") == 1
    md = pack["markdown"]
    assert "wintering range reaches the Baltic coast" in md
    assert "Opening remarks about the weather" not in md  # the body's opening, the old text
    # the Markdown names the span the text is from, a passage of the memory to fetch_slice
    span = md.split("text from its span", 1)[1].split("`", 2)[1]
    r = await client.post(
        "/api/search/slice",
        json={"entity_id": span, "window": 0},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 200, r.text
    assert "Baltic coast" in json.dumps(r.json())


async def test_each_text_is_the_part_that_matches_the_goal(engine, client):
    key = await _survey_key(engine)
    # a small budget leaves each item a short text: it is cut around the goal's words
    pack = await _pack(
        client,
        key,
        goal="gyrfalcon wintering range",
        limit=2,
        markdown_token_budget=300,
        include_related=False,
    )
    body = pack["markdown"].split("\n", 1)[1]
    assert "wintering range reaches the Baltic" in body
    assert "Counts along the shore" not in body  # the span's opening gave way to the match


async def test_code_keeps_its_lines(engine, client):
    key = await _survey_key(engine)
    pack = await _pack(client, key, goal="tally helper birds code", include_related=False)
    md = pack["markdown"]
    # each line of the code block on its own line, indented under its bullet (a code block)
    assert "\n      def tally(birds):\n          return len(birds)" in md


async def test_better_ranked_items_show_more_text(engine, client):
    key = await _long_key(engine)
    pack = await _pack(client, key, goal="kestrel hovering field note", include_related=False)
    md = pack["markdown"]
    ranked = sorted(_items(pack), key=lambda i: -i["score"])
    assert len(ranked) >= 6

    def text_of(item_id: str) -> int:
        block = md.split(f"`{item_id}`", 1)[1]
        return len(block.split("\n- **", 1)[0].split("\n## ", 1)[0])

    sizes = [text_of(i["id"]) for i in ranked]
    # shares fall with rank (1, 1/2, 1/3 ...): the best item's text is far longer than the last's
    assert sizes[0] > 2 * sizes[-1], sizes
    assert sum(sizes[:3]) > sum(sizes[-3:]), sizes


async def _odd_key(engine, *memories: tuple[str, str, str]) -> str:
    org, sfx = "org_odd_" + secrets.token_hex(4), secrets.token_hex(3)
    records = [*_base(org, sfx)]
    records += [_ent(org, sfx, i, "note", name, body) for i, name, body in memories]
    await import_dicts(engine, records)
    return await make_key(engine, f"user_ann_{sfx}")


async def test_a_code_block_cut_short_is_closed(engine, client):
    lines = "".join(f"def f{n}(x):\n    return x*{n}  # quasarblink\n" for n in range(300))
    body = "# Code\n\nquasarblink example:\n\n```python\n" + lines + "```"
    key = await _odd_key(engine, ("code", "Quasarblink code", body))
    for budget in (300, 1000, 4000, 32000):
        pack = await _pack(client, key, goal="quasarblink", markdown_token_budget=budget, limit=50)
        md = pack["markdown"]
        assert "quasarblink" in md.split("\n", 2)[2]
        # every block a text opens is closed within its item: no item's bullet, and not the
        # closing line, is read as code
        lines = md.split("\n")
        fences = 0
        for line in lines:
            if line.startswith("- **") or line.startswith("_"):
                assert fences % 2 == 0, (budget, md)
            if line.strip().startswith("```"):
                fences += 1
        assert fences % 2 == 0, (budget, md)


async def test_a_long_passage_shows_the_stretch_with_the_goal_word(engine, client):
    # one line of 15,000 characters is one oversized span; the word sits at its end
    body = "abc " * 10 + "q" * 15_000 + " quasarblink ends the line"
    key = await _odd_key(engine, ("oneline", "One line", body))
    pack = await _pack(client, key, goal="quasarblink", include_related=False)
    assert "quasarblink ends the line" in pack["markdown"]
    assert pack["markdown"].count("quasarblink ends") == 1  # no text twice
    assert len(pack["markdown"]) <= 4000 * policy.CHARS_PER_TOKEN


async def test_a_memory_whose_match_is_its_own_item_keeps_its_opening(engine, client):
    # periodic lines: the passage's opening also occurs at the memory's start; the memory's
    # text still stops only where that passage really begins
    body = "".join("x\n" if n % 2 else "y\n" for n in range(3000)) + "quasarblink closes it"
    key = await _odd_key(engine, ("lines", "Quasarblink lines", body))
    pack = await _pack(client, key, goal="quasarblink", include_related=False)
    md = pack["markdown"]
    memory = md.split("`lines`", 1)[1].split("\n- **", 1)[0]
    assert "\n  y\n  x\n" in memory  # the memory's opening, under its bullet
    assert md.count("quasarblink closes it") == 1


def test_a_cut_reopens_and_closes_the_fenced_block_it_lies_in():
    from app.domain.context import _close_fences

    body = "Intro.\n\n```python\nx = 1\ny = 2\nz = 3\n```\n\nAfter."
    inside = body.index("y = 2")
    # a cut from inside the block to its middle: reopened with the block's own fence, closed
    assert _close_fences(body, inside, "y = 2") == "```python\ny = 2\n```"
    # a cut that opens the block and ends inside it: closed
    assert _close_fences(body, 0, "Intro.\n\n```python\nx = 1") == (
        "Intro.\n\n```python\nx = 1\n```"
    )
    # a cut holding the whole block, or none of it: unchanged
    assert _close_fences(body, 0, body) == body
    assert _close_fences(body, body.index("After"), "After.") == "After."
