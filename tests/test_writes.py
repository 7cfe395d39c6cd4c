"""Writing memories over REST (contract §3, §6, §7, §9; issue 5): the projections, re-cutting on
edit, nothing stale after an edit, a delete or a re-scope, mentions, integrity and lifecycle.

"Nothing stale" is checked on every read path: ``fetch_slice``, ``expand_neighbors`` and
``search``. The re-scope test is a pair test (as in ``test_read_rule.py``): the answers of a
project member after the change must equal their answers in a control org where the memory was
never written.
"""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import text

from tests.team import Team, answer, call, counts, scalar, snapshot

NOT_FOUND = (404, {"detail": "Entity not found"})


def tiled(parts: list[str]) -> tuple[str, list[dict]]:
    """A body made of ``parts`` and the declared spans that tile it, one per part."""
    spans, start = [], 0
    for i, part in enumerate(parts):
        spans.append({"start": start, "end": start + len(part), "label": f"Part {i}"})
        start += len(part)
    return "".join(parts), spans


async def slice_ids(client, key, entity_id: str) -> list[str]:
    r = await call(
        client, "POST", "/api/search/slice", key, json={"entity_id": entity_id, "window": 64}
    )
    assert r.status_code == 200, r.text
    return [p["id"] for p in r.json()["passages"]]


async def neighbor_ids(
    client, key, seeds: list[str], depth: int = 1, rels: list[str] | None = None
) -> list[str]:
    body: dict = {"entity_ids": seeds, "depth": depth, "limit": 24}
    if rels is not None:  # a memory's own spans come only when PART_OF/DERIVED_FROM is named
        body["relationship_types"] = rels
    r = await call(client, "POST", "/api/search/expand", key, json=body)
    assert r.status_code == 200, r.text
    return [n["id"] for n in r.json()["neighbors"]]


async def search_ids(client, key, query: str) -> set[str]:
    r = await call(client, "POST", "/api/search", key, json={"query": query, "limit": 50})
    assert r.status_code == 200, r.text
    found = set()
    for hit in r.json()["results"]:
        found.add(hit["id"])
        found.update(hit["metadata"].get("collapsed", []))
    return found


async def test_create_read_edit_delete_round_trip(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    body = {
        "id": "adr_7",
        "type": "Decision",
        "name": "  Use Postgres  ",
        "content": "We use Postgres.",
        "project": "p1",
        "metadata": {"tags": ["db"]},
    }
    r = await call(client, "POST", "/api/entities", ann, json=body)
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["id"], made["type"], made["name"]) == ("adr_7", "decision", "Use Postgres")
    assert (made["passage_kind"], made["passage_total"], made["lifecycle"]) == (None, 0, "active")
    assert (await call(client, "GET", "/api/entities/adr_7", ann)).json() == made

    # the id is taken now: the same 409 whether or not the writer can read the holder
    taken = await call(client, "POST", "/api/entities", ann, json=body)
    hidden = await call(client, "POST", "/api/entities", ann, json={**body, "id": "hid"})
    assert answer(taken) == answer(hidden)
    assert taken.status_code == 409 and "adr_7" not in taken.text and "hid" not in hidden.text

    r = await call(
        client,
        "PATCH",
        "/api/entities/adr_7",
        ann,
        json={"metadata": {"a": 1}},
        headers={"If-Match": '"1"'},
    )
    assert r.status_code == 200 and r.json()["metadata"] == {"a": 1} and r.json()["revision"] == 2
    assert r.headers["etag"] == '"2"'
    stale = await call(
        client, "PATCH", "/api/entities/adr_7", ann, json={"name": "x"}, headers={"If-Match": '"1"'}
    )
    assert answer(stale)[0] == 412
    assert (await call(client, "GET", "/api/entities/adr_7", ann)).json()["name"] == "Use Postgres"
    weak = await call(
        client,
        "PATCH",
        "/api/entities/adr_7",
        ann,
        json={"name": "y"},
        headers={"If-Match": 'W/"2"'},
    )
    assert weak.status_code == 200 and weak.json()["revision"] == 3
    bad = await call(
        client,
        "PATCH",
        "/api/entities/adr_7",
        ann,
        json={"name": "z"},
        headers={"If-Match": "soon"},
    )
    assert bad.status_code == 400
    # an identical PATCH changes nothing, not even the revision
    same = await call(client, "PATCH", "/api/entities/adr_7", ann, json={"name": "y"})
    assert same.json()["revision"] == 3 and same.json()["updated_at"] == weak.json()["updated_at"]

    assert (
        await call(client, "DELETE", "/api/entities/adr_7", ann, headers={"If-Match": "2"})
    ).status_code == 412
    assert (
        await call(client, "DELETE", "/api/entities/adr_7", ann, headers={"If-Match": "3"})
    ).status_code == 204
    assert answer(await call(client, "GET", "/api/entities/adr_7", ann)) == NOT_FOUND
    assert answer(await call(client, "DELETE", "/api/entities/adr_7", ann)) == NOT_FOUND


