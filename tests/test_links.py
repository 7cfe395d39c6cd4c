"""Which ``[[...]]`` in a body are links (app/domain/memories.py ``links``, ``code_regions``):
code is not (fenced blocks, inline code spans), and nothing else hides a link (reviews of
2026-12-01: CRLF bodies, stray backticks across blocks, spans across fences)."""

from __future__ import annotations

import itertools
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.memories import code_regions, links
from tests.conftest import PEPS_DIR
from tests.reference_code_regions import code_regions_line_by_line
from tests.thorough import cases


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("See [[a]] and [[b]], [[a]] again.", ["a", "b"]),
        ("```toml\n[[packages]]\nname = 'x'\n```\nthen [[after]]", ["after"]),
        ("~~~\n[[t]]\n~~~\n[[after]]", ["after"]),
        ("Inline `x[[0]]` and RST ``[[packages]]`` but [[real]].", ["real"]),
        ("- a\n  - b\n\n     ```toml\n     [[packages]]\n\n     [[packages]]\n     ```\n", []),
        ("```\nnever closed [[hidden]]\n", []),
        ("```\ncode\n``` trailing text does not close\n[[still_code]]", []),
        ("`c`[[adjacent]]`d`", ["adjacent"]),
        # a stray backtick (an apostrophe typed as one) hides nothing across blocks
        ("Don`t do this.\n\nSee [[p1]].\n\nUse `x` here.", ["p1"]),
        ("Don`t do this.\r\n\r\nSee [[crlf]].\r\n\r\nUse `x` here.", ["crlf"]),
        ("a ` [[across]]\n```\ncode\n```\n` end", ["across"]),
        ("- Don`t panic\n- See [[item]]\n- Run `x`", ["item"]),
        ("# Title with `tick\n[[heading]] and `x`", ["heading"]),
        ("a\x0c```\n[[formfeed]]", ["formfeed"]),
        # reStructuredText literal blocks: after a line ending in ``::``, or a code directive
        ("Suggested::\n\n    obj.[[foo]]\n    obj.[foo]\n\nwith [[real]]", ["real"]),
        ("::\n\n  [[x]]\n\n\n  [[y]]\nafter [[z]]", ["z"]),
        (".. code-block:: TOML\n\n  [[packages]]\n  name = 'x'\n\nSee [[pep]].", ["pep"]),
        (".. code-block:: python\n   :linenos:\n\n   l = [[...]]\n[[after]]", ["after"]),
        ("Example::\r\n\r\n    [[crlf_code]]\r\nSee [[crlf_after]]", ["crlf_after"]),
        ("- item::\n\n    [[in_item]]\n\n- next [[d]]", ["d"]),
        ("Never dedented::\n\n  [[a]]\n  [[b]]", []),
        # ... and nothing else: a marker mid-paragraph, a block quote, a note's body
        ("A line ending in a marker::\nstill the paragraph, [[keep]]", ["keep"]),
        ("Text.\n\n    a quoted [[kept]]\n", ["kept"]),
        (".. note::\n\n   See [[noted]].", ["noted"]),
        ("Example::\n\nnot indented, [[not_literal]]", ["not_literal"]),
        ("```\nfenced::\n```\n    [[after_fence]]", ["after_fence"]),
        # docutils' rules, from a breaker's comparison with docutils 0.23
        ("Install it like this::\n   then read [[a30]] today.", ["a30"]),  # no blank line
        ("1. Install::\n   then read [[a31]]", ["a31"]),
        ("# Title::\n\n  text [[a9]]", ["a9"]),  # a Markdown heading, not a marker
        ("\tEx::\n\n    [[t2]]", ["t2"]),  # a tab is 8 columns: 4 spaces are not deeper
        ("    Ex::\n\n\t[[t1]]", []),  # ... and a tab is deeper than 4 spaces
        (".. CODE-BLOCK:: python\n\n   [[t7]]", []),  # directive names ignore case
        ("Para.\n\n>>> x = [[a]]\n[[still_doctest]]\n\nSee [[after]].", ["after"]),  # doctest
        ("Not a start >>> [[mid]]", ["mid"]),  # '>>>' opens a doctest block only a paragraph
        ("Example\\::\n\n    [[escaped]]", ["escaped"]),  # an escaped marker is text
        # Markdown footnote references: a link whose text is in brackets, not a memory link
        ("Sources[[1]](https://example.org/a) and [[2]](https://b.example).", []),
        ("See [[pep_8]] and note [[3]](https://x.example/3).", ["pep_8"]),
        ("[[a]][[b]] and [[c]] (a parenthesis after a space)", ["a", "b", "c"]),
        # ... and inside code samples, as above
        ("```toml\n[[tool.poetry.packages]]\n```\nUse `[[packages]]` or [[real]].", ["real"]),
    ],
)
def test_code_is_not_a_link_and_nothing_else_hides_one(body: str, expected: list[str]) -> None:
    assert links(body) == expected


