"""The bulk-import benchmark (issue 13): a generated NDJSON graph of the real one's size and shape,
imported through ``sibyl-pg import``'s code path, in lines per second.

The shape (defaults, :data:`FULL`): one org, 2,500 users, 58 projects, 8,000 memberships, 63,000
memories with short bodies (one in ten links another memory with ``[[id]]``, half of those
forward, to a memory later in the file), 283,000 distinct edges of which ~22,000 point at one
hub memory (a quarter of the rest are ``SUPERSEDES``-free ``DEPENDS_ON``, the others
``RELATED_TO``/``REFERENCES``/``BLOCKS``, with 1% ``SUPERSEDES`` from newer to older so the graph
is acyclic), and 500 explicit mentions: 357,059 lines. Records come grouped by kind, as an
exporter writes them. Same seed, same file.

``sibyl-pg bench import`` writes the file, recreates the database ``sibyl_bench_import`` on the
``DATABASE_URL`` server (or the embedded one), migrates it, imports the file all or nothing,
and prints lines/s (the target is 6,000 lines/s on 2 cores: the 357k lines in 60 s or less).
The import time includes the ``VACUUM (ANALYZE)`` that ends it.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMPORT_DATABASE = "sibyl_bench_import"
TARGET_LINES_PER_S = 6000


@dataclass(frozen=True)
class Shape:
    """How much of each kind to generate."""

    users: int = 2_500
    projects: int = 58
    members: int = 8_000
    memories: int = 63_000
    edges: int = 283_000
    hub_in_edges: int = 22_000
    mentions: int = 500

    @property
    def lines(self) -> int:
        """NDJSON lines of the file."""
        return (
            1
            + self.users
            + self.projects
            + self.members
            + self.memories
            + self.edges
            + self.mentions
        )


FULL = Shape()
QUICK = Shape(
    users=50, projects=5, members=160, memories=1_200, edges=5_400, hub_in_edges=400, mentions=20
)


def records(shape: Shape, *, seed: int = 13, org: str = "org_bulk") -> list[dict[str, Any]]:
    """The graph's records, grouped by kind (org, users, projects, members, memories, edges,
    mentions)."""
    rng = random.Random(seed)
    users = [f"u{i:05d}" for i in range(shape.users)]
    projects = [f"proj_{i:02d}" for i in range(shape.projects)]
    mem = [f"m{i:06d}" for i in range(shape.memories)]
    out: list[dict[str, Any]] = [{"kind": "org", "id": org, "name": "Bulk"}]
    out += [{"kind": "user", "id": u, "org": org, "handle": u, "role": "member"} for u in users]
    out += [
        {
            "kind": "project",
            "id": p,
            "org": org,
            "name": f"Project {i}",
            "visibility": "org" if i % 3 == 0 else "private",
        }
        for i, p in enumerate(projects)
    ]
    pairs: set[tuple[str, str]] = set()
    while len(pairs) < shape.members:
        pairs.add((rng.choice(projects), rng.choice(users)))
    roles = ["viewer", "contributor", "contributor", "maintainer"]
    out += [
        {"kind": "member", "project": p, "user": u, "role": rng.choice(roles)}
        for p, u in sorted(pairs)
    ]
    types = ["note", "task", "decision", "observation", "artifact", "note"]
    for i, id_ in enumerate(mem):
        body = f"Memory {i}: {rng.choice(['build', 'deploy', 'review', 'plan'])} step {i % 97}."
        if i % 10 == 0:
            target = mem[(i + rng.randint(1, 500)) % len(mem)] if i % 20 == 0 else mem[i // 2]
            body += f" See [[{target}]]."
        rec: dict[str, Any] = {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": types[i % len(types)],
            "name": f"Memory {i}",
            "content": body,
            "owner": users[i % len(users)],
        }
        if i % 50 == 1:
            rec["scope"] = "private"
        elif i % 50 == 2:
            rec["scope"] = "org"
        else:
            rec["project"] = projects[i % len(projects)]
        if i % 50 == 3:
            rec["project"] = projects[i % len(projects)]
            rec["scope"] = "private"
        out.append(rec)
    edges: set[tuple[str, str, str]] = set()
    hub = mem[0]
    while len(edges) < shape.hub_in_edges:
        edges.add((mem[rng.randrange(1, len(mem))], "DEPENDS_ON", hub))
    rels = ["DEPENDS_ON", "RELATED_TO", "REFERENCES", "BLOCKS"]
    while len(edges) < shape.edges:
        a, b = rng.randrange(1, len(mem)), rng.randrange(1, len(mem))
        if a == b:
            continue
        if rng.random() < 0.01:
            edges.add((mem[max(a, b)], "SUPERSEDES", mem[min(a, b)]))  # newer → older
        else:
            edges.add((mem[a], rng.choice(rels), mem[b]))
    out += [
        {"kind": "edge", "org": org, "src": s, "relationship": r, "dst": d}
        for s, r, d in sorted(edges)
    ]
    mentions: set[tuple[str, str]] = set()
    while len(mentions) < shape.mentions:
        a, b = rng.randrange(len(mem)), rng.randrange(len(mem))
        if a != b:
            mentions.add((mem[a], mem[b]))
    out += [{"kind": "mention", "org": org, "src": s, "dst": d} for s, d in sorted(mentions)]
    return out


def write(path: Path, shape: Shape, *, seed: int = 13) -> int:
    """Write the graph as NDJSON to ``path``; return its line count."""
    rows = records(shape, seed=seed)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    return len(rows)


@dataclass(frozen=True)
class ImportReport:
    """One measured import."""

    lines: int
    seconds: float
    pending_links: int
    summary: str

    @property
    def lines_per_s(self) -> float:
        """Throughput."""
        return self.lines / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        """Human lines."""
        verdict = "meets" if self.lines_per_s >= TARGET_LINES_PER_S else "misses"
        return (
            f"{self.summary}\nimport: {self.lines} lines in {self.seconds:.1f} s = "
            f"{self.lines_per_s:,.0f} lines/s ({verdict} the {TARGET_LINES_PER_S:,} lines/s "
            f"target), {self.pending_links} links pending"
        )


async def run(path: Path, lines: int) -> ImportReport:
    """Recreate :data:`IMPORT_DATABASE`, migrate it and import ``path`` into it, timed."""
    import asyncio

    from app.bench.database import recreate
    from app.core.db import make_engine
    from app.core.migrations import upgrade
    from app.importers import ndjson

    url = await recreate(IMPORT_DATABASE)
    await asyncio.to_thread(upgrade, url)
    engine = make_engine(url)
    try:
        started = time.perf_counter()
        summary = await ndjson.import_records(
            engine, ndjson.read_file(path), total=lines, show_progress=True
        )
        seconds = time.perf_counter() - started
    finally:
        await engine.dispose()
    return ImportReport(lines, seconds, summary.pending_links, summary.render())
