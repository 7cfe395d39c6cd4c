"""The Debian package index as a benchmark graph: a real graph beside the synthetic one.

The source is the ``Packages`` list apt keeps for Debian bookworm ``main`` on amd64
(``/var/lib/apt/lists/*_debian_dists_bookworm_main_binary-amd64_Packages*``, after
``apt-get update``), read at bench time with ``apt-helper cat-file`` (the lists are stored
compressed, lz4 here) and parsed with ``python-debian``. Nothing of it is committed.

The conversion (deterministic for one list: every choice is a hash of the package name):

- **memories**: one per package, id ``pkg_<name>`` with ``+`` written ``_`` (Debian names never
  hold ``_``, so the mapping is one to one), name = the package name, type ``library`` for the
  ``libs``/``libdevel``/``oldlibs`` sections, ``documentation`` for ``doc``, ``metapackage`` for
  ``metapackages``/``tasks``, else ``package``; content = the description, homepage and tags;
  metadata = version, section, priority. A *transitional* package (its description says so) is
  ``retired``.
- **projects**: one per section (58); the sections of :data:`PRIVATE_SECTIONS` are
  ``private``, the others visible to the org. Priority ``required``/``important`` packages are
  ``org`` scope (no project); :data:`PRIVATE_SHARE` of the others are ``private`` scope, owned by
  their maintainer, a third of them granted to bench reader 1 and another third to reader 2;
  the rest are ``project`` scope in their section.
- **users**: one per maintainer (owner of their packages, contributor of the sections they
  maintain packages in), an org owner, and the bench readers (members: reader 1 of the
  ``python`` project, reader 2 of ``rust``): each reads about half of the graph.
- **edges**, from each package to the *first alternative that is a package of the list* of each
  relation (a virtual package or a package of another archive is dropped; no self-edge):
  Depends and Pre-Depends → ``DEPENDS_ON``, Recommends → ``REFERENCES``, Breaks and Conflicts
  → ``CONTRADICTS``, Replaces → ``SUPERSEDES`` (the replacing package supersedes the replaced
  one). Debian's Replaces is often mutual (two packages replacing each other across a file
  move), and the write rules refuse a SUPERSEDES cycle: taken in list order, a Replaces edge
  that would close a cycle of the ones kept is **dropped** (counted in
  :attr:`DebianGraph.dropped_supersedes`).

The records go through the product's own import path (:func:`app.importers.ndjson.import_records`,
the rules of every write: the superseded mark, cycle refusal, links, search statistics), into a
database of their own (:data:`DEBIAN_DATABASE`), reused while its manifest records the same list
and converter version.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from app.core.db import make_engine
from app.repo.readers import reader_by_user
from app.repo.readrule import readable
from bench import database as benchdb
from bench.generate import GenerateSummary, readable_share

Log = Callable[[str], None]

LISTS_DIR = Path("/var/lib/apt/lists")
LIST_PATTERN = "*_debian_dists_bookworm_main_binary-amd64_Packages*"
APT_HELPER = "/usr/lib/apt/apt-helper"
DEBIAN_DATABASE = "sibyl_bench_debian"
ORG = "org_debian"
CONVERTER_VERSION = 1  # bump when the conversion changes: a stored graph is then rebuilt

RELATIONSHIPS: dict[str, str] = {
    "depends": "DEPENDS_ON",
    "pre-depends": "DEPENDS_ON",
    "recommends": "REFERENCES",
    "breaks": "CONTRADICTS",
    "conflicts": "CONTRADICTS",
    "replaces": "SUPERSEDES",
}
"""Debian relation field → the policy relationship its edges get."""

PRIVATE_SECTIONS = frozenset(
    {
        "libdevel",
        "doc",
        "perl",
        "python",
        "haskell",
        "rust",
        "golang",
        "javascript",
        "java",
        "ruby",
        "gnu-r",
        "ocaml",
    }
)
"""Sections whose project is private (about half of the packages); the others are org-visible."""
ORG_PRIORITIES = frozenset({"required", "important"})
PRIVATE_SHARE = 0.05  # of the other packages: private scope, owned by their maintainer
OWNER = "user_deb_owner"
READERS: dict[str, str] = {"user_deb_reader1": "python", "user_deb_reader2": "rust"}
"""The bench readers and the private project each is a member of (viewer)."""
HUB_COUNT = 8

_TYPES = {
    "libs": "library",
    "libdevel": "library",
    "oldlibs": "library",
    "doc": "documentation",
    "metapackages": "metapackage",
    "tasks": "metapackage",
}
_EMAIL = re.compile(r"<([^>]+)>")


class DebianListMissing(RuntimeError):
    """The Packages list is not on this machine (``apt-get update`` fetches it)."""


@dataclass(frozen=True)
class Package:
    """What the conversion reads of one paragraph of the Packages list."""

    name: str
    version: str
    section: str
    priority: str
    maintainer: str
    description: str
    homepage: str
    tags: str
    relations: dict[str, list[list[str]]]  # field → alternatives (names), in list order


@dataclass
class DebianGraph:
    """The converted graph: records for the importer, and what the benchmark needs of it."""

    records: list[dict[str, Any]]
    counts: Counter[str] = field(default_factory=Counter)
    relationships: Counter[str] = field(default_factory=Counter)
    dropped_supersedes: int = 0
    dropped_virtual: int = 0
    retired: int = 0
    readers: list[str] = field(default_factory=list)


def find_list(lists_dir: Path = LISTS_DIR) -> Path:
    """The bookworm main amd64 Packages list apt keeps; :class:`DebianListMissing` if none."""
    found = sorted(p for p in lists_dir.glob(LIST_PATTERN) if "updates" not in p.name)
    found = [p for p in found if "security" not in p.name]
    if not found:
        raise DebianListMissing(
            f"no Debian bookworm main amd64 Packages list in {lists_dir} (run `apt-get update`)"
        )
    return found[0]


def read_list(path: Path) -> bytes:
    """The uncompressed text of a Packages list, as ``apt-helper cat-file`` gives it."""
    try:
        done = subprocess.run(
            [APT_HELPER, "cat-file", str(path)], capture_output=True, check=True, timeout=120
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise DebianListMissing(f"cannot read {path} with {APT_HELPER}: {exc}") from None
    return done.stdout


def parse(data: bytes) -> list[Package]:
    """Every package paragraph of a Packages list (first paragraph wins for a repeated name)."""
    from debian import deb822

    out: dict[str, Package] = {}
    for para in deb822.Packages.iter_paragraphs(io.BytesIO(data), use_apt_pkg=False):
        name = para["Package"]
        if name in out:
            continue
        relations = {
            key: [[alt["name"] for alt in group] for group in para.relations.get(key) or []]
            for key in RELATIONSHIPS
        }
        out[name] = Package(
            name=name,
            version=para.get("Version", ""),
            section=para.get("Section", "misc").split("/")[-1],
            priority=para.get("Priority", "optional"),
            maintainer=para.get("Maintainer", ""),
            description=para.get("Description", "").split("\n")[0].strip(),
            homepage=para.get("Homepage", ""),
            tags=" ".join(para.get("Tag", "").split()),
            relations=relations,
        )
    return list(out.values())


def entity_id(name: str) -> str:
    """The memory id of package ``name`` (``+`` → ``_``: one to one for Debian names)."""
    return "pkg_" + name.replace("+", "_")


def project_id(section: str) -> str:
    """The project id of a section."""
    return "proj_" + section.replace("+", "_")


def _fraction(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts`` (stable across runs and Python versions)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _user_of(maintainer: str) -> str:
    found = _EMAIL.search(maintainer)
    key = (found.group(1) if found else maintainer).strip().lower() or "unknown"
    return "user_deb_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _acyclic_supersedes(edges: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """The SUPERSEDES edges kept (list order) and how many were dropped for closing a cycle."""
    out: dict[str, list[str]] = defaultdict(list)
    kept: list[tuple[str, str]] = []
    dropped = 0
    for src, dst in edges:
        # would src -> dst close a cycle, i.e. does dst already reach src?
        seen = {dst}
        stack = [dst]
        closes = False
        while stack:
            node = stack.pop()
            if node == src:
                closes = True
                break
            for nxt in out.get(node, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        if closes:
            dropped += 1
            continue
        out[src].append(dst)
        kept.append((src, dst))
    return kept, dropped


def convert(packages: list[Package]) -> DebianGraph:
    """The import records of the graph (see the module docstring)."""
    graph = DebianGraph(records=[], readers=list(READERS))
    records = graph.records
    names = {p.name for p in packages}
    sections = sorted({p.section for p in packages})
    records.append({"kind": "org", "id": ORG, "name": "Debian bookworm main (amd64)"})
    maintainers: dict[str, str] = {}
    member_of: set[tuple[str, str]] = set()
    for p in packages:
        user = _user_of(p.maintainer)
        maintainers.setdefault(user, p.maintainer)
        member_of.add((project_id(p.section), user))
    users = [(OWNER, "owner"), *((r, "member") for r in READERS)]
    users += [(u, "member") for u in sorted(maintainers)]
    for user, role in users:
        records.append(
            {"kind": "user", "id": user, "org": ORG, "handle": user.removeprefix("user_"),
             "role": role}
        )  # fmt: skip
    for section in sections:
        visibility = "private" if section in PRIVATE_SECTIONS else "org"
        records.append(
            {"kind": "project", "id": project_id(section), "org": ORG, "name": section,
             "visibility": visibility}
        )  # fmt: skip
    for project, user in sorted(member_of):
        records.append({"kind": "member", "project": project, "user": user, "role": "contributor"})
    for reader, section in READERS.items():
        if section in sections:
            records.append(
                {"kind": "member", "project": project_id(section), "user": reader,
                 "role": "viewer"}
            )  # fmt: skip
    grants: list[dict[str, Any]] = []
    for p in packages:
        eid = entity_id(p.name)
        owner = _user_of(p.maintainer)
        record: dict[str, Any] = {
            "kind": "entity",
            "id": eid,
            "org": ORG,
            "type": _TYPES.get(p.section, "package"),
            "name": p.name,
            "content": "\n\n".join(
                x
                for x in (
                    p.description,
                    f"Homepage: {p.homepage}" if p.homepage else "",
                    f"Tags: {p.tags}" if p.tags else "",
                )
                if x
            ),
            "owner": owner,
            "metadata": {"version": p.version, "section": p.section, "priority": p.priority},
        }
        if p.priority in ORG_PRIORITIES:
            record["scope"] = "org"
        else:
            record["project"] = project_id(p.section)
            pick = _fraction("scope", p.name)
            if pick < PRIVATE_SHARE:
                record["scope"] = "private"
                readers = list(READERS)
                who = int(3 * pick / PRIVATE_SHARE)  # thirds: reader 1, reader 2, nobody
                if who < len(readers):
                    grants.append({"kind": "grant", "entity": eid, "user": readers[who]})
            else:
                record["scope"] = "project"
        if "transitional" in p.description.lower():
            record["lifecycle"] = "retired"
            graph.retired += 1
        records.append(record)
    records.extend(grants)
    seen: set[tuple[str, str, str]] = set()
    supersedes: list[tuple[str, str]] = []
    for p in packages:
        for key, rel in RELATIONSHIPS.items():
            for group in p.relations.get(key, []):
                real = [n for n in group if n in names]
                if not real:
                    graph.dropped_virtual += 1
                    continue
                if real[0] == p.name:
                    continue
                edge = (entity_id(p.name), rel, entity_id(real[0]))
                if edge in seen:
                    continue
                seen.add(edge)
                if rel == "SUPERSEDES":
                    supersedes.append((edge[0], edge[2]))
                else:
                    records.append(
                        {"kind": "edge", "org": ORG, "src": edge[0], "dst": edge[2],
                         "relationship": rel}
                    )  # fmt: skip
    kept, graph.dropped_supersedes = _acyclic_supersedes(supersedes)
    for src, dst in kept:
        records.append(
            {"kind": "edge", "org": ORG, "src": src, "dst": dst, "relationship": "SUPERSEDES"}
        )
    for r in records:
        graph.counts[r["kind"]] += 1
        if r["kind"] == "edge":
            graph.relationships[r["relationship"]] += 1
    return graph


HUBS_SQL = text(
    f"""/* sibyl:bench.debian_hubs */