def test_code_regions_are_sorted_and_disjoint() -> None:
    body = "a ` b\n```\n[[bar]]\n```\nsee [[foo]] and ` end `x` ``y``\n\n`z`"
    regions = code_regions(body)
    assert regions == sorted(regions)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(regions))
    assert links(body) == ["foo"]


def test_adversarial_backticks_stay_linear() -> None:
    """Runs of every length that never close, and a million characters of short spans: the
    answer comes back in well under a second (a pairing that rescanned to the end for each run
    would take hours; no time is asserted, the run itself is the check)."""
    body = "".join("`" * k + " a " for k in range(1, 1400)) + " [[z]]"
    assert links(body) == ["z"]
    assert links("`x` [[q]] " * 100_000) == ["q"]


_CODE_PIECES = ["`", "``", "```", "~~~", "::", "x::", "\\::", ".. code::", ".. note::", ">>> "]
_CODE_PIECES += [
    ">>>\t",
    "    ",
    "\t",
    " ",
    "#",
    "# h",
    "- ",
    "1. ",
    "> ",
    "a",
    "[[x]]",
    "\r",
    "10)",
]


@settings(max_examples=cases(300, 1000), deadline=None)
@given(
    st.lists(
        st.builds(
            lambda pieces, end: "".join(pieces) + end,
            st.lists(st.sampled_from(_CODE_PIECES), max_size=4),
            st.sampled_from(["\n", "\r\n", "\n\n", ""]),
        ),
        max_size=30,
    ).map("".join)
)
def test_code_regions_agree_with_reading_every_line(body: str) -> None:
    # code_regions reads the lines between two that may open code at once (ten times faster on
    # a body of short lines); it must find exactly what reading every line in turn finds
    assert code_regions(body) == code_regions_line_by_line(body)


def test_code_regions_agree_with_reading_every_line_on_the_peps() -> None:
    if not PEPS_DIR.is_dir():
        pytest.skip(f"no PEP corpus at {PEPS_DIR}")
    for pep in PEPS_DIR.glob("pep-*"):
        body = pep.read_text(encoding="utf-8", errors="replace")
        assert code_regions(body) == code_regions_line_by_line(body), pep.name


def test_the_pep_corpus_has_no_link_outside_code() -> None:
    """The PEPs never use ``[[id]]``: every ``[[`` in them is code (TOML arrays of tables in
    PEP 751's ``code-block`` examples, ``obj.[[foo]]`` in PEP 363's literal block, a recursive
    list's ``[[...]]`` in PEP 786), so no PEP may make a pending link."""
    peps = PEPS_DIR
    if not peps.is_dir():
        pytest.skip(f"no PEP corpus at {peps}")
    bodies = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in peps.glob("pep-*")}
    assert sum("[[" in b for b in bodies.values()) >= 3
    assert {name: links(body) for name, body in bodies.items() if links(body)} == {}


