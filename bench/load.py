"""Mixed read/write load against ``sibyl-pg serve`` (docs/security.md): zero errors, zero lost
writes.

``clients`` concurrent clients (32 by default, one HTTP connection each) run for ``seconds``
against a real ``sibyl-pg serve`` (a subprocess on a free loopback port), each mixing the read
verbs (expand, slice, search, context, GET by id) with writes (create a memory, edit its own
memory with ``If-Match``, write an edge). Every answer must be the documented success (200/201):
anything else, a 503 included, is an error. Every acknowledged write is then read back: the
memory at the acknowledged revision with the acknowledged body, the edge as a neighbor.
Latencies are reported per verb and overall (p50, p95, p99, max).

Two forms:

- the short form runs in CI (``tests/test_load.py``: a fixed amount of work, :data:`SHORT_STEPS`
  requests per client, on the test database, in an org of its own; ``SIBYL_LOAD_STEPS`` changes
  it). It counts work, never time: a busy machine makes it slower, never failing;
- the long form is ``make bench-load`` (``python -m bench.load``, 60 s by default): it
  creates a database of its own, ``sibyl_bench_load``, on the server of ``DATABASE_URL`` (or the
  embedded server), migrates it, seeds it, serves it, loads it, prints the report and exits with
  status 1 on any error or lost write.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.settings import PROJECT_ROOT

CLIENTS = 32
LONG_SECONDS = 60.0
SHORT_SECONDS = 8.0
SHORT_STEPS = 12  # requests per client in the short form (fixed work, no clock)
LOAD_DATABASE = "sibyl_bench_load"
SEED_MEMORIES = 40
# relative weights of the verbs each client draws from
MIX: dict[str, int] = {
    "expand": 22,
    "slice": 16,
    "search": 14,
    "context": 4,
    "get": 12,
    "create": 14,
    "edit": 12,
    "edge": 6,
}


@dataclass
class World:
    """The org the load runs in: a reader's key, a writer's key, the seed memories."""

    org: str
    read_key: str
    write_key: str
    memories: list[str]


@dataclass
class Acked:
    """One acknowledged write, to be found again afterwards."""

    kind: str  # "memory" or "edge"
    id: str
    revision: int = 0
    content: str = ""
    edge: tuple[str, str, str] | None = None


@dataclass
class Report:
    """What the load did and saw."""

    seconds: float
    clients: int
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    acked: dict[str, Acked] = field(default_factory=dict)
    edges: list[Acked] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """Requests sent."""
        return sum(len(v) for v in self.latencies_ms.values())

    def percentile(self, q: float, verb: str | None = None) -> float:
        """The ``q`` quantile (0-1) of the latencies of ``verb`` (all verbs: None), in ms."""
        values = sorted(
            self.latencies_ms.get(verb, [])
            if verb
            else [x for v in self.latencies_ms.values() for x in v]
        )
        if not values:
            return 0.0
        return values[min(len(values) - 1, int(q * len(values)))]

    def render(self) -> str:
        """The report as text, one line per verb and a total line."""
        lines = [
            f"load: {self.clients} clients, {self.seconds:.0f} s, {self.requests} requests "
            f"({self.requests / self.seconds:.0f} req/s), {len(self.errors)} errors, "
            f"{len(self.acked)} memories and {len(self.edges)} edges written, "
            f"{len(self.lost)} lost",
            f"{'verb':<8} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}",
        ]
        for verb in [*sorted(self.latencies_ms), None]:
            n = len(self.latencies_ms[verb]) if verb else self.requests
            lines.append(
                f"{verb or 'all':<8} {n:>6} {self.percentile(0.5, verb):>8.1f} "
                f"{self.percentile(0.95, verb):>8.1f} {self.percentile(0.99, verb):>8.1f} "
                f"{self.percentile(1.0, verb):>8.1f}"
            )
        lines += [f"error: {e}" for e in self.errors[:10]]
        lines += [f"lost: {e}" for e in self.lost[:10]]
        return "\n".join(lines)


def long_body(tag: str) -> str:
    """A body long enough to be cut into passages (rule: span-bound)."""
    return "\n\n".join(
        f"# {tag} part {i}\n\n" + " ".join(f"{tag}w{j}" for j in range(160)) for i in range(4)
    )


async def seed(engine: AsyncEngine, org: str | None = None) -> World:
    """Create the load's org (a project, a writer, a reader, seed memories linked in a chain)
    through the importer; return its keys."""
    from app.domain.keys import create_key
    from app.importers import ndjson

    org = org or "org_load_" + secrets.token_hex(4)
    writer, reader = f"user_w_{org}", f"user_r_{org}"
    records: list[dict[str, Any]] = [
        {"kind": "org", "id": org, "name": "Load"},
        {"kind": "user", "id": writer, "org": org, "handle": "writer", "role": "member"},
        {"kind": "user", "id": reader, "org": org, "handle": "reader", "role": "member"},
        {"kind": "project", "id": "proj", "org": org, "name": "Load", "visibility": "private"},
        {"kind": "member", "project": "proj", "user": writer, "role": "contributor"},
        {"kind": "member", "project": "proj", "user": reader, "role": "viewer"},
    ]
    memories = [f"seed_{i:03d}" for i in range(SEED_MEMORIES)]
    for i, id_ in enumerate(memories):
        records.append(
            {
                "kind": "entity",
                "id": id_,
                "org": org,
                "type": "document" if i % 4 == 0 else "note",
                "name": f"Seed {i}",
                "content": long_body(f"seed{i}") if i % 4 == 0 else f"Seed memory {i} body.",
                "project": "proj",
                "owner": writer,
            }
        )
        if i:
            records.append(
                {
                    "kind": "edge",
                    "org": org,
                    "src": id_,
                    "dst": memories[(i * 7) % i],
                    "relationship": "DEPENDS_ON",
                }
            )
    await ndjson.import_records(engine, ndjson.from_dicts(records), total=len(records))
    async with engine.begin() as conn:
        _, write_key = await create_key(conn, user_id=writer, scopes=("read", "write"))
        _, read_key = await create_key(conn, user_id=reader, scopes=("read",))
    return World(org=org, read_key=read_key, write_key=write_key, memories=memories)


Verb = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


class LoadClient:
    """One client: its own connection, its own random stream, its own memories."""

    def __init__(self, n: int, world: World, report: Report) -> None:
        self.n = n
        self.world = world
        self.report = report
        self.rng = random.Random(f"sibyl-load:{n}")
        self.mine: list[str] = []  # memories this client created (it alone edits them)
        self.verbs = list(MIX)
        self.weights = [MIX[v] for v in self.verbs]

    def _read(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.world.read_key}"}

    def _write(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.world.write_key}"}

    def _seed(self) -> str:
        return self.rng.choice(self.world.memories + self.mine)

    async def step(self, http: httpx.AsyncClient) -> None:
        """Draw one verb, send it, time it, check it."""
        verb = self.rng.choices(self.verbs, self.weights)[0]
        if verb in ("edit", "edge") and not self.mine:
            verb = "create"
        started = time.perf_counter()
        expected, response = await getattr(self, verb)(http)
        elapsed = (time.perf_counter() - started) * 1000
        self.report.latencies_ms.setdefault(verb, []).append(elapsed)
        if response.status_code != expected:
            self.report.errors.append(f"{verb}: {response.status_code} {response.text[:200]}")
            return
        self._acknowledge(verb, response)

    def _acknowledge(self, verb: str, response: httpx.Response) -> None:
        body = response.json()
        if verb in ("create", "edit"):
            self.report.acked[body["id"]] = Acked(
                "memory", body["id"], body["revision"], body["content"]
            )
            if verb == "create":
                self.mine.append(body["id"])
        elif verb == "edge":
            edge = (body["src"], body["relationship"], body["dst"])
            self.report.edges.append(Acked("edge", body["src"], edge=edge))

    async def expand(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """``expand_neighbors`` from one or two memories, depth 1-3."""
        body = {
            "entity_ids": [self._seed(), self._seed()],
            "depth": self.rng.randint(1, 3),
            "limit": 12,
        }
        return 200, await http.post("/api/search/expand", json=body, headers=self._read())

    async def slice(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """``fetch_slice`` of a memory."""
        body = {"entity_id": self._seed(), "window": self.rng.randint(1, 8)}
        return 200, await http.post("/api/search/slice", json=body, headers=self._write())

    async def search(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """``search`` for words of the seed bodies."""
        query = self.rng.choice(["seed memory", "part", "body", f"seed{self.rng.randint(0, 9)}"])
        body = {"query": query, "limit": 10}
        return 200, await http.post("/api/search", json=body, headers=self._read())

    async def context(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """``context`` for a goal."""
        body = {"goal": "what do the seed memories say", "limit": 8}
        return 200, await http.post("/api/context/pack", json=body, headers=self._read())

    async def get(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """``GET /api/entities/{id}``."""
        return 200, await http.get(f"/api/entities/{self._seed()}", headers=self._write())

    async def create(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """Create a memory (a long one now and then, cut into passages)."""
        tag = f"c{self.n}x{len(self.mine)}"
        content = long_body(tag) if self.rng.random() < 0.3 else f"Memory {tag} [[{self._seed()}]]"
        body = {"type": "note", "name": f"Load {tag}", "content": content, "project": "proj"}
        return 201, await http.post("/api/entities", json=body, headers=self._write())

    async def edit(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """Edit one of this client's memories, with the revision it last acknowledged."""
        id_ = self.rng.choice(self.mine)
        acked = self.report.acked[id_]
        content = f"Edited {id_} to revision {acked.revision + 1}: " + "word " * 50
        headers = {**self._write(), "If-Match": f'"{acked.revision}"'}
        response = await http.patch(
            f"/api/entities/{id_}", json={"content": content}, headers=headers
        )
        return 200, response

    async def edge(self, http: httpx.AsyncClient) -> tuple[int, httpx.Response]:
        """Write an edge from one of this client's memories to a seed."""
        body = {
            "src": self.rng.choice(self.mine),
            "relationship": "REFERENCES",
            "dst": self.rng.choice(self.world.memories),  # a seed: never the source itself
        }
        response = await http.post("/api/edges", json=body, headers=self._write())
        return (201 if response.status_code == 201 else 200), response

    async def run(self, base_url: str, until: float | None, steps: int | None = None) -> None:
        """Send requests back to back until ``until`` (monotonic time), or exactly ``steps``
        requests when ``steps`` is given (``until`` is then ignored)."""
        async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
            sent = 0
            while (sent < steps) if steps is not None else (time.monotonic() < (until or 0.0)):
                sent += 1
                try:
                    await self.step(http)
                except httpx.HTTPError as error:
                    self.report.errors.append(f"transport: {type(error).__name__} {error}")