SELECT t.id, d.n
FROM (SELECT e.dst_id AS id, count(*) AS n FROM edges e
      WHERE e.org_id = :r_org GROUP BY e.dst_id ORDER BY count(*) DESC LIMIT 64) d
JOIN entities t ON t.org_id = :r_org AND t.id = d.id
WHERE t.lifecycle <> 'retired' AND {readable("t")}
ORDER BY d.n DESC, t.id
LIMIT :hubs"""
)


async def _hubs(url: str, reader: str) -> dict[str, int]:
    """The :data:`HUB_COUNT` packages with the most incoming edges that ``reader`` may read."""
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            who = await reader_by_user(conn, user_id=reader)
            assert who is not None
            rows = await conn.execute(HUBS_SQL, {**who.params(), "hubs": HUB_COUNT})
            return {r.id: int(r.n) for r in rows}
    finally:
        await engine.dispose()


async def _import(url: str, records: list[dict[str, Any]]) -> None:
    from app.importers import ndjson

    engine = make_engine(url)
    try:
        await ndjson.import_records(engine, ndjson.from_dicts(records), total=len(records))
    finally:
        await engine.dispose()


def spec_of(path: Path) -> dict[str, Any]:
    """What identifies a converted graph: the list's content hash and the converter version."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return {"source": "debian", "list": path.name, "sha256": digest, "version": CONVERTER_VERSION}


