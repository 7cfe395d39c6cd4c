"""The bulk-import benchmark: a generated NDJSON graph the size and shape of Debian's package
index, imported through ``sibyl-pg import``'s code path, in lines per second.

The shape (defaults, :data:`FULL`): one org, 2,500 users, 58 projects, 8,000 memberships, 63,000
memories shaped like packages (a package-like name, a one-line description of 30-80
characters, one in eight with a longer description of a few paragraphs; metadata: version,
section, priority, installed size, maintainer; one in ten links another memory with
``[[id]]``, half of those forward, to a memory later in the file), 283,000 distinct edges
with Debian's mix of relationships (about 80 % ``DEPENDS_ON``, then ``RECOMMENDS``,
``SUGGESTS``, ``BREAKS``, ``ENHANCES``, ``CONFLICTS``, and 1.2 % ``SUPERSEDES``, Debian's
``Replaces``, from newer to older so the graph is acyclic), ~22,000 of them into one hub memory
(Debian's ``libc6``), and 500 explicit mentions: 357,059 lines. Records come grouped by kind, as
an exporter writes them. Same seed, same file.

``sibyl-pg bench import`` writes the file, recreates a database (``sibyl_bench_import``, or
``--database``) on the ``DATABASE_URL`` server (or the embedded one), migrates it, imports the
file all or nothing and prints lines/s (target: 10,000 lines/s on 2 cores, the 357k lines in
36 s) and the time of each part: reading, writing, search statistics, ``VACUUM (ANALYZE)``,
all included in the figure.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMPORT_DATABASE = "sibyl_bench_import"
TARGET_LINES_PER_S = 10_000


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
    types = ["artifact", "artifact", "note", "decision", "document", "artifact"]
    sections = ["libs", "devel", "utils", "python", "admin", "net", "doc", "games", "science"]
    words = [
        "library",
        "tools",
        "runtime",
        "development",
        "files",
        "bindings",
        "plugin",
        "server",
        "client",
        "documentation",
        "utilities",
        "module",
        "data",
        "shared",
        "headers",
        "daemon",
    ]
    for i, id_ in enumerate(mem):
        body = (
            f"{rng.choice(words).capitalize()} {rng.choice(words)} for "
            f"{rng.choice(['build', 'deploy', 'review', 'plan'])} step {i % 97}"
        )
        body += " (" + " ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) + ")"
        if i % 8 == 0:  # a long description, as a package's extended one
            body += "\n\n" + "\n\n".join(
                " ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) + "."
                for _ in range(rng.randint(1, 4))
            )
        if i % 10 == 0:
            target = mem[(i + rng.randint(1, 500)) % len(mem)] if i % 20 == 0 else mem[i // 2]
            body += f" See [[{target}]]."
        rec: dict[str, Any] = {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": types[i % len(types)],
            "name": f"lib{rng.choice(words)}{i}-{rng.choice(['dev', 'common', 'bin', 'doc'])}",
            "content": body,
            "owner": users[i % len(users)],
            "metadata": {
                "version": f"{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}-1",
                "section": rng.choice(sections),
                "priority": "optional",
                "installed_size": rng.randint(10, 90_000),
                "maintainer": f"Team {i % 300} <team{i % 300}@example.org>",
            },
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
    # Debian's relationships, by share of the non-hub edges (bookworm's main index)
    rels = ["DEPENDS_ON"] * 79 + ["RECOMMENDS"] * 9 + ["SUGGESTS"] * 7 + ["BREAKS"] * 2
    rels += ["ENHANCES", "CONFLICTS"]
    while len(edges) < shape.edges:
        a, b = rng.randrange(1, len(mem)), rng.randrange(1, len(mem))
        if a == b:
            continue
        if rng.random() < 0.012:
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
    timings: dict[str, float]
    load: tuple[float, float, float]

    @property
    def lines_per_s(self) -> float:
        """Throughput."""
        return self.lines / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        """Human lines."""
        verdict = "meets" if self.lines_per_s >= TARGET_LINES_PER_S else "misses"
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
        load = ", ".join(f"{x:.2f}" for x in self.load)
        return (
            f"{self.summary}\nimport: {self.lines:,} lines in {self.seconds:.1f} s = "
            f"{self.lines_per_s:,.0f} lines/s ({verdict} the {TARGET_LINES_PER_S:,} lines/s "
            f"target), {self.pending_links} links pending\n  parts: {parts}\n"
            f"  load average before: {load} (1, 5, 15 min)"
        )


async def run(path: Path, lines: int, *, database: str = IMPORT_DATABASE) -> ImportReport:
    """Recreate ``database``, migrate it and import ``path`` into it, timed."""
    import asyncio
    import os

    from app.cli.progress import PhaseProgress
    from app.core.db import make_engine
    from app.core.migrations import upgrade
    from app.importers import ndjson
    from bench.database import recreate

    url = await recreate(database)
    await asyncio.to_thread(upgrade, url)
    engine = make_engine(url)
    load = os.getloadavg()
    try:
        started = time.perf_counter()
        with PhaseProgress() as shown:
            summary = await ndjson.import_records(
                engine, ndjson.read_file(path), total=lines, progress=shown
            )
        seconds = time.perf_counter() - started
    finally:
        await engine.dispose()
    return ImportReport(
        lines, seconds, summary.pending_links, summary.render(), summary.timings, load
    )