async def test_head_is_get_without_its_body(engine, client):
    """HEAD answers as GET (RFC 9110 §9.3.2): status, ETag and length, no body; a memory the
    reader cannot read is the HEAD of one that does not exist; a route without GET stays 405."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    memory = {"id": "head_1", "type": "note", "name": "n", "content": "c", "project": "p1"}
    assert (await call(client, "POST", "/api/entities", ann, json=memory)).status_code == 201
    got = await call(client, "GET", "/api/entities/head_1", ann)
    head = await call(client, "HEAD", "/api/entities/head_1", ann)
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["etag"] == got.headers["etag"] == '"1"'
    assert head.headers["content-length"] == str(len(got.content))

    hidden = await call(client, "HEAD", "/api/entities/hid", ann)
    missing = await call(client, "HEAD", "/api/entities/no_such_memory", ann)
    assert answer(await call(client, "GET", "/api/entities/hid", ann)) == NOT_FOUND
    assert hidden.status_code == missing.status_code == 404
    assert hidden.headers == missing.headers and hidden.content == missing.content == b""
    assert (await call(client, "HEAD", "/api/entities/head_1", None)).status_code == 401
    assert (await call(client, "HEAD", "/api/search", ann)).status_code == 405
    assert (await call(client, "HEAD", "/readyz", None)).status_code == 200


async def test_patch_null_is_refused_where_null_means_nothing(engine, client):
    """``{"content": null}`` answered 200 and changed nothing (a trial expected the body
    cleared): null is a 422 naming the field for every field that has no null, and nothing
    changes; ``""`` empties the body; ``project: null`` still takes a memory out of its project."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    memory = {"id": "nul_1", "type": "note", "name": "n", "content": "body", "project": "p1"}
    assert (await call(client, "POST", "/api/entities", ann, json=memory)).status_code == 201
    for field in ("type", "name", "content", "scope", "lifecycle", "metadata"):
        r = await call(client, "PATCH", "/api/entities/nul_1", ann, json={field: None})
        assert r.status_code == 422, (field, r.text)
        assert [e["loc"] for e in r.json()["errors"]] == [["body", field]]
        assert "leave the field out" in r.json()["errors"][0]["msg"]
    got = (await call(client, "GET", "/api/entities/nul_1", ann)).json()
    assert (got["revision"], got["content"], got["name"]) == (1, "body", "n")
    r = await call(client, "PATCH", "/api/entities/nul_1", ann, json={"content": ""})
    assert (r.status_code, r.json()["content"], r.json()["revision"]) == (200, "", 2)


async def test_patch_of_a_wrong_type_says_the_type_it_wants_once(engine, client):
    """A wrong-typed PATCH field is one reason naming the type it should have: the hidden "null
    means absent" arm once added a second, "Input should be None", which told the caller to
    send the one value these fields refuse. Nothing changes."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    memory = {"id": "typ_1", "type": "note", "name": "n", "content": "body", "project": "p1"}
    assert (await call(client, "POST", "/api/entities", ann, json=memory)).status_code == 201
    cases = {
        "type": (5, "valid string"),
        "name": (["x"], "valid string"),
        "content": (1.5, "valid string"),
        "scope": ("public", "'project', 'private' or 'org'"),
        "lifecycle": (True, "'active', 'superseded' or 'retired'"),
        "metadata": ([1], "valid dictionary"),
    }
    for field, (value, wants) in cases.items():
        r = await call(client, "PATCH", "/api/entities/typ_1", ann, json={field: value})
        assert r.status_code == 422, (field, r.text)
        errors = r.json()["errors"]
        assert [e["loc"] for e in errors] == [["body", field]], (field, errors)
        assert wants in errors[0]["msg"] and "None" not in r.text, (field, r.text)
    got = (await call(client, "GET", "/api/entities/typ_1", ann)).json()
    assert (got["revision"], got["content"], got["name"]) == (1, "body", "n")


def labelled(spans: list[dict], label: str) -> list[dict]:
    """``spans`` with the first one's label replaced."""
    return [{**spans[0], "label": label}, *spans[1:]]