def ensure_debian_graph(name: str, *, force: bool, log: Log) -> GenerateSummary:
    """The summary of the Debian graph in benchmark database ``name``, converting and importing
    it (into a freshly created database) unless the manifest records the same list and
    converter version. Raises :class:`DebianListMissing` when the list is not on the machine."""
    from app.core.migrations import upgrade

    path = find_list()
    spec = spec_of(path)
    url = benchdb.bench_url(name)
    if not force and asyncio.run(benchdb.exists(name)):
        found = asyncio.run(benchdb.read_manifest(url, ORG))
        if found is not None and found[0] == spec:
            log(f"Debian graph found in database {name} (imported before; --regenerate to redo)")
            upgrade(url)
            return GenerateSummary(**found[1])
    started = time.monotonic()
    packages = parse(read_list(path))
    graph = convert(packages)
    log(
        f"Debian list {path.name}: {len(packages):,} packages, {graph.counts['edge']:,} edges"
        f" ({dict(graph.relationships)}); {graph.dropped_supersedes} Replaces edges dropped"
        f" (they closed a SUPERSEDES cycle), {graph.retired} transitional packages retired;"
        f" converted in {time.monotonic() - started:.1f}s"
    )
    asyncio.run(benchdb.recreate(name))
    upgrade(url)
    t0 = time.monotonic()
    asyncio.run(_import(url, graph.records))
    seconds = time.monotonic() - t0
    log(f"imported {len(graph.records):,} records in {seconds:.1f}s")
    hubs = asyncio.run(_hubs(url, graph.readers[0]))
    counts = {k: int(v) for k, v in graph.counts.items()}
    counts["dropped_supersedes"] = graph.dropped_supersedes
    counts["retired"] = graph.retired
    summary = GenerateSummary(
        org=ORG,
        counts=counts,
        copy_seconds=round(seconds, 2),
        total_seconds=round(time.monotonic() - started, 2),
        rows_per_s=round(len(graph.records) / seconds, 1) if seconds else 0.0,
        hubs=list(hubs),
        readers=graph.readers,
        checksum=spec["sha256"],
        hub_degrees=hubs,
    )
    summary.readable_share = asyncio.run(readable_share(url, ORG, graph.readers))
    asyncio.run(benchdb.write_manifest(url, ORG, spec, summary.as_dict()))
    log(summary.render())
    return summary