async def verify(base_url: str, world: World, report: Report) -> None:
    """Read back every acknowledged write; record the ones not found as they were."""
    headers = {"Authorization": f"Bearer {world.write_key}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0, headers=headers) as http:
        for acked in report.acked.values():
            r = await http.get(f"/api/entities/{acked.id}")
            if r.status_code != 200:
                report.lost.append(f"{acked.id}: {r.status_code}")
                continue
            got = r.json()
            if (got["revision"], got["content"]) != (acked.revision, acked.content):
                report.lost.append(f"{acked.id}: revision {got['revision']} != {acked.revision}")
        for acked in report.edges:
            assert acked.edge is not None
            src, rel, dst = acked.edge
            body = {
                "entity_ids": [src],
                "relationship_types": [rel],
                "include_incoming": False,
                "limit": 24,
            }
            r = await http.post("/api/search/expand", json=body)
            found = r.status_code == 200 and dst in {n["id"] for n in r.json()["neighbors"]}
            if not found:
                report.lost.append(f"edge {src} {rel} {dst}")


async def run_load(
    base_url: str,
    world: World,
    *,
    clients: int = CLIENTS,
    seconds: float = SHORT_SECONDS,
    steps: int | None = None,
) -> Report:
    """Run ``clients`` clients against ``base_url``, then verify every write.

    With ``steps`` each client sends exactly ``steps`` requests (a fixed amount of work, what a
    test asserts on); otherwise each runs for ``seconds`` (the benchmark's long form).
    ``Report.seconds`` is the measured wall time either way.
    """
    report = Report(seconds=seconds, clients=clients)
    started = time.monotonic()
    until = None if steps is not None else started + seconds
    await asyncio.gather(
        *(LoadClient(n, world, report).run(base_url, until, steps) for n in range(clients))
    )
    report.seconds = max(time.monotonic() - started, 1e-6)
    await verify(base_url, world, report)
    return report


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(
    database_url: str, *, timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> Iterator[str]:
    """``sibyl-pg serve`` on a free loopback port, bound to ``database_url`` (and the settings
    of ``env``, e.g. ``SIBYL_POOL_TIMEOUT_S``); yields its base URL once ``/readyz`` answers,
    and stops it (SIGTERM, then SIGKILL) afterwards."""
    port = free_port()
    from bench.run import server_command, server_env

    env = server_env({**(env or {}), "DATABASE_URL": database_url})
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            server_command(port),
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"sibyl-pg serve exited: {log.read()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/readyz", timeout=2.0).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("sibyl-pg serve did not become ready")
                time.sleep(0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


async def _long_form(seconds: float, clients: int) -> int:
    from app.core.db import make_engine
    from app.core.migrations import upgrade
    from bench.database import recreate

    url = await recreate(LOAD_DATABASE)
    await asyncio.to_thread(upgrade, url)
    engine = make_engine(url)
    try:
        world = await seed(engine)
    finally:
        await engine.dispose()
    print(f"database {LOAD_DATABASE}: seeded org {world.org}; serving", file=sys.stderr)
    with served(url) as base:
        report = await run_load(base, world, clients=clients, seconds=seconds)
    print(report.render())
    return 1 if report.errors or report.lost else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.load [--seconds S] [--clients N]``: the long form."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=LONG_SECONDS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    args = parser.parse_args(argv)
    return asyncio.run(_long_form(args.seconds, args.clients))


if __name__ == "__main__":
    sys.exit(main())
