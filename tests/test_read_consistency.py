"""Reads racing writes (issue 9): one consistent revision per answer; one If-Match winner.

A long memory is rewritten in a loop (each generation ``k`` has its own headings and words, so
every span names the generation it was cut from) while other tasks read it through every read
verb that shows its passages: ``fetch_slice`` from the memory and from a passage id met earlier,
``expand_neighbors`` over ``PART_OF``, ``GET /api/entities/{id}`` and ``search``. Each answer must
come from one revision (contract §2, §6; each read verb runs in one repeatable-read snapshot):

- a slice's spans all belong to one generation, tile that generation's body exactly, and come
  with the parent they were cut from (never a passage without its parent, never spans of two
  generations);
- an expand's passage neighbors all belong to one generation and name their parent;
- ``GET`` returns the body of exactly the generation its ``revision`` says;
- a passage id of an older generation is a 404, or a window of one generation.

Then writers race with the same ``If-Match``: exactly one wins, every other gets 412, and the
stored memory is the winner's.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

import httpx

from tests.builders import make_key
from tests.world import World

SECONDS = 4.0
SECTIONS = 5
GEN = re.compile(r"gen(\d+)w")


def body(k: int) -> str:
    """Generation ``k`` of the memory: headings and words that name ``k``."""
    return "\n\n".join(
        f"# Gen{k} part {i}\n\n" + " ".join(f"gen{k}w{j}" for j in range(170))
        for i in range(SECTIONS)
    )


def generations(text: str) -> set[int]:
    """The generations whose words appear in ``text``."""
    return {int(g) for g in GEN.findall(text)}


def one_generation(texts: list[str]) -> int:
    """The one generation all ``texts`` come from (fails on a mix)."""
    seen = set().union(*(generations(t) for t in texts)) if texts else set()
    assert seen, "an answer with no span of any generation (a torn read)"
    assert len(seen) == 1, f"spans of several generations in one answer: {sorted(seen)}"
    return seen.pop()


class Reads:
    """What the readers saw: generations per verb, passage ids met, answers checked."""

    def __init__(self) -> None:
        self.generations: dict[str, set[int]] = {}
        self.passage_ids: list[str] = []
        self.checked: Counter[str] = Counter()

    def saw(self, verb: str, generation: int) -> None:
        """Record that ``verb`` answered with ``generation``."""
        self.generations.setdefault(verb, set()).add(generation)
        self.checked[verb] += 1


async def read_once(client: httpx.AsyncClient, key: str, reads: Reads, i: int) -> None:
    """One read of each kind, each checked for a single consistent revision."""
    auth = {"Authorization": f"Bearer {key}"}
    r = await client.post(
        "/api/search/slice",
        json={"entity_id": "doc", "window": 64, "content_max_chars": 50_000},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    s = r.json()
    texts = [p["content"] for p in s["passages"]]
    k = one_generation(texts + [p["breadcrumb"] or "" for p in s["passages"]])
    assert s["parent_id"] == "doc" and s["sliced"] and s["passage_total"] == len(texts)
    assert "".join(texts) == body(k) and s["covers_parent"], "spans do not tile one body"
    assert all(f"Gen{k} part" in (p["breadcrumb"] or "") for p in s["passages"])
    reads.saw("slice", k)
    reads.passage_ids.append(s["passages"][i % len(texts)]["id"])

    old = reads.passage_ids[(i * 7) % len(reads.passage_ids)]
    r = await client.post("/api/search/slice", json={"entity_id": old, "window": 3}, headers=auth)
    if r.status_code == 404:  # minted for a generation that is gone: never silently other text
        assert r.json() == {"detail": "Entity not found"}
        reads.checked["stale passage id"] += 1
    else:
        assert r.status_code == 200, r.text
        s = r.json()
        assert s["parent_id"] == "doc" and s["entity_id"] == old
        reads.saw("slice from a passage", one_generation([p["content"] for p in s["passages"]]))

    r = await client.post(
        "/api/search/expand",
        json={
            "entity_ids": ["doc"],
            "relationship_types": ["PART_OF"],
            "limit": 24,
            "content_max_chars": 50_000,
        },
        headers=auth,
    )
    assert r.status_code == 200, r.text
    neighbors = r.json()["neighbors"]
    assert neighbors and all(n["parent_entity_id"] == "doc" for n in neighbors)
    reads.saw("expand", one_generation([n["content"] for n in neighbors]))

    r = await client.get("/api/entities/doc", headers=auth)
    assert r.status_code == 200, r.text
    e = r.json()
    k = one_generation([e["content"]])
    assert e["content"] == body(k) and e["revision"] == k + 1 and r.headers["etag"] == f'"{k + 1}"'
    reads.saw("get", k)

    r = await client.post(
        "/api/search", json={"query": "part", "limit": 50, "content_max_chars": 50_000},
        headers=auth,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    hits = [h["content"] for h in r.json()["results"] if "gen" in h["content"]]
    if hits:
        reads.saw("search", one_generation(hits))


async def test_reads_racing_edits_see_one_revision(client: httpx.AsyncClient, engine: Any) -> None:
    w = World().entity("doc", type_="document", content=body(0))
    await w.load(engine)
    reader = await make_key(engine, w.user)
    writer = await make_key(engine, w.user, scopes=("read", "write"))
    reads = Reads()
    stop = asyncio.Event()
    edits: list[int] = []

    async def edit() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            r = await client.patch(
                "/api/entities/doc",
                json={"content": body(k)},
                headers={"Authorization": f"Bearer {writer}", "If-Match": f'"{k}"'},
            )
            assert r.status_code == 200, r.text
            assert r.json()["revision"] == k + 1
            edits.append(k)

    async def read(offset: int) -> None:
        i = offset
        while not stop.is_set():
            await read_once(client, reader, reads, i)
            i += 1

    tasks = [asyncio.create_task(edit()), *(asyncio.create_task(read(n)) for n in range(3))]
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline and not any(t.done() for t in tasks):
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks)  # re-raises the first failed check
    print(f"\n{len(edits)} edits; reads checked: {dict(reads.checked)}")
    assert len(edits) >= 5, "the editor barely ran: nothing raced"
    assert len(reads.generations.get("slice", set())) >= 2, "every slice saw one generation only"
    assert reads.checked["slice"] >= 5


async def test_racing_if_match_writers_have_exactly_one_winner(
    client: httpx.AsyncClient, engine: Any
) -> None:
    w = World().entity("doc", type_="document", content=body(0))
    await w.load(engine)
    writer = await make_key(engine, w.user, scopes=("read", "write"))
    auth = {"Authorization": f"Bearer {writer}"}
    for rnd in range(3):
        current = (await client.get("/api/entities/doc", headers=auth)).json()["revision"]
        racers = [
            client.patch(
                "/api/entities/doc",
                json={"content": body(100 + 10 * rnd + n)},
                headers={**auth, "If-Match": f'"{current}"'},
            )
            for n in range(8)
        ]
        answers = await asyncio.gather(*racers)
        statuses = Counter(a.status_code for a in answers)
        assert statuses == Counter({200: 1, 412: 7}), statuses
        winner = next(a for a in answers if a.status_code == 200).json()
        assert winner["revision"] == current + 1
        stored = (await client.get("/api/entities/doc", headers=auth)).json()
        assert stored["revision"] == current + 1 and stored["content"] == winner["content"]
        for a in answers:
            if a.status_code == 412:
                assert set(a.json()) == {"detail"}