async def test_names_and_labels_in_any_script_are_one_printable_line(engine, client):
    """The other half of the pair below: names and span labels in right-to-left scripts (with
    their direction marks), with emoji joined by ZWJ, are stored as sent; a Markdown heading
    holding an ANSI escape becomes a breadcrumb without it (the body keeps it verbatim)."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    content, spans = tiled(["aaaa", "bbbb"])
    for name in ("\u05e9\u05dc\u05d5\u05dd\u200f notes", "\U0001f469\u200d\U0001f4bb log"):
        body = {"type": "note", "name": name, "content": content, "spans": labelled(spans, name)}
        r = await call(client, "POST", "/api/entities", ann, json={**body, "project": "p1"})
        assert r.status_code == 201, r.text
        assert r.json()["name"] == name
        sliced = await call(
            client,
            "POST",
            "/api/search/slice",
            ann,
            json={"entity_id": r.json()["id"], "window": 0},
        )
        assert sliced.json()["passages"][0]["breadcrumb"] == name, sliced.text

    heading = "# Red \x1b[31mALERT\x1b[0m\x07 here\n\n" + "wombat " * 300
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"type": "document", "name": "d", "content": heading, "project": "p1"},
    )
    assert r.status_code == 201 and r.json()["content"] == heading
    sliced = await call(
        client, "POST", "/api/search/slice", ann, json={"entity_id": r.json()["id"]}
    )
    crumbs = [p["breadcrumb"] for p in sliced.json()["passages"]]
    assert crumbs and crumbs[0] == "Red [31mALERT [0m here", crumbs


async def test_bad_input_is_400_with_the_reason(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    content, spans = tiled(["aaaa", "bbbb"])
    cases = [
        ({"type": "note", "name": "  "}, "name"),
        ({"type": "note", "name": "a\x1b[31mred"}, "control characters"),
        ({"type": "note", "name": "two\nlines"}, "control characters"),
        ({"type": "note", "name": "two\u2028lines"}, "control characters"),  # LINE SEPARATOR
        ({"type": "note", "name": "evil\u202etxt.exe"}, "bidirectional"),  # RIGHT-TO-LEFT OVERRIDE
        ({"type": "note", "name": "\u200b\ufeff "}, "not blank"),  # shows as nothing
        (
            {"type": "note", "name": "x", "content": content, "spans": labelled(spans, "\x1b[31m")},
            "spans[0].label must be one line",
        ),
        ({"type": "Not a word", "name": "x"}, "type"),
        ({"type": "passage", "name": "x"}, "reserved"),
        ({"type": "note", "name": "x", "id": "passage_0123"}, "passage_"),
        ({"type": "note", "name": "x", "id": "a b"}, "id"),
        # the pattern admits them, but clients resolve /entities/.. as a parent path
        ({"type": "note", "name": "x", "id": ".."}, "URL path"),
        ({"type": "note", "name": "x", "id": " . "}, "URL path"),
        ({"type": "note", "name": "x", "content": "a\x00b"}, "content"),
        ({"type": "note", "name": "x", "content": content, "spans": spans[:1]}, "span"),
        ({"type": "note", "name": "x", "content": content, "spans": [spans[1], spans[0]]}, "span"),
    ]
    before = await counts(engine, t.org)
    for body, word in cases:
        r = await call(client, "POST", "/api/entities", ann, json=body)
        assert r.status_code == 400, (body, r.text)
        assert word in r.json()["detail"], r.json()
    r = await call(client, "POST", "/api/entities", ann, json={"type": "note", "name": 3})
    assert r.status_code == 422
    assert await counts(engine, t.org) == before
    # a passage id is not a memory
    doc, doc_spans = tiled(["x" * 10, "y" * 10])
    made = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"type": "document", "name": "d", "content": doc, "spans": doc_spans, "project": "p1"},
    )
    first = (await slice_ids(client, ann, made.json()["id"]))[0]
    assert answer(await call(client, "GET", f"/api/entities/{first}", ann)) == NOT_FOUND


async def test_an_edit_from_five_spans_to_two_leaves_nothing_stale(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    parts = [f"# Old part {i}\n\n" + f"quokka{i} " * 40 + "\n\n" for i in range(5)]
    content, spans = tiled(parts)
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={
            "id": "doc",
            "type": "document",
            "name": "Doc",
            "content": content,
            "spans": spans,
            "project": "p1",
        },
    )
    assert r.status_code == 201 and r.json()["passage_total"] == 5
    old = await slice_ids(client, ann, "doc")
    assert len(old) == 5
    assert set(old) <= set(await neighbor_ids(client, ann, ["doc"], rels=["PART_OF"]))
    assert set(old) & await search_ids(client, ann, "quokka3")

    new_content, new_spans = tiled(["# New A\n\nplatypus one.\n\n", "# New B\n\nplatypus two.\n"])
    edit = {"content": new_content, "spans": new_spans}
    for _ in range(3):  # the same edit three times: one revision bump, still two spans
        r = await call(client, "PATCH", "/api/entities/doc", ann, json=edit)
        assert r.status_code == 200
        assert (r.json()["revision"], r.json()["passage_total"]) == (2, 2)
    new = await slice_ids(client, ann, "doc")
    assert len(new) == 2 and not set(new) & set(old)
    sliced = (
        await call(client, "POST", "/api/search/slice", ann, json={"entity_id": "doc"})
    ).json()
    assert (sliced["passage_total"], sliced["covers_parent"]) == (2, True)
    for stale in old:
        r = await call(client, "POST", "/api/search/slice", ann, json={"entity_id": stale})
        assert answer(r) == NOT_FOUND
    neighbors = await neighbor_ids(client, ann, ["doc"], rels=["PART_OF"])
    assert set(new) <= set(neighbors) and not set(old) & set(neighbors)
    r = await call(client, "POST", "/api/search/expand", ann, json={"entity_ids": old})
    assert r.json()["origins"] == [] and r.json()["unresolved"] == old
    assert await search_ids(client, ann, "quokka3") == set()
    assert set(new) & await search_ids(client, ann, "platypus")
    assert await scalar(engine, "SELECT count(*) FROM passages WHERE org_id = :o", o=t.org) == 2


async def test_delete_then_recreate_with_the_same_id(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    content, spans = tiled(["first " * 20, "second " * 20, "third " * 20])
    body = {
        "id": "memo",
        "type": "note",
        "name": "Memo",
        "content": content,
        "spans": spans,
        "project": "p1",
    }
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    old = await slice_ids(client, ann, "memo")
    assert (await call(client, "DELETE", "/api/entities/memo", ann)).status_code == 204
    assert await scalar(engine, "SELECT count(*) FROM passages WHERE org_id = :o", o=t.org) == 0
    content, spans = tiled(["fourth " * 20, "fifth " * 20])
    r = await call(
        client, "POST", "/api/entities", ann, json={**body, "content": content, "spans": spans}
    )
    assert r.status_code == 201 and r.json()["revision"] == 1
    new = await slice_ids(client, ann, "memo")
    async with engine.connect() as conn:
        stored = (
            (
                await conn.execute(
                    text("SELECT id FROM passages WHERE org_id = :o ORDER BY passage_index"),
                    {"o": t.org},
                )
            )
            .scalars()
            .all()
        )
    assert stored == new and len(new) == 2 and not set(new) & set(old)
    for stale in old:
        r = await call(client, "POST", "/api/search/slice", ann, json={"entity_id": stale})
        assert answer(r) == NOT_FOUND


LONG = "\n\n".join(
    f"## Section {i}\n\n" + " ".join(f"wombat{i}_{j}" for j in range(150)) for i in range(5)
)


def long_doc(org_records: Team, present: bool) -> list[dict]:
    if not present:
        return []
    return [
        {
            "kind": "entity",
            "id": "longdoc",
            "org": org_records.org,
            "type": "document",
            "name": "Long doc",
            "content": LONG,
            "project": "p1",
            "scope": "project",
            "owner": org_records.u("ann"),
        },
        {
            "kind": "edge",
            "org": org_records.org,
            "src": "n1",
            "dst": "longdoc",
            "relationship": "REFERENCES",
        },
    ]


async def test_tightening_scope_without_a_body_edit_hides_every_derived_row(engine, client):
    t = Team()
    await t.load(engine, extra=long_doc(t, True))
    control = Team()
    await control.load(engine, extra=long_doc(control, False))
    vic, vic_control = await t.key(engine, "vic"), await control.key(engine, "vic")
    ann = await t.key(engine, "ann")

    spans = await slice_ids(client, vic, "longdoc")  # a viewer of p1 reads it, for now
    assert len(spans) >= 3
    linked = await neighbor_ids(client, vic, ["n1"], depth=2, rels=["REFERENCES", "PART_OF"])
    assert set(spans) <= set(linked)
    assert set(spans) & await search_ids(client, vic, "wombat2_7")

    r = await call(client, "PATCH", "/api/entities/longdoc", ann, json={"scope": "private"})
    assert r.status_code == 200 and r.json()["passage_total"] == len(spans)
    assert await slice_ids(client, ann, "longdoc") == spans  # ids kept: the text did not change

    async def same(method: str, path: str, body: dict) -> None:
        seen = await call(client, method, path, vic, json=body)
        expected = await call(client, method, path, vic_control, json=body)
        assert answer(seen) == answer(expected), (path, body)

    for span in [spans[0], spans[-1], "longdoc"]:
        await same("POST", "/api/search/slice", {"entity_id": span})
        await same("POST", "/api/search/expand", {"entity_ids": [span], "depth": 2})
    await same("POST", "/api/search/expand", {"entity_ids": ["n1"], "depth": 3, "limit": 24})
    await same(
        "POST",
        "/api/search/expand",
        {
            "entity_ids": ["n1", spans[1]],
            "relationship_types": ["PART_OF", "REFERENCES"],
            "depth": 2,
        },
    )
    await same("POST", "/api/search", {"query": "wombat2_7"})
    await same("POST", "/api/search", {"query": spans[2]})
    await same("POST", "/api/search", {"query": "Long doc"})
    await same("POST", "/api/context/pack", {"goal": "wombat3_1 section"})
    await same("GET", "/api/entities/longdoc", {})


async def test_mentions_are_rederived_on_every_body_edit_and_only_to_readable_memories(
    engine, client
):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")

    async def mentions() -> list[str]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT dst_id FROM mentions WHERE org_id = :o AND src_id = 'm' ORDER BY dst_id"
                ),
                {"o": t.org},
            )
            return list(rows.scalars())

    body = {
        "id": "m",
        "type": "note",
        "name": "M",
        "project": "p1",
        "content": "See [[n2]], [[hid]], [[nope]], [[shared]] and [[m]].",
    }
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    assert await mentions() == ["n2", "shared"]  # hid is unreadable to ann; nope does not exist
    await call(client, "PATCH", "/api/entities/m", ann, json={"name": "Renamed"})
    assert await mentions() == ["n2", "shared"]
    await call(client, "PATCH", "/api/entities/m", ann, json={"content": "Now [[pub]] only."})
    assert await mentions() == ["pub"]
    assert "m" in await neighbor_ids(client, ann, ["pub"])


async def test_an_editor_who_cannot_read_a_link_target_keeps_the_owners_mention_to_it(
    engine, client
):
    """A colleague's edit that keeps the text of a link to a memory only the owner reads keeps
    the owner's mention (a trial: a typo fix turned it into a pending link, lost to every walk
    until someone who reads the target saved the body again); the colleague's answers are the
    ones they would get if that memory did not exist."""
    t, control = await Team().load(engine), await Team().load(engine, omit="hid")

    async def mentions(org: str) -> list[str]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT dst_id FROM mentions WHERE org_id = :o AND src_id = 'b'"),
                {"o": org},
            )
            return sorted(rows.scalars())

    body = {"id": "b", "type": "note", "name": "B", "project": "p1", "content": "[[hid]], [[n2]]."}
    seen: dict[str, list] = {}
    for team in (t, control):
        bob, ann = await team.key(engine, "bob"), await team.key(engine, "ann")
        assert (await call(client, "POST", "/api/entities", bob, json=body)).status_code == 201
        answers = []
        for content in ("[[hid]], [[n2]]. A typo fixed.", "[[hid]], [[n2]]. A typo fixed."):
            r = await call(client, "PATCH", "/api/entities/b", ann, json={"content": content})
            assert r.status_code == 200, r.text
            answers.append({k: v for k, v in r.json().items() if not k.endswith("_at")})
        got = await call(client, "GET", "/api/entities/b", ann)
        answers.append({k: v for k, v in got.json().items() if not k.endswith("_at")})
        seen[team.org] = json.loads(json.dumps(answers).replace(team.org, "ORG"))
    assert await mentions(t.org) == ["hid", "n2"]  # bob's mention stays
    assert await mentions(control.org) == ["n2"]  # no hid: the link waits
    assert seen[t.org] == seen[control.org]  # ann cannot tell the two orgs apart

    # the editor who deletes the link's text removes the mention, as any body edit does
    ann = await t.key(engine, "ann")
    r = await call(client, "PATCH", "/api/entities/b", ann, json={"content": "[[n2]] only."})
    assert r.status_code == 200 and await mentions(t.org) == ["n2"]


async def test_a_link_inside_code_is_code_not_a_mention(engine, client):
    """``[[...]]`` in a fenced block or an inline code span (a TOML array of tables, a nested
    list, a C++ attribute) is code: no mention, no pending link; the same ids written as links
    outside code are mentions. Two stray backticks in different paragraphs hide nothing."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")

    async def links_of(src: str) -> tuple[list[str], list[str]]:
        async with engine.connect() as conn:
            got = []
            for table in ("mentions", "pending_links"):
                rows = await conn.execute(
                    text(
                        f"SELECT dst_id FROM {table} WHERE org_id = :o AND src_id = :s"
                        " ORDER BY dst_id"
                    ),
                    {"o": t.org, "s": src},
                )
                got.append(list(rows.scalars()))
            return got[0], got[1]

    code = (
        "Config:\n\n```toml\n[[n2]]\nname = 'x'\n```\n\n"
        "Inline `x[[pub]]` and ``[[nope]]`` (RST).\n\nA stray ` here.\n\n"
        "Then [[shared]] as a link.\n\nAnother stray ` there."
    )
    body = {"id": "coded", "type": "note", "name": "C", "project": "p1", "content": code}
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    assert await links_of("coded") == (["shared"], [])
    plain = code.replace("`", "")  # the same ids, no code: every one a link
    r = await call(client, "PATCH", "/api/entities/coded", ann, json={"content": plain})
    assert r.status_code == 200, r.text
    assert await links_of("coded") == (["n2", "pub", "shared"], ["nope"])