async def test_a_writes_cut_and_links_run_off_the_event_loop(engine, monkeypatch) -> None:
    """Cutting a 1,000,000-character body and reading its links takes up to ~2 s of CPU: the
    write runs it in a worker thread, so the event loop serves other requests meanwhile (a
    breaker's 1 MB body held /healthz for a second when it ran on the loop)."""
    import threading

    from sqlalchemy import text

    from app.domain import memories
    from tests.builders import import_dicts

    seen: list[str] = []
    real = memories._prepare

    def spy(data: memories.EntityData, evidence_lines: int):
        seen.append(threading.current_thread().name)
        return real(data, evidence_lines)

    monkeypatch.setattr(memories, "_prepare", spy)
    org = "org_loop_" + secrets.token_hex(4)
    await import_dicts(
        engine,
        [
            {"kind": "org", "id": org, "name": "Loop"},
            {"kind": "user", "id": f"{org}_u", "org": org, "handle": "u", "role": "member"},
        ],
    )
    body = "Example::\n\n    [[in_code]]\n\nSee [[elsewhere]].\n" * 20_000
    data = memories.EntityData(
        id="big",
        type="document",
        name="Big",
        content=body,
        scope="private",
        project_id=None,
        owner_id=f"{org}_u",
    )
    async with engine.begin() as conn:
        outcome, _ = await memories.save_entity(conn, org_id=org, data=data, evidence_lines=40)
        pending = await conn.execute(
            text("SELECT count(*) FROM pending_links WHERE org_id = :o"), {"o": org}
        )
    assert outcome == "created" and pending.scalar() == 1  # [[elsewhere]] only, once
    assert seen and seen[0] != threading.main_thread().name


async def test_a_body_links_at_most_1000_memories(engine, client) -> None:
    """A body of 30,000 distinct links could never be written (its mentions outlasted the
    statement timeout on every try: a 503 asking for a retry that could not succeed). Up to
    1,000 are written (pending here: no such memories); past that the write is a 400 that says
    why and writes nothing, over REST and in an import line alike."""
    from app.importers import ndjson
    from tests.builders import import_dicts
    from tests.team import Team, answer, call

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    many = " ".join(f"[[target_{i}]]" for i in range(1_000))
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"id": "linky", "type": "note", "name": "Linky", "content": many, "project": "p1"},
    )
    assert r.status_code == 201, r.text
    over = many + " [[target_1000]] [[target_0]]"
    r = await call(
        client,
        "POST",
        "/api/entities",
        ann,
        json={"id": "linkier", "type": "note", "name": "L", "content": over, "project": "p1"},
    )
    refused = (400, {"detail": "content links more than 1000 memories ([[id]])"})
    assert answer(r) == refused
    r = await call(client, "PATCH", "/api/entities/linky", ann, json={"content": over})
    assert answer(r) == refused
    assert answer(await call(client, "GET", "/api/entities/linkier", ann))[0] == 404
    with pytest.raises(ndjson.ImportError_) as caught:
        await import_dicts(
            engine,
            [
                {
                    "kind": "entity",
                    "id": "linkiest",
                    "org": t.org,
                    "type": "note",
                    "name": "L",
                    "content": over,
                    "project": "p1",
                    "owner": t.u("ann"),
                }
            ],
        )
    assert "content links more than 1000 memories" in str(caught.value)


async def test_bodies_are_cut_one_at_a_time(monkeypatch) -> None:
    """Worker threads share the interpreter lock: six big bodies cut at once paused the event
    loop 1.2 s. Concurrent writes cut one body at a time (the others wait in their threads)."""
    import asyncio
    import threading
    import time

    from app.domain import memories

    active, most = 0, 0
    guard = threading.Lock()

    def slow_cut(data: memories.EntityData, *, evidence_lines: int) -> None:
        nonlocal active, most
        with guard:
            active += 1
            most = max(most, active)
        time.sleep(0.05)
        with guard:
            active -= 1

    monkeypatch.setattr(memories, "checked_cut", slow_cut)
    data = memories.EntityData(
        id="x",
        type="note",
        name="n",
        content="text",
        scope="private",
        project_id=None,
        owner_id="u",
    )
    await asyncio.gather(*(asyncio.to_thread(memories._prepare, data, 40) for _ in range(4)))
    assert most == 1
