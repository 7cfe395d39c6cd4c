"""Which readable matches a capped search scan keeps must not depend on the plan (issue 12, §2).

A breaker trial (2026-11-30) added 8,000 private notes another reader cannot read, ran ANALYZE,
and 22 of 72 search answers changed for that reader: the planner turned the passage arm's join
with the parents from a hash join into a merge join on the parents' key, so a word with more
than ``term_cap`` readable matches kept other passages. Plans follow statistics over every row,
the reader's or not; so the passage arm now probes each passage's parent per passage (LATERAL,
LIMIT 1), a nested loop driven by the passages' own scan whatever the planner would prefer.
Here the planner is pushed away from nested loops (as fresh statistics pushed it in the trial):
the pages must not move.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import text

from app.domain.schemas import SearchRequest
from app.domain.search import search
from app.repo import term_stats
from app.repo.readers import reader_by_user
from tests.builders import import_dicts

FILLER = " ".join(f"filler{i}" for i in range(170))
QUERIES = ("heron", "heron marsh", "egret heron")


async def _pages(engine, user: str, *, avoid_nested_loops: bool) -> list[dict[str, Any]]:
    async with engine.begin() as conn:
        if avoid_nested_loops:  # what a planner with other statistics may choose on its own
            await conn.execute(text("SET LOCAL enable_nestloop = off"))
        reader = await reader_by_user(conn, user_id=user)
        assert reader is not None
        out: list[dict[str, Any]] = []
        for query in QUERIES:
            for offset in (0, 50):
                got = await search(
                    conn, reader, SearchRequest(query=query, limit=50, offset=offset)
                )
                out.append(got.model_dump())
        return out


async def test_the_plan_never_chooses_which_readable_matches_a_capped_scan_keeps(engine):
    sfx, org = secrets.token_hex(3), "org_planleak_" + secrets.token_hex(4)
    ann, bob = f"user_ann_{sfx}", f"user_bob_{sfx}"
    records: list[dict] = [
        {"kind": "org", "id": org, "name": "Plan"},
        {"kind": "user", "id": ann, "org": org, "handle": "ann", "role": "member"},
        {"kind": "user", "id": bob, "org": org, "handle": "bob", "role": "member"},
        {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
    ]
    for i in range(300):  # ~900 readable passages holding "heron": the capped scans bite
        # the memory's lead holds none of the words: only its passages match, so which
        # passages the capped scan keeps decides the pages
        body = f"## Intro\n\n{FILLER}\n\n" + "".join(
            f"## Part {k}\n\nheron {'marsh ' * (i % 3)}{FILLER}\n\n" for k in range(3)
        )
        # written in an order unlike the ids, so physical order and id order differ
        n = (i * 7919) % 300
        records.append(
            {
                "kind": "entity",
                "id": f"d{n:03d}",
                "org": org,
                "type": "document",
                "name": f"Doc {n}",
                "content": body,
                "scope": "project",
                "project": "p2",
                "owner": ann,
            }
        )
    records += [  # and rows the reader cannot read, as in the trial
        {
            "kind": "entity",
            "id": f"h{i:04d}",
            "org": org,
            "type": "task",
            "name": f"zz {i}",
            "content": "zz qq heron",
            "scope": "private",
            "owner": bob,
        }
        for i in range(1000)
    ]
    await import_dicts(engine, records)
    await term_stats.refresh_orgs(engine, [org])
    async with engine.begin() as conn:
        for table in ("entities", "passages"):
            await conn.execute(text(f"ANALYZE {table}"))
    usual = await _pages(engine, ann, avoid_nested_loops=False)
    assert usual[0]["filters"]["candidates_capped"] is True  # the caps do bite
    assert await _pages(engine, ann, avoid_nested_loops=True) == usual


async def test_spans_that_score_alike_tie_to_the_earlier_one(engine):
    # Identical spans (their headings differ by a digit, which no query word matches) score
    # exactly alike: the BM25 sum runs in word order, so the plan's order of the words cannot
    # leave rounding noise that breaks the tie (a breaker trial saw focus name span 6, not 0,
    # after hidden rows changed the plan). Ties go to the earlier span.
    sfx, org = secrets.token_hex(3), "org_ties_" + secrets.token_hex(4)
    ann = f"user_ann_{sfx}"
    para = "zorblax typing generics annotations " * 3 + FILLER
    body = "".join(f"## Section {k}\n\n{para}\n\n## Other {k}\n\n{FILLER}\n\n" for k in range(4))
    await import_dicts(
        engine,
        [
            {"kind": "org", "id": org, "name": "Ties"},
            {"kind": "user", "id": ann, "org": org, "handle": "ann", "role": "member"},
            {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
            {
                "kind": "entity",
                "id": "doc",
                "org": org,
                "type": "document",
                "name": "Doc",
                "content": body,
                "scope": "project",
                "project": "p2",
                "owner": ann,
            },
        ],
    )
    async with engine.connect() as conn:
        spans = (
            await conn.execute(
                text(
                    "SELECT id, passage_index FROM passages WHERE org_id = :o"
                    " AND content LIKE '%zorblax%' ORDER BY passage_index"
                ),
                {"o": org},
            )
        ).all()
    assert len(spans) == 4
    for setting in PLANNER_SETTINGS:  # other plans feed the sums in other orders
        async with engine.begin() as conn:
            if setting:
                await conn.execute(text(f"SET LOCAL {setting} = off"))
            reader = await reader_by_user(conn, user_id=ann)
            assert reader is not None
            got = await search(
                conn, reader, SearchRequest(query="zorblax typing generics annotations", limit=5)
            )
        (hit,) = got.results
        focus = hit.metadata["focus"]
        assert focus["id"] == spans[0].id, setting
        # the three other alike spans, in order (the other spans hold no query word)
        assert focus["next"] == [s.id for s in spans[1:]], setting


PLANNER_SETTINGS = (None, "enable_hashagg", "enable_hashjoin", "enable_nestloop", "enable_sort")