async def test_edge_integrity(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    for i in "abc":
        await call(
            client,
            "POST",
            "/api/entities",
            ann,
            json={"id": i, "type": "plan", "name": i, "project": "p1"},
        )

    async def edge(src, rel, dst):
        return await call(
            client, "POST", "/api/edges", ann, json={"src": src, "relationship": rel, "dst": dst}
        )

    assert (await edge("a", "RELATED_TO", "a")).status_code == 400
    assert (await edge("a", "MENTIONS", "b")).status_code == 400
    assert (await edge("a", "BAD-NAME", "b")).status_code == 400
    assert (await edge("a", "SUPERSEDES", "b")).status_code == 201
    assert (await edge("b", "SUPERSEDES", "c")).status_code == 201
    before = await counts(engine, t.org)
    state = await snapshot(engine, t.org)
    cycle = await edge("c", "supersedes", "a")
    assert answer(cycle) == (409, {"detail": "This SUPERSEDES edge would close a cycle"})
    assert (await edge("b", "SUPERSEDES", "a")).status_code == 409
    assert await counts(engine, t.org) == before and await snapshot(engine, t.org) == state
    assert (await edge("c", "RELATED_TO", "a")).status_code == 201  # other relationships may loop
    again = await edge("a", "supersedes", "b")
    assert again.status_code == 200 and again.json()["created"] is False
    assert await scalar(engine, "SELECT count(*) FROM edges WHERE org_id = :o", o=t.org) == 3


async def test_supersedes_marks_only_its_target(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    before = {row[0]: row for row in await snapshot(engine, t.org)}
    r = await call(
        client,
        "POST",
        "/api/edges",
        ann,
        json={"src": "n1", "relationship": "SUPERSEDES", "dst": "n2"},
    )
    assert r.json() == {
        "src": "n1",
        "relationship": "SUPERSEDES",
        "dst": "n2",
        "created": True,
        "superseded": "n2",
    }
    after = {row[0]: row for row in await snapshot(engine, t.org)}
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"n2"}
    got = (await call(client, "GET", "/api/entities/n2", ann)).json()
    assert (got["lifecycle"], got["revision"]) == ("superseded", 2)
    # deleting the edge changes no lifecycle; un-marking is an explicit write
    await call(
        client,
        "DELETE",
        "/api/edges",
        ann,
        params={"src": "n1", "relationship": "SUPERSEDES", "dst": "n2"},
    )
    assert (await call(client, "GET", "/api/entities/n2", ann)).json()["lifecycle"] == "superseded"
    r = await call(client, "PATCH", "/api/entities/n2", ann, json={"lifecycle": "active"})
    assert r.json()["lifecycle"] == "active"
    r = await call(client, "PATCH", "/api/entities/n1", ann, json={"lifecycle": "retired"})
    assert r.json()["lifecycle"] == "retired"
    # a retired target stays retired
    r = await call(
        client,
        "POST",
        "/api/edges",
        ann,
        json={"src": "n2", "relationship": "SUPERSEDES", "dst": "n1"},
    )
    assert r.status_code == 201 and r.json()["superseded"] is None
    assert (await call(client, "GET", "/api/entities/n1", ann)).json()["lifecycle"] == "retired"


async def test_deleting_a_memory_removes_everything_derived_from_it(engine, client):
    t = await Team().load(engine)
    ann, bob = await t.key(engine, "ann"), await t.key(engine, "bob")
    content, spans = tiled(["one " * 30, "two " * 30, "three " * 30])
    body = {"id": "x", "type": "note", "name": "X", "content": content + " [[n1]]", "project": "p1"}
    body["spans"] = [*spans[:-1], {**spans[-1], "end": len(body["content"])}]
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    await call(client, "PATCH", "/api/entities/n2", ann, json={"content": "Points at [[x]]."})
    await call(
        client,
        "POST",
        "/api/edges",
        ann,
        json={"src": "x", "relationship": "DEPENDS_ON", "dst": "n1"},
    )
    await call(
        client, "POST", "/api/edges", ann, json={"src": "n2", "relationship": "BLOCKS", "dst": "x"}
    )
    await call(client, "PATCH", "/api/entities/shared", bob, json={"content": "[[x]]"})
    await call(client, "POST", "/api/entities", ann, json={"id": "y", "type": "note", "name": "Y"})
    await call(client, "PUT", f"/api/entities/y/grants/{t.u('vic')}", ann)
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO communities (org_id, id, audience, size) VALUES (:o, 'c1', 'p1', 2)"),
            {"o": t.org},
        )
        await conn.execute(
            text(
                "INSERT INTO community_members (org_id, community_id, entity_id)"
                " VALUES (:o, 'c1', 'x'), (:o, 'c1', 'n1')"
            ),
            {"o": t.org},
        )
    before = await counts(engine, t.org)
    assert (before["passages"], before["mentions"], before["edges"]) == (3, 3, 2)

    assert (await call(client, "DELETE", "/api/entities/x", ann)).status_code == 204
    after = await counts(engine, t.org)
    assert after["entities"] == before["entities"] - 1
    assert (after["passages"], after["mentions"], after["edges"]) == (0, 0, 0)
    # the community x was in is retired with it (contract §9: links changed), n1's membership too
    assert after["community_members"] == 0
    assert after["entity_grants"] == before["entity_grants"]
    assert (await call(client, "DELETE", "/api/entities/y", ann)).status_code == 204
    assert (await counts(engine, t.org))["entity_grants"] == before["entity_grants"] - 1


