"""fetch_slice cases of contract §6, over REST."""

from __future__ import annotations

import pytest

from tests.builders import import_dicts
from tests.world import World


def sections(n: int, size: int = 900) -> str:
    """A Markdown body of ``n`` top-level sections of about ``size`` characters each."""
    parts = []
    for i in range(n):
        words = " ".join(f"w{i}x{j}" for j in range(size // 7))
        parts.append(f"# Section {i}\n\n{words}\n")
    return "\n".join(parts)


async def slice_(client, key, **body):
    return await client.post(
        "/api/search/slice", json=body, headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture
async def doc(engine, client):
    """A document cut into 10 spans: (key, passage ids in order)."""
    key = await World().entity("doc", type_="document", content=sections(10)).load(engine)
    body = (await slice_(client, key, entity_id="doc", window=64)).json()
    assert body["passage_total"] == 10 and body["total"] == 10
    return key, [p["id"] for p in body["passages"]]


async def test_from_memory_window_starts_at_first_span(client, doc):
    key, pids = doc
    body = (await slice_(client, key, entity_id="doc")).json()
    assert body["window"] == 3 and body["window_start"] == 0
    assert [p["id"] for p in body["passages"]] == pids[:3]
    assert [p["breadcrumb"] for p in body["passages"]] == ["Section 0", "Section 1", "Section 2"]
    assert body["sliced"] is True and body["covers_parent"] is False
    assert body["parent_id"] == "doc" and body["entity_id"] == "doc"


@pytest.mark.parametrize(
    ("named", "window", "start"),
    [(0, 3, 0), (5, 3, 4), (9, 3, 7), (5, 4, 4), (5, 1, 5), (8, 5, 5), (2, 64, 0)],
)
async def test_window_math_around_a_span(client, doc, named, window, start):
    key, pids = doc
    body = (await slice_(client, key, entity_id=pids[named], window=window)).json()
    assert body["window_start"] == start
    assert [p["passage_index"] for p in body["passages"]] == list(
        range(start, min(start + window, 10))
    )
    assert body["parent_id"] == "doc" and body["entity_id"] == pids[named]


async def test_complete_window_covers_parent(client, doc):
    key, _ = doc
    body = (await slice_(client, key, entity_id="doc", window=10)).json()
    assert body["covers_parent"] is True
    body = (await slice_(client, key, entity_id="doc", window=9)).json()
    assert body["covers_parent"] is False
    body = (await slice_(client, key, entity_id="doc", window=500)).json()
    assert body["window"] == 64 and body["covers_parent"] is True


async def test_budget_is_spent_in_order(client, doc):
    key, _ = doc
    body = (await slice_(client, key, entity_id="doc", content_max_chars=1000)).json()
    first, second, third = body["passages"]
    assert first["truncated"] is False and len(first["content"]) <= 1000
    assert second["truncated"] is True and second["content"].endswith("...")
    assert third == {**third, "content": "", "truncated": True}
    assert body["content_chars"] <= 1000
    assert body["covers_parent"] is False
    zero = (await slice_(client, key, entity_id="doc", content_max_chars=-5)).json()
    assert all(p["content"] == "" and p["truncated"] for p in zero["passages"])


async def test_never_cut_memory_comes_back_whole(engine, client):
    key = await World().entity("task1", type_="task", content="Fix it.\n\n\n\nSoon.  ").load(engine)
    body = (await slice_(client, key, entity_id="task1", window=7)).json()
    assert body["sliced"] is False and body["covers_parent"] is True and body["total"] == 1
    assert body["window"] == 7 and body["window_start"] is None and body["passage_total"] is None
    (p,) = body["passages"]
    assert p["id"] == "task1" and p["passage_index"] is None and p["content"] == "Fix it.\n\nSoon."


async def test_memory_cut_past_64_spans_never_covers(engine, client):
    key = await World().entity("big", type_="document", content=sections(80)).load(engine)
    body = (await slice_(client, key, entity_id="big", window=64)).json()
    assert body["passage_total"] == 80 and body["total"] == 64  # the window's bound
    assert body["covers_parent"] is False


async def test_evidence_spans_never_claim_coverage(engine, client):
    log = "\n".join(f"12:00:{i:02d} step {i} ok" for i in range(100))
    key = await World().entity("run", type_="observation", content=log).load(engine)
    body = (await slice_(client, key, entity_id="run", window=64)).json()
    assert body["passage_total"] == 3 and body["covers_parent"] is False
    assert [p["breadcrumb"] for p in body["passages"]] == [None, None, None]
    assert len(body["passages"][0]["content"].splitlines()) == 40


async def test_errors(engine, client, doc):
    key, pids = doc
    blank = await slice_(client, key, entity_id="   ")
    assert blank.status_code == 400
    missing = await slice_(client, key, entity_id="nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Entity not found"})
    outside = await slice_(client, key, entity_id="doc", project="other")
    assert (outside.status_code, outside.json()) == (404, {"detail": "Entity not found"})
    inside = await slice_(client, key, entity_id=pids[0], project="proj")
    assert inside.status_code == 200
    wrong_type = await slice_(client, key, entity_id="doc", window="3")
    assert wrong_type.status_code == 422
    no_key = await client.post("/api/search/slice", json={"entity_id": "doc"})
    assert no_key.status_code == 401
    bad_key = await client.post(
        "/api/search/slice", json={"entity_id": "doc"}, headers={"Authorization": "Bearer nope"}
    )
    assert bad_key.status_code == 401


async def test_old_revision_passage_is_404(engine, client):
    w = World().entity("doc", type_="document", content=sections(5))
    key = await w.load(engine)
    old = (await slice_(client, key, entity_id="doc")).json()["passages"][0]["id"]
    edited = dict(w.records[-1], content=sections(5, size=1000))
    await import_dicts(engine, [edited])
    assert (await slice_(client, key, entity_id=old)).status_code == 404
    new = (await slice_(client, key, entity_id="doc")).json()
    assert new["passages"][0]["id"] != old
    # re-importing the same body is idempotent: the ids stay
    await import_dicts(engine, [edited])
    again = (await slice_(client, key, entity_id="doc")).json()
    assert again["passages"] == new["passages"]
