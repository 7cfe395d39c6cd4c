"""Real data in, whole: ``sibyl-pg import --on-error skip`` leaves out exactly the lines the rules
refuse (and REST refuses the same records), a file naming one id twice imports the same every
time, long paragraphs are cut within the bound, footnotes and code samples make no links."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.domain import spans, write_rules
from app.importers import ndjson
from tests.builders import import_dicts
from tests.team import Team, call, scalar

SIBYL = str(Path(sys.executable).with_name("sibyl-pg"))


def graph(t: Team, memories: int = 150) -> list[dict[str, Any]]:
    """A graph in ``t``'s project p1: memories g0..g(n-1), each depending on the one before,
    every tenth superseding the one before it."""
    recs: list[dict[str, Any]] = []
    for i in range(memories):
        recs.append(
            {
                "kind": "entity",
                "org": t.org,
                "id": f"g{i}",
                "type": "note",
                "name": f"Memory {i}",
                "content": f"Body {i}.",
                "project": "p1",
                "owner": t.u("ann"),
            }
        )
    for i in range(1, memories):
        rel = "SUPERSEDES" if i % 10 == 0 else "DEPENDS_ON"
        recs.append(
            {"kind": "edge", "org": t.org, "src": f"g{i}", "dst": f"g{i - 1}", "relationship": rel}
        )
    return recs


def refused_lines(t: Team) -> list[tuple[str, str, str]]:
    """(raw line, rule, reason) of lines the rules refuse, one of each kind of refusal."""
    org = t.org

    def line(obj: dict[str, Any]) -> str:
        return json.dumps(obj)

    return [
        (
            line(
                {
                    "kind": "edge",
                    "org": org,
                    "src": "g9",
                    "dst": "g10",
                    "relationship": "SUPERSEDES",
                }
            ),
            "SUPERSEDES cycle",
            write_rules.CYCLE,
        ),
        (
            line(
                {
                    "kind": "entity",
                    "org": org,
                    "id": "psg",
                    "type": "passage",
                    "name": "P",
                    "project": "p1",
                    "owner": t.u("ann"),
                }
            ),
            "reserved type",
            write_rules.RESERVED_TYPE,
        ),
        (
            line(
                {
                    "kind": "entity",
                    "org": org,
                    "id": "passage_9",
                    "type": "note",
                    "name": "P",
                    "project": "p1",
                    "owner": t.u("ann"),
                }
            ),
            "reserved id",
            write_rules.RESERVED_ID,
        ),
        (
            line({"kind": "edge", "org": org, "src": "g3", "dst": "g3", "relationship": "BLOCKS"}),
            "link to itself",
            write_rules.SELF_EDGE,
        ),
        (
            '{"kind": "entity", "org": "' + org + '", "id": "broken", ',
            "malformed",
            "not valid JSON",
        ),
    ]


async def test_skip_imports_every_other_line_and_lists_exactly_the_refused_ones(
    engine, client, database_url, tmp_path
):
    t = await Team().load(engine)
    good = [json.dumps(r) for r in graph(t)]
    bad = refused_lines(t)
    lines = list(good)
    for k, (raw, _, _) in enumerate(bad[1:]):  # 5 of 304 lines (1.6 %), spread over the file
        lines.insert(50 * (k + 1), raw)
    lines.append(bad[0][0])  # after the edge it reverses: the one REST would refuse
    positions = {raw: n for n, raw in enumerate(lines, start=1)}
    path = tmp_path / "graph.ndjson"
    path.write_text("\n".join(lines) + "\n")
    rejects = tmp_path / "refused.ndjson"
    env = {**os.environ, "DATABASE_URL": database_url}

    stopped = subprocess.run(
        [SIBYL, "import", str(path)], env=env, capture_output=True, text=True, timeout=120
    )  # the default: all or nothing, the first refused line named
    assert stopped.returncode == 1 and "nothing of the file was written" in stopped.stderr
    assert (
        await scalar(
            engine, "SELECT count(*) FROM entities WHERE org_id = :o AND id LIKE 'g%'", o=t.org
        )
        == 0
    )

    done = subprocess.run(
        [SIBYL, "import", str(path), "--on-error", "skip", "--rejects", str(rejects)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr  # some lines were refused
    listed = [json.loads(x) for x in rejects.read_text().splitlines()]
    assert [(r["line"], r["rule"]) for r in listed] == sorted(
        (positions[raw], rule) for raw, rule, _ in bad
    )
    for r in listed:
        reason = next(reason for raw, rule, reason in bad if positions[raw] == r["line"])
        assert reason in r["reason"]
    assert f"rejected: {len(bad)} lines" in done.stdout
    # everything else is there, nothing of the refused lines is
    assert (
        await scalar(
            engine, "SELECT count(*) FROM entities WHERE org_id = :o AND id LIKE 'g%'", o=t.org
        )
        == 150
    )
    assert await scalar(engine, "SELECT count(*) FROM edges WHERE org_id = :o", o=t.org) == 149
    assert (
        await scalar(
            engine,
            "SELECT count(*) FROM entities WHERE org_id = :o"
            " AND id IN ('psg', 'passage_9', 'broken')",
            o=t.org,
        )
        == 0
    )
    # importing it again changes nothing and refuses the same lines
    again = subprocess.run(
        [SIBYL, "import", str(path), "--on-error", "skip", "--rejects", str(rejects)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 3
    assert "entity: 0 created, 150 unchanged" in again.stdout
    assert "edge: 149 unchanged, 0 written" in again.stdout
    assert [json.loads(x)["line"] for x in rejects.read_text().splitlines()] == [
        r["line"] for r in listed
    ]

    # REST refuses the same records, with the same reasons
    key = await t.key(engine, "ann")
    for r in listed:
        record = r.get("record")
        if record is None:  # not JSON: not JSON over REST either
            sent = await client.post(
                "/api/entities",
                content=r["text"],
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            assert sent.status_code == 422
            continue
        if record["kind"] == "edge":
            body = {k: record[k] for k in ("src", "relationship", "dst")}
            sent = await call(client, "POST", "/api/edges", key, json=body)
        else:
            body = {k: record[k] for k in ("id", "type", "name")} | {"project": "p1"}
            sent = await call(client, "POST", "/api/entities", key, json=body)
        assert sent.status_code in (400, 409), sent.text
        assert sent.json()["detail"] == r["reason"]
    # ... and accepts the same records when the rule is met (the pair)
    ok = await call(
        client,
        "POST",
        "/api/edges",
        key,
        json={"src": "g12", "relationship": "SUPERSEDES", "dst": "g11"},
    )
    assert ok.status_code in (200, 201)
    made = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={"id": "psg", "type": "note", "name": "P", "project": "p1"},
    )
    assert made.status_code == 201


async def test_skip_leaves_out_what_depends_on_a_refused_line(engine):
    t = await Team().load(engine)
    recs = [
        {
            "kind": "entity",
            "org": t.org,
            "id": "x1",
            "type": "passage",
            "name": "X",
            "project": "p1",
            "owner": t.u("ann"),
        },
        {
            "kind": "entity",
            "org": t.org,
            "id": "x2",
            "type": "note",
            "name": "Y",
            "project": "p1",
            "owner": t.u("ann"),
        },
        {"kind": "edge", "org": t.org, "src": "x2", "dst": "x1", "relationship": "DEPENDS_ON"},
        {"kind": "edge", "org": t.org, "src": "x2", "dst": "n1", "relationship": "DEPENDS_ON"},
    ]
    refused: list[ndjson.Refusal] = []
    summary = await ndjson.import_records(
        engine, ndjson.from_dicts(recs), on_error="skip", on_refused=refused.append
    )
    assert [(r.line, r.rule) for r in refused] == [(1, "reserved type"), (3, "missing reference")]
    assert refused[1].reason == f"edge dst 'x1' does not exist in org '{t.org}'"
    assert summary.rejected == {"reserved type": 1, "missing reference": 1}
    assert (
        await scalar(
            engine, "SELECT count(*) FROM edges WHERE org_id = :o AND src_id = 'x2'", o=t.org
        )
        == 1
    )


async def test_with_skip_a_refused_line_overrides_nothing(engine):
    """A trial's file stated ``mem_y`` on line 1, then on line 2 a line the rules refuse (the
    reserved type ``passage``; or a project that does not exist): ``mem_y`` was stored by
    neither, listed by neither, and the summary counted line 1 as overridden. A refused line is
    now as if it were not in the file: line 1 is written, line 2 alone is in the rejects. The
    pair: a later line the rules accept still wins over line 1."""
    t = await Team().load(engine)

    def note(line_id: str, **fields: Any) -> dict[str, Any]:
        return {
            "kind": "entity",
            "org": t.org,
            "id": line_id,
            "type": "note",
            "name": "Y",
            "content": "kept",
            "project": "p1",
            "owner": t.u("ann"),
            **fields,
        }

    cases = [
        ("refused_type", {"type": "passage"}, "kept", "reserved type"),
        ("refused_project", {"project": "no_such_project"}, "kept", "missing reference"),
        ("accepted", {"content": "the later line"}, "the later line", None),
    ]
    for suffix, later, stored, rule in cases:
        mem = f"mem_{suffix}"
        refused: list[ndjson.Refusal] = []
        summary = await ndjson.import_records(
            engine,
            ndjson.from_dicts([note(mem), note(mem, **later)]),
            on_error="skip",
            on_refused=refused.append,
        )
        content = await scalar(
            engine, "SELECT content FROM entities WHERE org_id = :o AND id = :i", o=t.org, i=mem
        )
        assert content == stored, suffix
        if rule is None:
            assert refused == [] and summary.outcomes["entity:overridden"] == 1
        else:
            assert [(r.line, r.rule) for r in refused] == [(2, rule)], suffix
            assert summary.outcomes["entity:created"] == 1
            assert "entity:overridden" not in summary.outcomes


async def test_with_skip_a_refused_line_is_as_if_it_were_not_in_the_file(engine):
    """A review's cases: what refers to a key whose last line is refused (an edge, a mention)
    finds the earlier line's row, and SUPERSEDES cycles are judged in line order without the
    refused line: the same rows as the file without that line."""
    t = await Team().load(engine)

    def memory(mid: str, owner: str) -> dict[str, Any]:
        return {
            "kind": "entity",
            "org": t.org,
            "id": mid,
            "type": "note",
            "name": mid,
            "content": f"{mid} body",
            "project": "p1",
            "owner": owner,
        }

    def edge(src: str, dst: str, rel: str) -> dict[str, Any]:
        return {"kind": "edge", "org": t.org, "src": src, "dst": dst, "relationship": rel}

    ann = t.u("ann")
    refused: list[ndjson.Refusal] = []
    summary = await ndjson.import_records(
        engine,
        ndjson.from_dicts(
            [
                memory("rf_a", ann),
                memory("rf_b", ann),
                edge("rf_a", "rf_b", "DEPENDS_ON"),
                {"kind": "mention", "org": t.org, "src": "rf_b", "dst": "rf_a"},
                memory("rf_a", "user_nobody"),  # refused: no such user
            ]
        ),
        on_error="skip",
        on_refused=refused.append,
    )
    assert [(r.line, r.rule) for r in refused] == [(5, "missing reference")]
    assert summary.outcomes["edge:written"] == 1 and summary.outcomes["mention:written"] == 1
    assert summary.outcomes["entity:created"] == 2

    refused.clear()
    await ndjson.import_records(
        engine,
        ndjson.from_dicts(
            [
                memory("rc_a", ann),
                memory("rc_b", ann),
                edge("rc_a", "rc_b", "SUPERSEDES"),
                edge("rc_b", "rc_a", "SUPERSEDES"),  # closes a cycle
                edge("rc_a", "rc_b", "SUPERSEDES"),  # the first line again
            ]
        ),
        on_error="skip",
        on_refused=refused.append,
    )
    stored = await scalar(
        engine,
        "SELECT string_agg(src_id || '>' || dst_id, ',') FROM edges"
        " WHERE org_id = :o AND src_id IN ('rc_a', 'rc_b')",
        o=t.org,
    )
    assert stored == "rc_a>rc_b"  # as in the file without its last line
    # every line not written is listed: line 4 (a cycle after line 3), line 5 (refused as the
    # last word on its key, a cycle after line 4 in the file as written)
    assert [r.line for r in refused] == [4, 5]


async def passages_of(engine, org: str, parent: str) -> list[tuple[str, int, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, parent_revision, content FROM passages"
                " WHERE org_id = :o AND parent_id = :p ORDER BY passage_index"
            ),
            {"o": org, "p": parent},
        )
        return [tuple(r) for r in rows]


async def test_one_id_twice_in_a_file_the_last_line_wins_and_a_reimport_changes_nothing(
    engine, tmp_path
):
    t = await Team().load(engine)
    first = "# Draft\n\n" + "an early draft of the plan. " * 120
    last = "# Plan\n\n" + "the plan as it was agreed. " * 120
    recs = [
        {
            "kind": "entity",
            "org": t.org,
            "id": "dupl_e",
            "type": "plan",
            "name": "Plan",
            "content": first,
            "project": "p1",
            "owner": t.u("ann"),
        },
        {"kind": "edge", "org": t.org, "src": "dupl_e", "dst": "n1", "relationship": "DEPENDS_ON"},
        {
            "kind": "entity",
            "org": t.org,
            "id": "dupl_e",
            "type": "plan",
            "name": "Plan",
            "content": last,
            "project": "p1",
            "owner": t.u("ann"),
        },
        {"kind": "edge", "org": t.org, "src": "dupl_e", "dst": "n1", "relationship": "depends_on"},
    ]
    path = tmp_path / "dupl.ndjson"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    summary = await ndjson.import_records(engine, ndjson.read_file(path))
    assert summary.outcomes["entity:created"] == 1 and summary.outcomes["entity:overridden"] == 1
    state = "SELECT revision || ':' || content FROM entities WHERE org_id = :o AND id = 'dupl_e'"
    assert await scalar(engine, state, o=t.org) == f"1:{last}"
    cut = await passages_of(engine, t.org, "dupl_e")
    assert len(cut) >= 2 and "".join(c for _, _, c in cut) == last
    for _ in range(2):  # imported twice more: nothing changes, no new passage id
        again = await ndjson.import_records(engine, ndjson.read_file(path))
        assert again.outcomes["entity:unchanged"] == 1 and again.outcomes["edge:unchanged"] == 1
        assert await scalar(engine, state, o=t.org) == f"1:{last}"
        assert await passages_of(engine, t.org, "dupl_e") == cut
    # the pair: a file whose last line differs does change it, once
    path.write_text("\n".join(json.dumps(r) for r in recs[:2]) + "\n")
    await ndjson.import_records(engine, ndjson.read_file(path))
    assert await scalar(engine, state, o=t.org) == f"2:{first}"


PARAGRAPH = ("A sentence of the long paragraph, one of many. " * 250)[:10_489]


@pytest.mark.parametrize(
    "body",
    [PARAGRAPH, (PARAGRAPH + "\n\n") * 3, ("word " * 200_000)[:999_999]],
    ids=["10489", "three-paragraphs", "999999"],
)
async def test_long_paragraphs_are_stored_in_passages_within_the_bound(engine, body):
    t = await Team().load(engine)
    await import_dicts(
        engine,
        [
            {
                "kind": "entity",
                "org": t.org,
                "id": "long",
                "type": "document",
                "name": "Long",
                "content": body,
                "project": "p1",
                "owner": t.u("ann"),
            }
        ],
    )
    cut = await passages_of(engine, t.org, "long")
    assert "".join(c for _, _, c in cut) == body
    assert all(len(c) <= spans.HARD_MAX for _, _, c in cut)
    assert all(c.strip() for _, _, c in cut)  # no passage is only whitespace
    assert len(cut) > 1


async def links_of(engine, org: str, src: str) -> tuple[list[str], list[str]]:
    async with engine.connect() as conn:
        mentions = await conn.execute(
            text("SELECT dst_id FROM mentions WHERE org_id = :o AND src_id = :s ORDER BY 1"),
            {"o": org, "s": src},
        )
        pending = await conn.execute(
            text("SELECT dst_id FROM pending_links WHERE org_id = :o AND src_id = :s ORDER BY 1"),
            {"o": org, "s": src},
        )
        return [r[0] for r in mentions], [r[0] for r in pending]


FOOTNOTED = (
    "Packaging builds on [[n1]] and a draft [[later_one]].[[1]](https://peps.python.org/pep-0517/)"
    " See also[[2]](https://example.org/b).\n\n```toml\n[[tool.packages]]\nname = 'x'\n```\n\n"
    "Inline `[[packages]]` too."
)


async def test_footnotes_and_code_samples_make_no_links_through_import_and_rest(engine, client):
    t = await Team().load(engine)
    await import_dicts(
        engine,
        [
            {
                "kind": "entity",
                "org": t.org,
                "id": "fn",
                "type": "note",
                "name": "Footnotes",
                "content": FOOTNOTED,
                "project": "p1",
                "owner": t.u("ann"),
            }
        ],
    )
    assert await links_of(engine, t.org, "fn") == (["n1"], ["later_one"])
    key = await t.key(engine, "ann")
    made = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={"id": "fn2", "type": "note", "name": "F", "content": FOOTNOTED, "project": "p1"},
    )
    assert made.status_code == 201
    assert await links_of(engine, t.org, "fn2") == (["n1"], ["later_one"])


FLAG = "\U0001f1eb\U0001f1f7"
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"


@pytest.mark.parametrize(
    ("body", "budget", "preview"),
    [
        ("Kelpie" + FLAG + "tail words", 7, "Kelpie..."),
        ("Kelpie" + FAMILY + "tail words", 8, "Kelpie..."),
        ("Kelpie cafe\u0301s here", 11, "Kelpie..."),
    ],
    ids=["flag", "family", "accent"],
)
async def test_previews_on_the_wire_never_split_a_character(engine, client, body, budget, preview):
    t = await Team().load(engine)
    await import_dicts(
        engine,
        [
            {
                "kind": "entity",
                "org": t.org,
                "id": "emoji",
                "type": "note",
                "name": "Kelpie",
                "content": body,
                "project": "p1",
                "owner": t.u("ann"),
            }
        ],
    )
    key = await t.key(engine, "ann")
    found = await call(
        client,
        "POST",
        "/api/search",
        key,
        json={"query": "Kelpie", "content_max_chars": budget},
    )
    rows = [row for row in found.json()["results"] if row["id"] == "emoji"]
    assert rows and rows[0]["content"] == preview