async def test_evidence_and_prose_projections_on_rest_writes(engine, client):
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    log = "".join(f"12:00:{i:02d} step {i} ok\n" for i in range(100))
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={
            "id": "run",
            "type": "observation",
            "name": "Run log",
            "content": log,
            "project": "p1",
        },
    )
    assert (r.json()["passage_kind"], r.json()["passage_total"]) == ("evidence", 3)
    sliced = (
        await call(
            client, "POST", "/api/search/slice", ann, json={"entity_id": "run", "window": 64}
        )
    ).json()
    assert sliced["covers_parent"] is False
    assert [p["breadcrumb"] for p in sliced["passages"]] == [None, None, None]
    hops = (
        await call(
            client,
            "POST",
            "/api/search/expand",
            ann,
            json={"entity_ids": ["run"], "relationship_types": ["DERIVED_FROM", "PART_OF"]},
        )
    ).json()
    assert {n["relationship"] for n in hops["neighbors"] if n["parent_entity_id"] == "run"} == {
        "DERIVED_FROM"
    }

    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"id": "essay", "type": "document", "name": "Essay", "content": LONG, "project": "p1"},
    )
    assert r.json()["passage_kind"] == "prose" and r.json()["passage_total"] >= 3
    first = await slice_ids(client, ann, "essay")
    r = await call(client, "PATCH", "/api/entities/essay", ann, json={"content": "Short now."})
    assert (r.json()["passage_kind"], r.json()["passage_total"]) == (None, 0)
    for stale in first:
        assert (
            answer(await call(client, "POST", "/api/search/slice", ann, json={"entity_id": stale}))
            == NOT_FOUND
        )


async def test_a_never_cut_body_too_rich_to_index_is_a_400_not_a_500(engine, client):
    """Bodies are indexed whole (issue 12); a task body of ~990,000 characters of distinct
    tokens passes PostgreSQL's 1 MB tsvector limit: the write is refused with a 400 and leaves
    nothing behind, while an ordinary long task body is accepted and searchable."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    tokens = " ".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(30_000))
    body = {"id": "t_rich", "type": "task", "name": "Rich", "content": tokens, "project": "p1"}
    r = await call(client, "POST", "/api/entities", ann, json=body)
    assert r.status_code == 400 and "too many distinct words" in r.json()["detail"]
    assert (await call(client, "GET", "/api/entities/t_rich", ann)).status_code == 404
    long_task = ("plain words again " * 30_000) + "zebrafinch"
    ok = {**body, "id": "t_long", "content": long_task}
    assert (await call(client, "POST", "/api/entities", ann, json=ok)).status_code == 201
    assert "t_long" in await search_ids(client, ann, "zebrafinch")


async def test_a_path_id_names_exactly_one_memory_spaces_included(engine, client):
    # An id in the path is compared as sent: `memo ` (with a trailing space) is no memory, so
    # GET, PATCH, DELETE and a grant on it answer as for any absent id and leave `memo` alone.
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    body = {"id": "memo", "type": "note", "name": "Memo", "content": "kept", "project": "p1"}
    assert (await call(client, "POST", "/api/entities", ann, json=body)).status_code == 201
    absent = answer(await call(client, "GET", "/api/entities/nothing_here", ann))
    for method, path, kwargs in (
        ("GET", "/api/entities/memo%20", {}),
        ("PATCH", "/api/entities/memo%20", {"json": {"name": "Changed"}}),
        ("DELETE", "/api/entities/%20memo", {}),
        ("PUT", "/api/entities/memo%20/grants/user_bob", {}),
    ):
        got = answer(await call(client, method, path, ann, **kwargs))
        assert got == absent, (method, path, got)
    r = await call(client, "GET", "/api/entities/memo", ann)
    assert r.status_code == 200 and r.json()["name"] == "Memo" and r.json()["revision"] == 1


async def test_an_id_of_dots_is_refused_only_as_a_dot_segment(engine, client):
    """``.`` and ``..`` name no URL path (clients resolve them), so they are refused where an
    id is chosen; ``...`` is an ordinary id, created, read and deleted by its path."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    made = await call(
        client, "POST", "/api/entities", ann, json={"type": "note", "name": "x", "id": "..."}
    )
    assert made.status_code == 201, made.text
    assert (await call(client, "GET", "/api/entities/...", ann)).status_code == 200
    assert (await call(client, "DELETE", "/api/entities/...", ann)).status_code == 204
    refused = await call(
        client, "POST", "/api/entities", ann, json={"type": "note", "name": "x", "id": ".."}
    )
    assert refused.status_code == 400
    assert refused.json() == {"detail": "id cannot be '.' or '..': a URL path cannot name it"}


async def test_deleting_an_edge_names_it_once_and_only_it(engine, client):
    """A delete removes the one edge its three parameters name: a repeated or an unknown
    parameter is a 400 and nothing is deleted (a trial: `dst=a&dst=b` deleted the edge to b)."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    for dst in ("n2", "shared"):
        edge = {"src": "n1", "relationship": "DEPENDS_ON", "dst": dst}
        assert (await call(client, "POST", "/api/edges", ann, json=edge)).status_code == 201
    before = await counts(engine, t.org)
    base = "/api/edges?src=n1&relationship=DEPENDS_ON"
    for query, says in [
        (f"{base}&dst=n2&dst=shared", "(dst repeated)"),
        (f"{base}&dst=n2&src=n1", "(src repeated)"),
        (f"{base}&dst=n2&dry_run=1", "only src, relationship and dst"),
    ]:
        r = await call(client, "DELETE", query, ann)
        assert r.status_code == 400 and says in r.json()["detail"], (query, r.text)
        assert (await call(client, "DELETE", query, None)).status_code == 401  # the key first
    assert await counts(engine, t.org) == before
    assert (await call(client, "DELETE", f"{base}&dst=shared", ann)).status_code == 204
    assert (await counts(engine, t.org))["edges"] == before["edges"] - 1
