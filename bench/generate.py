"""``sibyl-pg bench generate``: a deterministic synthetic org, loaded with ``COPY``
(docs/benchmark.md).

Shape (``scale`` = entities / 1,000,000):

- **Tenancy.** One org, six projects (two ``org``-visible, four ``private``), about
  max(12, entities / 2000) users (an org owner, an org admin, members with project roles) and
  four *bench readers*: reader *k* is a member of private project *k* only, so each reads the two
  org-visible projects, one private project, the org-scoped memories and the private memories it
  owns or holds a grant on: about half of the graph (the summary measures it per reader).
- **Memories.** 10% ``org`` scope, 12% ``private`` (40% of those inside a project; 0-2 grants
  each, and a grant to a bench reader 30% of the time), the rest ``project`` scope. Lifecycle 88%
  active, 8% superseded, 4% retired; revision 1-3. Ids are ``<type>_<12 hex>`` (a bijection of
  the row number, so never a collision).
- **Long memories: 30%.** Prose ones (document, decision, note, ...) are Markdown sections of
  about 620-950 characters under ``##`` headings, over 2000 characters in all, so the real cutter
  (:func:`app.domain.spans.cut_prose`) makes exactly one span per section; observations are log
  lines cut in windows of 40 lines (:func:`app.domain.spans.cut_evidence`). The passages are
  written directly (ids from :func:`app.domain.passages.passage_id` with the memory's revision),
  with ``passage_kind``, ``passage_total`` and ``passages_lossless`` set on the memory; the smoke
  test checks them against the cutter.
- **Edges.** Typed with the relationships of the policy (rule: relationship-policy) (not the
  synthetic or passage ones). Out-degrees are Pareto (shape 2, median about 6 at 8 edges per memory)
  and destinations follow a Zipf popularity (exponent 0.5); on top, 8 **hubs** (org-readable
  artifacts and documents) have ``45,000 × scale`` edges each (half out, half in): 45,000 at 1M
  memories. The total is exactly ``--edges``.
- **Mentions** (about 0.67 per memory) and **communities** (per audience, 8-30 members, about
  half of each audience's memories).
- Two planted words for search: ``kestrel`` in 10% of passages (100,000 × scale at about 3.3
  passages per long memory: "a query matching 100k passages" at 1M) and ``ocelot`` in 0.2%.

Everything derives from ``--seed`` through named random streams, so a seed gives the same rows,
ids and order every time. Loading into a fresh database (the benchmark's) drops the secondary
indexes and foreign keys first and rebuilds (and re-validates) them after the ``COPY``; loading
into a database that holds other data (the smoke test) keeps them. ``VACUUM (ANALYZE)`` ends
both, so the walk's index-only scans find a fresh visibility map.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy import text

from app.core.db import make_engine
from app.domain.communities import community_id
from app.domain.passages import passage_id
from app.repo import term_stats
from app.repo.readers import reader_by_user
from app.repo.readrule import readable
from bench.defaults import DEFAULT_EDGES, DEFAULT_ENTITIES, DEFAULT_ORG, DEFAULT_SEED

HUB_COUNT = 8
HUB_EDGES_AT_1M = 45_000  # each hub's edges at 1M memories (the benchmark: at least 40,000)
LONG_SHARE = 0.30
COMMON_TERM = "kestrel"  # in 10% of passages
COMMON_TERM_SHARE = 0.10
RARE_TERM = "ocelot"  # in 0.2% of passages
RARE_TERM_SHARE = 0.002
EVIDENCE_LINES = 40  # the cutter's default window (SIBYL_EVIDENCE_LINES)

Log = Callable[[str], None]

# (name, visibility, share of project-scoped memories)
PROJECTS: tuple[tuple[str, str, float], ...] = (
    ("platform", "org", 0.16),
    ("handbook", "org", 0.16),
    ("payments", "private", 0.17),
    ("search", "private", 0.17),
    ("mobile", "private", 0.17),
    ("infra", "private", 0.17),
)
BENCH_READERS = 4  # reader k is a member of the k-th private project

SHORT_TYPES: tuple[tuple[str, int], ...] = (
    ("task", 25),
    ("note", 18),
    ("decision", 12),
    ("artifact", 10),
    ("plan", 7),
    ("document", 6),
    ("episode", 6),
    ("person", 5),
    ("pattern", 4),
    ("rule", 4),
    ("procedure", 3),
)
LONG_TYPES: tuple[tuple[str, int], ...] = (
    ("document", 22),
    ("observation", 20),
    ("decision", 16),
    ("note", 14),
    ("artifact", 8),
    ("plan", 8),
    ("episode", 6),
    ("procedure", 6),
)
TYPES = tuple(sorted({t for t, _ in SHORT_TYPES} | {t for t, _ in LONG_TYPES}))

# Policy relationships (rule: relationship-policy) that stored edges carry, with their share of the
# edges.
EDGE_RELATIONSHIPS: tuple[tuple[str, int], ...] = (
    ("RELATED_TO", 15),
    ("REFERENCES", 12),
    ("DEPENDS_ON", 10),
    ("ABOUT", 8),
    ("TOUCHES", 6),
    ("PRODUCES", 5),
    ("IMPLEMENTED", 5),
    ("BLOCKS", 4),
    ("SUPPORTS", 4),
    ("DECIDES", 4),
    ("REQUIRES", 4),
    ("VALIDATED_BY", 3),
    ("USES_PROCEDURE", 3),
    ("ENCOUNTERED", 3),
    ("SUPERSEDES", 3),
    ("BELONGS_TO", 3),
    ("CONTAINS", 3),
    ("DOCUMENTED_IN", 3),
    ("CONTRADICTS", 2),
)

_WORD_TEXT = """
cache gateway latency request queue worker schema index planner vacuum replica shard tenant
budget deploy rollout canary metric alert dashboard incident postmortem runbook migration table
column constraint trigger partition snapshot backup restore checkpoint buffer page tuple heap
toast lock deadlock timeout retry backoff circuit breaker pool connection session token key
secret rotation audit policy permission role member project scope grant owner reader writer
parser lexer compiler runtime module package import export version release branch merge commit
review approve reject test fixture oracle property contract boundary clamp limit offset window
slice passage span heading section paragraph summary preview content budget score weight decay
hop edge node graph walk frontier level seed neighbor community cluster hub degree fanout
search ranking fusion query phrase stem lexeme vector document corpus import export bulk batch
stream copy throughput percentile histogram sample trace span profile flame kernel socket port
host container image registry cluster node service endpoint route handler middleware client
server protocol payload header status error warning notice debug info trace log line window
config setting environment variable default override fallback feature flag experiment cohort
customer invoice payment ledger refund currency account balance transfer settlement report
mobile android ios screen layout widget render frame animation gesture offline sync conflict
storage bucket object blob archive retention compliance privacy consent region zone failover
latency jitter burst spike regression baseline target goal milestone roadmap quarter sprint
estimate owner assignee blocker dependency decision rationale alternative consequence risk
"""
_WORDS = list(dict.fromkeys(_WORD_TEXT.split()))  # vocabulary, most frequent first
_HEADINGS = (
    "Context",
    "Problem",
    "Decision",
    "Rationale",
    "Alternatives considered",
    "Consequences",
    "Rollout plan",
    "Risks",
    "Open questions",
    "Measurements",
    "Timeline",
    "Background",
    "Design",
    "Interfaces",
    "Testing",
    "Operations",
)
_SERVICES = ("gateway", "planner", "worker", "indexer", "billing", "sync", "auth", "search")
_LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG")
_HUB_NAMES = (
    "Platform monorepo",
    "Engineering handbook",
    "Service catalog",
    "On-call runbook index",
    "Architecture overview",
    "Data platform",
    "Release train",
    "Incident review archive",
)

_ENTITY_COLUMNS = (
    "org_id",
    "id",
    "type",
    "name",
    "content",
    "project_id",
    "scope",
    "owner_id",
    "lifecycle",
    "metadata",
    "revision",
    "passage_kind",
    "passage_total",
    "passages_lossless",
    "created_at",
    "updated_at",
)
_PASSAGE_COLUMNS = (
    "org_id",
    "id",
    "parent_id",
    "parent_revision",
    "passage_index",
    "start_offset",
    "end_offset",
    "breadcrumb",
    "content",
)
# Child tables first: the order rows are deleted in; loading goes the other way.
TABLES = (
    "community_members",
    "communities",
    "mentions",
    "edges",
    "entity_grants",
    "passages",
    "entities",
    "project_members",
    "projects",
    "api_keys",
    "users",
    "orgs",
)
_TENANCY_COLUMNS: dict[str, tuple[str, ...]] = {
    "orgs": ("id", "name"),
    "users": ("org_id", "id", "handle", "role"),
    "projects": ("org_id", "id", "name", "visibility"),
    "project_members": ("org_id", "project_id", "user_id", "role"),
}
_SCOPES = ("project", "org", "private")
_LIFECYCLES = ("active", "superseded", "retired")
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class GraphSpec:
    """What to generate: sizes, seed and org id. Everything else follows from these."""

    entities: int = DEFAULT_ENTITIES
    edges: int = DEFAULT_EDGES
    seed: int = DEFAULT_SEED
    org: str = DEFAULT_ORG

    def __post_init__(self) -> None:
        if self.entities < 200:
            raise ValueError("--entities must be at least 200")
        if self.edges < 0 or self.edges > self.entities * 200:
            raise ValueError("--edges must be between 0 and 200 per entity")
        if not self.org.replace("_", "").replace("-", "").isalnum() or len(self.org) > 60:
            raise ValueError("--org must be a short id of letters, digits, '_' and '-'")

    @property
    def scale(self) -> float:
        """entities / 1,000,000: hub sizes and search matches scale with it."""
        return self.entities / 1_000_000

    @property
    def hubs(self) -> int:
        """Number of hubs (8 unless the graph is tiny)."""
        return min(HUB_COUNT, max(1, self.entities // 250))

    @property
    def hub_out(self) -> int:
        """Outgoing edges of each hub (and, on average, incoming edges too)."""
        half = math.ceil(HUB_EDGES_AT_1M * self.scale / 2)
        return max(1, min(half, self.edges // (4 * self.hubs), self.entities // 3))

    @property
    def tag(self) -> str:
        """The org id without its ``org_`` prefix: part of every user id (unique server-wide)."""
        return self.org.removeprefix("org_")

    def as_dict(self) -> dict[str, Any]:
        """The spec as JSON-able values."""
        return asdict(self)


@dataclass
class GenerateSummary:
    """What one generation wrote and how fast."""

    org: str
    counts: dict[str, int]
    copy_seconds: float
    total_seconds: float
    rows_per_s: float
    hubs: list[str]
    readers: list[str]
    checksum: str
    readable_share: dict[str, float] = field(default_factory=dict)
    term_passages: dict[str, int] = field(default_factory=dict)
    hub_degrees: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-able values."""
        return asdict(self)

    def render(self) -> str:
        """A few human-readable lines."""
        counts = ", ".join(f"{n:,} {t}" for t, n in self.counts.items() if n)
        lines = [
            f"org {self.org}: {counts}",
            f"COPY {sum(self.counts.values()):,} rows in {self.copy_seconds:.1f}s"
            f" ({self.rows_per_s:,.0f} rows/s); {self.total_seconds:.1f}s with indexes,"
            " constraints and VACUUM ANALYZE",
        ]
        if self.hub_degrees:
            degrees = sorted(self.hub_degrees.values())
            lines.append(f"hubs: {len(degrees)}, edges each {degrees[0]:,}..{degrees[-1]:,}")
        if self.readable_share:
            shares = ", ".join(f"{r}: {s:.0%}" for r, s in self.readable_share.items())
            lines.append(f"readable by the bench readers: {shares}")
        if self.term_passages:
            terms = ", ".join(f"{t!r} in {n:,} passages" for t, n in self.term_passages.items())
            lines.append(f"search terms: {terms}")
        lines.append(f"checksum {self.checksum}")
        return "\n".join(lines)


def _rng(spec: GraphSpec, stream: str) -> random.Random:
    """An independent, deterministic random stream of the spec (seeding with a str is stable)."""
    return random.Random(f"sibyl-bench:{spec.seed}:{stream}")


def _cum(weights: list[float]) -> list[float]:
    return list(itertools.accumulate(weights))


_WORD_CUM = _cum([1.0 / (k + 1) ** 0.8 for k in range(len(_WORDS))])


def user_ids(spec: GraphSpec) -> list[str]:
    """The regular users' ids (user 0 is the org owner, user 1 an org admin)."""
    return [f"user_{spec.tag}_{k:04d}" for k in range(max(12, spec.entities // 2000))]


def reader_ids(spec: GraphSpec) -> list[str]:
    """The bench readers' ids; reader k is a member of the k-th private project only."""
    return [f"user_{spec.tag}_reader{k}" for k in range(1, BENCH_READERS + 1)]


def project_ids() -> list[str]:
    """The projects' ids, in :data:`PROJECTS` order."""
    return [f"proj_{name}" for name, _, _ in PROJECTS]


class Plan:
    """Every memory's attributes (compact arrays) and the tenancy rows of one spec.

    Bodies, passages, edges and mentions are not held: they are generated while streaming.
    """

    def __init__(self, spec: GraphSpec) -> None:
        self.spec = spec
        n = spec.entities
        rng = _rng(spec, "entities")
        self.users = user_ids(spec)
        self.readers = reader_ids(spec)
        self.projects = project_ids()
        org_visible = [i for i, (_, vis, _) in enumerate(PROJECTS) if vis == "org"]
        project_cum = _cum([share for _, _, share in PROJECTS])
        short_names = [t for t, _ in SHORT_TYPES]
        short_cum = _cum([float(w) for _, w in SHORT_TYPES])
        long_names = [t for t, _ in LONG_TYPES]
        long_cum = _cum([float(w) for _, w in LONG_TYPES])
        type_index = {t: k for k, t in enumerate(TYPES)}

        self.type = array("B", bytes(n))
        self.scope = array("B", bytes(n))
        self.project = array("b", [-1]) * n
        self.owner = array("i", [0]) * n
        self.lifecycle = array("B", bytes(n))
        self.revision = array("B", [1]) * n
        self.long = array("B", bytes(n))
        self.ids: list[str] = []
        multiplier = 0x9E3779B97F4A7C15 | 1
        offset = rng.getrandbits(48)
        hubs = spec.hubs
        for i in range(n):
            if i < hubs:  # a hub: an org-readable artifact or document, short, active
                kind = "artifact" if i % 2 == 0 else "document"
                if i % 2 == 0:
                    self.scope[i] = 1
                else:
                    self.project[i] = org_visible[i // 2 % len(org_visible)]
                self.owner[i] = i % len(self.users)
            else:
                is_long = rng.random() < LONG_SHARE
                self.long[i] = is_long
                if is_long:
                    kind = rng.choices(long_names, cum_weights=long_cum)[0]
                else:
                    kind = rng.choices(short_names, cum_weights=short_cum)[0]
                r = rng.random()
                if r < 0.10:
                    self.scope[i] = 1
                    self.owner[i] = rng.randrange(len(self.users))
                elif r < 0.22:
                    self.scope[i] = 2
                    if rng.random() < 0.08:  # owned by a bench reader
                        self.owner[i] = len(self.users) + rng.randrange(len(self.readers))
                    else:
                        self.owner[i] = rng.randrange(len(self.users))
                    if rng.random() < 0.40:
                        self.project[i] = _pick(rng, project_cum)
                else:
                    self.project[i] = _pick(rng, project_cum)
                    self.owner[i] = rng.randrange(len(self.users))
                r = rng.random()
                self.lifecycle[i] = 0 if r < 0.88 else (1 if r < 0.96 else 2)
                r = rng.random()
                self.revision[i] = 1 if r < 0.80 else (2 if r < 0.95 else 3)
            self.type[i] = type_index[kind]
            self.ids.append(f"{kind}_{(i * multiplier + offset) % (1 << 48):012x}")
        self.order = sorted(range(n), key=self.ids.__getitem__)
        self.hub_indices = list(range(hubs))

    def type_of(self, i: int) -> str:
        """Type of memory ``i``."""
        return TYPES[self.type[i]]

    def project_of(self, i: int) -> str | None:
        """Project id of memory ``i`` (None outside any project)."""
        p = self.project[i]
        return self.projects[p] if p >= 0 else None

    def owner_of(self, i: int) -> str:
        """Owner user id of memory ``i``."""
        k = self.owner[i]
        return self.users[k] if k < len(self.users) else self.readers[k - len(self.users)]

    def hub_ids(self) -> list[str]:
        """The hubs' ids."""
        return [self.ids[i] for i in self.hub_indices]


def _pick(rng: random.Random, cum: list[float]) -> int:
    x = rng.random() * cum[-1]
    for k, c in enumerate(cum):
        if x < c:
            return k
    return len(cum) - 1


# ---------------------------------------------------------------------------------------------
# Rows


def tenancy_rows(plan: Plan) -> dict[str, list[tuple[Any, ...]]]:
    """Rows of orgs, users, projects and project members."""
    spec = plan.spec
    rng = _rng(spec, "tenancy")
    org = spec.org
    users = [(org, u, u.removeprefix("user_"), "member") for u in plan.users]
    users[0] = (org, plan.users[0], plan.users[0].removeprefix("user_"), "owner")
    users[1] = (org, plan.users[1], plan.users[1].removeprefix("user_"), "admin")
    users += [(org, r, r.removeprefix("user_"), "member") for r in plan.readers]
    projects = [
        (org, pid, name.capitalize(), vis)
        for pid, (name, vis, _) in zip(plan.projects, PROJECTS, strict=True)
    ]
    members: list[tuple[Any, ...]] = []
    roles = ("viewer", "contributor", "contributor", "maintainer")
    private = [
        pid for pid, (_, vis, _) in zip(plan.projects, PROJECTS, strict=True) if vis != "org"
    ]
    for pid in plan.projects:
        for k, user in enumerate(plan.users):
            if k == 0:
                members.append((org, pid, user, "owner"))
            elif rng.random() < 0.35:
                members.append((org, pid, user, rng.choice(roles)))
    for k, reader in enumerate(plan.readers):
        members.append((org, private[k % len(private)], reader, "viewer"))
    members.sort(key=lambda r: (r[1], r[2]))
    return {
        "orgs": [(org, f"Benchmark org (seed {spec.seed})")],
        "users": users,
        "projects": projects,
        "project_members": members,
    }


class _Text:
    """Body text from one random stream (the order of calls fixes the text).

    Drawing every word of a million bodies one by one is slow, so a pool of about 4 MB of
    Zipf-distributed words (in paragraphs) and a pool of 30,000 log lines (with increasing
    timestamps) are drawn once; a body is a slice of a pool at a random offset.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        words = rng.choices(_WORDS, cum_weights=_WORD_CUM, k=600_000)
        paragraphs: list[str] = []
        pos = 0
        while pos < len(words):
            k = rng.randint(25, 55)
            paragraphs.append(" ".join(words[pos : pos + k]))
            pos += k
        self.pool = "\n\n".join(paragraphs)
        lines: list[str] = []
        t = _EPOCH
        for _ in range(30_000):
            t += timedelta(milliseconds=rng.randint(5, 4000))
            w = " ".join(rng.choices(_WORDS, cum_weights=_WORD_CUM, k=3))
            lines.append(
                f"{t:%Y-%m-%dT%H:%M:%S}Z {rng.choice(_LEVELS)} {rng.choice(_SERVICES)} {w}"
                f" took {rng.randint(1, 900)} ms\n"
            )
        self.lines = lines

    def words(self, k: int) -> list[str]:
        """``k`` words drawn one by one (for names)."""
        return self.rng.choices(_WORDS, cum_weights=_WORD_CUM, k=k)

    def paragraph_text(self, length: int) -> str:
        """Whole words from the pool, in paragraphs, about ``length`` characters (a little less)."""
        pool = self.pool
        start = pool.find(" ", self.rng.randrange(len(pool) - length - 200)) + 1
        end = pool.rfind(" ", start, start + length + 1)
        return pool[start : max(end, start + 1)].strip()

    def log_lines(self, n: int) -> list[str]:
        """``n`` consecutive log lines from the pool."""
        at = self.rng.randrange(len(self.lines) - n)
        return self.lines[at : at + n]

    def plant(self, body: str, term: str) -> str:
        """``body`` with ``term`` inserted before a word boundary (or appended)."""
        at = body.find(" ", self.rng.randrange(len(body))) if body else -1
        if at < 0:
            return body + " " + term
        return body[:at] + " " + term + body[at:]


Spans = list[tuple[int, int, str | None]]  # (start, end, breadcrumb) of each passage


def _prose(tx: _Text) -> tuple[str, Spans]:
    """A prose body of ``##`` sections (about 620-950 characters each, > 2000 in all) and its
    spans: one per section, as the prose cutter makes them."""
    rng = tx.rng
    headings = rng.sample(_HEADINGS, k=8)
    sections: list[str] = []
    spans: Spans = []
    total = 0
    count = rng.choice((3, 3, 3, 4))
    while len(sections) < count or total <= 2100:
        heading = headings[len(sections) % len(headings)]
        head = f"## {heading}\n\n"
        body = tx.paragraph_text(rng.randint(640, 950) - len(head) - 2)
        if rng.random() < COMMON_TERM_SHARE:
            body = tx.plant(body, COMMON_TERM)
        if rng.random() < RARE_TERM_SHARE:
            body = tx.plant(body, RARE_TERM)
        section = head + body + "\n\n"
        spans.append((total, total + len(section), heading))
        sections.append(section)
        total += len(section)
    return "".join(sections), spans


def _evidence(tx: _Text) -> tuple[str, Spans]:
    """A log body (45-110 lines) and its windows of :data:`EVIDENCE_LINES` lines."""
    rng = tx.rng
    lines = tx.log_lines(rng.randint(45, 110))
    spans: Spans = []
    pos = 0
    for w in range(0, len(lines), EVIDENCE_LINES):
        window = lines[w : w + EVIDENCE_LINES]
        for term, share in ((COMMON_TERM, COMMON_TERM_SHARE), (RARE_TERM, RARE_TERM_SHARE)):
            if rng.random() < share:
                k = rng.randrange(len(window))
                window[k] = window[k].replace(" took ", f" {term} took ", 1)
        lines[w : w + EVIDENCE_LINES] = window
        size = sum(len(line) for line in window)
        spans.append((pos, pos + size, None))
        pos += size
    return "".join(lines), spans


def memory_rows(
    plan: Plan,
) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]:
    """Per memory, in id order: its ``entities`` row and its ``passages`` rows."""
    spec = plan.spec
    org = spec.org
    tx = _Text(_rng(spec, "content"))
    rng = tx.rng
    hubs = set(plan.hub_indices)
    for i in plan.order:
        kind = plan.type_of(i)
        eid = plan.ids[i]
        revision = plan.revision[i]
        created = _EPOCH + timedelta(seconds=rng.randrange(0, 2 * 365 * 86400))
        updated = created + timedelta(seconds=rng.randrange(0, 30 * 86400))
        passages: list[tuple[Any, ...]] = []
        kind_cut: str | None = None
        lossless = False
        if i in hubs:
            name = _HUB_NAMES[i % len(_HUB_NAMES)]
            body = f"{name}: the entry point most memories of the org link to. " + (
                tx.paragraph_text(300)
            )
        else:
            name = f"{kind.capitalize()}: " + " ".join(tx.words(rng.randint(2, 5)))
            if plan.long[i]:
                if kind == "observation":
                    body, spans = _evidence(tx)
                    kind_cut, lossless = "evidence", False
                else:
                    body, spans = _prose(tx)
                    kind_cut, lossless = "prose", True
                for index, (start, end, crumb) in enumerate(spans):
                    piece = body[start:end]
                    passages.append(
                        (
                            org,
                            passage_id(eid, revision, index, piece),
                            eid,
                            revision,
                            index,
                            start,
                            end,
                            crumb,
                            piece,
                        )
                    )
            else:
                body = tx.paragraph_text(rng.randint(80, 600))
                if rng.random() < COMMON_TERM_SHARE / 2:
                    body = tx.plant(body, COMMON_TERM)
        row = (
            org,
            eid,
            kind,
            name,
            body,
            plan.project_of(i),
            _SCOPES[plan.scope[i]],
            plan.owner_of(i),
            _LIFECYCLES[plan.lifecycle[i]],
            "{}",
            revision,
            kind_cut,
            len(passages),
            lossless,
            created,
            updated,
        )
        yield row, passages


class _Destinations:
    """Destination sampler: a hub with the hubs' share, else Zipf popularity over the rest."""

    def __init__(self, plan: Plan, rng: random.Random) -> None:
        spec = plan.spec
        self.rng = rng
        self.hubs = plan.hub_indices
        others = list(range(len(self.hubs), spec.entities))
        rng.shuffle(others)
        self.population = others
        self.cum = _cum([1.0 / math.sqrt(k + 1) for k in range(len(others))])
        hub_in = spec.hub_out * len(self.hubs)
        self.p_hub = min(0.5, hub_in / spec.edges) if spec.edges else 0.0

    def draw(self, k: int) -> list[int]:
        picks = self.rng.choices(self.population, cum_weights=self.cum, k=k)
        if self.p_hub:
            for j in range(k):
                if self.rng.random() < self.p_hub:
                    picks[j] = self.rng.choice(self.hubs)
        return picks


def out_degrees(plan: Plan) -> array[int]:
    """Out-degree of every memory: hubs ``hub_out``; the rest Pareto(2), summing to the spec."""
    spec = plan.spec
    rng = _rng(spec, "degrees")
    n = spec.entities
    hubs = len(plan.hub_indices)
    target = spec.edges - hubs * spec.hub_out
    cap = max(50.0, spec.hub_out / 4)
    raw = [min(cap, (1.0 - rng.random()) ** -0.5) for _ in range(n - hubs)]
    scale = target / sum(raw) if raw else 0.0
    degrees = array("i", [spec.hub_out]) * hubs
    acc = 0.0
    emitted = 0
    limit = n - 1
    for r in raw:
        acc += r * scale
        d = min(limit, int(acc) - emitted)
        degrees.append(d)
        emitted += d
    short = target - emitted  # only when capping at n - 1 lost some: spread them
    k = hubs
    while short > 0 and n > hubs:
        if degrees[k] < limit:
            degrees[k] += 1
            short -= 1
        k = hubs + (k - hubs + 7919) % (n - hubs)
    return degrees


def edge_rows(plan: Plan) -> Iterator[tuple[str, str, str, str]]:
    """``edges`` rows in primary-key order (source id, relationship, destination id)."""
    spec = plan.spec
    rng = _rng(spec, "edges")
    sampler = _Destinations(plan, rng)
    degrees = out_degrees(plan)
    rel_names = [r for r, _ in EDGE_RELATIONSHIPS]
    rel_cum = _cum([float(w) for _, w in EDGE_RELATIONSHIPS])
    ids = plan.ids
    org = spec.org
    for i in plan.order:
        d = degrees[i]
        if d <= 0:
            continue
        chosen: set[tuple[str, int]] = set()
        attempts = 0
        while len(chosen) < d and attempts < 50:
            need = d - len(chosen)
            rels = rng.choices(rel_names, cum_weights=rel_cum, k=need)
            for rel, dst in zip(rels, sampler.draw(need), strict=True):
                if dst != i:
                    chosen.add((rel, dst))
            attempts += 1
        src = ids[i]
        for rel, dst_id in sorted((rel, ids[dst]) for rel, dst in chosen):
            yield (org, src, rel, dst_id)


def mention_rows(plan: Plan) -> Iterator[tuple[str, str, str, bool]]:
    """``mentions`` rows (about 0.67 per memory) in primary-key order."""
    spec = plan.spec
    rng = _rng(spec, "mentions")
    sampler = _Destinations(plan, rng)
    ids = plan.ids
    for i in plan.order:
        k = rng.choice((0, 0, 0, 1, 1, 2))
        if not k:
            continue
        dsts = sorted({ids[d] for d in sampler.draw(k) if d != i})
        for dst in dsts:
            yield (spec.org, ids[i], dst, False)


def grant_rows(plan: Plan) -> Iterator[tuple[str, str, str]]:
    """``entity_grants`` rows of private memories, in primary-key order."""
    spec = plan.spec
    rng = _rng(spec, "grants")
    for i in plan.order:
        if plan.scope[i] != 2:
            continue
        users = set(rng.sample(plan.users, k=rng.choice((0, 1, 1, 2))))
        if rng.random() < 0.30:
            users.add(rng.choice(plan.readers))
        users.discard(plan.owner_of(i))
        for user in sorted(users):
            yield (spec.org, plan.ids[i], user)


def community_rows(
    plan: Plan,
) -> tuple[list[tuple[str, str, str, int]], list[tuple[str, str, str]]]:
    """``communities`` and ``community_members`` rows: per audience (a project's project-scoped
    memories, or the org-scoped ones), about half of its memories in communities of 8-30."""
    spec = plan.spec
    rng = _rng(spec, "communities")
    audiences: dict[str, list[int]] = {}
    for i in range(spec.entities):
        if plan.lifecycle[i] == 2:
            continue
        if plan.scope[i] == 1:
            audiences.setdefault("org", []).append(i)
        elif plan.scope[i] == 0:
            audiences.setdefault(plan.projects[plan.project[i]], []).append(i)
    communities: list[tuple[str, str, str, int]] = []
    members: list[tuple[str, str, str]] = []
    for audience in sorted(audiences):
        pool = audiences[audience]
        rng.shuffle(pool)
        pool = pool[: len(pool) // 2]
        n = 0
        pos = 0
        while len(pool) - pos >= 8:
            size = min(rng.randint(8, 30), len(pool) - pos)
            n += 1
            cid = community_id(audience, n)
            chunk = sorted(plan.ids[i] for i in pool[pos : pos + size])
            communities.append((spec.org, cid, audience, len(chunk)))
            members.extend((spec.org, cid, eid) for eid in chunk)
            pos += size
    communities.sort(key=lambda r: r[1])
    members.sort(key=lambda r: (r[1], r[2]))
    return communities, members


# ---------------------------------------------------------------------------------------------
# Loading


async def _drop_secondary(conn: asyncpg.Connection) -> tuple[list[str], list[str]]:
    """Drop the foreign keys and the indexes that back no constraint; return the DDL that
    recreates them (indexes, then foreign keys)."""
    fks = await conn.fetch(
        """SELECT r.relname AS tbl, c.conname, pg_get_constraintdef(c.oid) AS def
           FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
           WHERE c.contype = 'f' AND r.relname = ANY($1::text[])
             AND r.relnamespace = current_schema()::regnamespace
           ORDER BY 1, 2""",
        list(TABLES),
    )
    indexes = await conn.fetch(
        """SELECT ci.relname AS name, pg_get_indexdef(i.indexrelid) AS def
           FROM pg_index i JOIN pg_class r ON r.oid = i.indrelid
           JOIN pg_class ci ON ci.oid = i.indexrelid
           WHERE r.relname = ANY($1::text[])
             AND r.relnamespace = current_schema()::regnamespace
             AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
           ORDER BY 1""",
        list(TABLES),
    )
    for fk in fks:
        await conn.execute(f'ALTER TABLE {fk["tbl"]} DROP CONSTRAINT "{fk["conname"]}"')
    for ix in indexes:
        await conn.execute(f'DROP INDEX "{ix["name"]}"')
    return (
        [ix["def"] for ix in indexes],
        [f'ALTER TABLE {fk["tbl"]} ADD CONSTRAINT "{fk["conname"]}" {fk["def"]}' for fk in fks],
    )


async def _delete_org(conn: asyncpg.Connection, org: str) -> None:
    for table in TABLES:
        column = "id" if table == "orgs" else "org_id"
        await conn.execute(f"DELETE FROM {table} WHERE {column} = $1", org)


class _Copier:
    """Buffered ``COPY`` into one table; counts rows and feeds the checksum.

    With ``background``, a full batch is sent as a task and the next batch is generated while
    the server ingests it (one ``COPY`` at a time per connection: the previous one is awaited
    before the next starts). Without it, each batch is sent before ``add`` returns.
    """

    def __init__(
        self,
        conn: asyncpg.Connection,
        table: str,
        columns: tuple[str, ...],
        digests: dict[str, Any],
        *,
        batch: int = 20_000,
        background: bool = False,
    ) -> None:
        self.conn = conn
        self.table = table
        self.columns = list(columns)
        self.digest = digests.setdefault(table, hashlib.sha256())
        self.batch = batch
        self.background = background
        self.rows: list[tuple[Any, ...]] = []
        self.count = 0
        self.pending: asyncio.Task[Any] | None = None

    async def add(self, row: tuple[Any, ...]) -> None:
        """Buffer ``row``; send the batch when full."""
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            await self.flush()

    async def flush(self) -> None:
        """Send the buffered rows (after the previous batch has been ingested)."""
        if self.pending is not None:
            await self.pending
            self.pending = None
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        for row in rows:  # ids only (never the org): equal graphs in two orgs agree
            self.digest.update(("|".join(str(v) for v in row[1:4]) + "\n").encode())
        self.count += len(rows)
        send = self.conn.copy_records_to_table(self.table, records=rows, columns=self.columns)
        if self.background:
            self.pending = asyncio.ensure_future(send)
        else:
            await send

    async def close(self) -> None:
        """Send what is left and wait until the server has it all."""
        await self.flush()
        if self.pending is not None:
            await self.pending
            self.pending = None


async def _copy_memories(
    entity_conn: asyncpg.Connection,
    passage_conn: asyncpg.Connection,
    plan: Plan,
    digests: dict[str, Any],
    counts: dict[str, int],
    say: Log,
) -> None:
    """COPY every memory and its passages (in id order). On two connections, both tables load
    at once; on one, a batch of passages is sent only after the memories it belongs to."""
    t0 = time.monotonic()
    parallel = entity_conn is not passage_conn
    entities = _Copier(
        entity_conn, "entities", _ENTITY_COLUMNS, digests, batch=5_000, background=parallel
    )
    passages = _Copier(
        passage_conn, "passages", _PASSAGE_COLUMNS, digests, batch=5_000, background=parallel
    )
    for row, spans in memory_rows(plan):
        await entities.add(row)
        for span in spans:
            passages.rows.append(span)
        if len(passages.rows) >= passages.batch:
            if not parallel:
                await entities.flush()
            await passages.flush()
    await entities.close()
    await passages.close()
    counts["entities"], counts["passages"] = entities.count, passages.count
    say(
        f"entities: {entities.count:,} rows, passages: {passages.count:,} rows"
        f" in {time.monotonic() - t0:.1f}s"
    )


async def _copy_links(
    conn: asyncpg.Connection,
    plan: Plan,
    digests: dict[str, Any],
    counts: dict[str, int],
    say: Log,
    *,
    background: bool,
) -> None:
    """COPY grants, edges, mentions, communities and their members."""
    comms, members = community_rows(plan)
    tables: list[tuple[str, tuple[str, ...], Any]] = [
        ("entity_grants", ("org_id", "entity_id", "user_id"), grant_rows(plan)),
        ("edges", ("org_id", "src_id", "relationship", "dst_id"), edge_rows(plan)),
        ("mentions", ("org_id", "src_id", "dst_id", "derived"), mention_rows(plan)),
        ("communities", ("org_id", "id", "audience", "size"), comms),
        ("community_members", ("org_id", "community_id", "entity_id"), members),
    ]
    for table, columns, rows in tables:
        t0 = time.monotonic()
        copier = _Copier(conn, table, columns, digests, batch=50_000, background=background)
        for row in rows:
            await copier.add(row)
        await copier.close()
        counts[table] = copier.count
        say(f"{table}: {copier.count:,} rows in {time.monotonic() - t0:.1f}s")


async def _run_split(conns: list[asyncpg.Connection], statements: list[str]) -> None:
    """Run ``statements``, spread over the connections (each runs its share in order)."""
    shares = [statements[k :: len(conns)] for k in range(len(conns))]

    async def run(conn: asyncpg.Connection, mine: list[str]) -> None:
        for sql in mine:
            await conn.execute(sql)

    await asyncio.gather(*(run(c, m) for c, m in zip(conns, shares, strict=True)))


async def ensure_term_stats(url: str, org: str) -> bool:
    """Count ``org``'s search word statistics unless they are counted already with their impact
    lists (a graph generated before migration 0005 has no counts, one before 0011 no lists: its
    search would measure the fallback weights, or scan common words); True when it counted
    them. The caller has brought the schema to head."""
    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval(
            "SELECT count(*) > 0 AND bool_and(impacts_generation IS NOT NULL)"
            " FROM term_audiences WHERE org_id = $1",
            org,
        ):
            return False
        engine = make_engine(url)
        try:
            await term_stats.refresh_orgs(engine, [org])  # vacuums what it wrote
        finally:
            await engine.dispose()
        return True
    finally:
        await conn.close()


ACCESS_TABLES = ("entities", "passages", "entity_grants")
"""The tables whose triggers keep ``access_tsv`` (migration 0015)."""


async def _fill_access(conn: asyncpg.Connection) -> None:
    """What the triggers of :data:`ACCESS_TABLES`, off during a fresh load, would have written:
    every private memory's access lexemes, then its passages'; then the tables' user triggers
    back on as the migration leaves them, ``ENABLE ALWAYS`` (0015's are their only ones)."""
    await conn.execute("SELECT sibyl_access_refill()")
    for table in ACCESS_TABLES:
        triggers = await conn.fetch(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = CAST($1 AS regclass)"
            " AND NOT tgisinternal",
            table,
        )
        for row in triggers:
            await conn.execute(f'ALTER TABLE {table} ENABLE ALWAYS TRIGGER "{row["tgname"]}"')


async def load(
    url: str, spec: GraphSpec, *, fresh: bool, log: Log | None = None
) -> GenerateSummary:
    """Generate ``spec`` and write it into the (migrated) database at ``url`` with ``COPY``.

    ``fresh``: the database holds nothing else; secondary indexes and foreign keys are dropped
    for the load and rebuilt (and validated) after, and three connections load in parallel
    (memories, passages, and everything that links them), each batch sent in the background
    while Python generates the next: computing the full-text vectors dominates the load.
    Otherwise the org's old rows are deleted first, every index and constraint stays in place
    and one connection loads in dependency order. Ends with ``VACUUM (ANALYZE)`` of every table,
    then counts the org's search word statistics (:func:`app.repo.term_stats.refresh`).
    """
    say = log or (lambda _: None)
    started = time.monotonic()
    plan = Plan(spec)
    say(f"planned {spec.entities:,} memories in {time.monotonic() - started:.1f}s")
    conns = [await asyncpg.connect(url) for _ in range(3 if fresh else 1)]
    try:
        for conn in conns:
            await conn.execute("SET synchronous_commit = off")
            await conn.execute("SET maintenance_work_mem = '256MB'")
        conn = conns[0]
        indexes: list[str] = []
        fks: list[str] = []
        if fresh:
            indexes, fks = await _drop_secondary(conn)
            for table in ACCESS_TABLES:  # without indexes, each would scan a table per row
                await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        else:
            await _delete_org(conn, spec.org)
        digests: dict[str, Any] = {}
        counts: dict[str, int] = {}
        copy_started = time.monotonic()
        for table, rows in tenancy_rows(plan).items():
            copier = _Copier(conn, table, _TENANCY_COLUMNS[table], digests, batch=10_000)
            for row in rows:
                await copier.add(row)
            await copier.close()
            counts[table] = copier.count
        memories = _copy_memories(conns[0], conns[1 % len(conns)], plan, digests, counts, say)
        links = _copy_links(conns[-1], plan, digests, counts, say, background=fresh)
        if fresh:
            await asyncio.gather(memories, links)
        else:
            await memories
            await links
        copy_seconds = time.monotonic() - copy_started
        rows_total = sum(counts.values())
        rate = rows_total / copy_seconds if copy_seconds else 0.0
        say(f"COPY done: {rows_total:,} rows in {copy_seconds:.1f}s ({rate:,.0f} rows/s)")
        if fresh:
            t0 = time.monotonic()
            await _fill_access(conn)
            say(f"access lexemes of private memories filled in {time.monotonic() - t0:.1f}s")
        if indexes:
            t0 = time.monotonic()
            await _run_split(conns[:2], indexes)
            say(f"{len(indexes)} secondary indexes rebuilt in {time.monotonic() - t0:.1f}s")
        if fks:
            t0 = time.monotonic()
            for ddl in fks:  # one at a time: each locks the tables it links
                await conn.execute(ddl)
            say(f"{len(fks)} foreign keys re-added and validated in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        await _run_split(conns[:2], [f"VACUUM (ANALYZE) {table}" for table in reversed(TABLES)])
        say(f"VACUUM (ANALYZE) in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()  # as an import does: search weighs words by the org's counts
        stats_engine = make_engine(url)
        try:
            await term_stats.refresh_orgs(stats_engine, [spec.org])  # vacuums what it wrote
        finally:
            await stats_engine.dispose()
        say(f"search word statistics counted in {time.monotonic() - t0:.1f}s")
        hub_ids = plan.hub_ids()
        degree_rows = await conn.fetch(
            """SELECT h.id,
                      (SELECT count(*) FROM edges e WHERE e.org_id = $1 AND e.src_id = h.id)
                    + (SELECT count(*) FROM edges e WHERE e.org_id = $1 AND e.dst_id = h.id) AS n
               FROM unnest($2::text[]) AS h(id)""",
            spec.org,
            hub_ids,
        )
        terms: dict[str, int] = {}
        for term in (COMMON_TERM, RARE_TERM):
            terms[term] = await conn.fetchval(
                """SELECT count(*) FROM passages
                   WHERE org_id = $1 AND search_tsv @@ websearch_to_tsquery('english', $2)""",
                spec.org,
                term,
            )
    finally:
        for conn in conns:
            await conn.close()
    checksum = hashlib.sha256(
        "".join(f"{t}:{digests[t].hexdigest()};" for t in TABLES if t in digests).encode()
    ).hexdigest()
    return GenerateSummary(
        org=spec.org,
        counts=counts,
        copy_seconds=round(copy_seconds, 2),
        total_seconds=round(time.monotonic() - started, 2),
        rows_per_s=round(rate, 1),
        hubs=hub_ids,
        readers=plan.readers,
        checksum=checksum,
        term_passages=terms,
        hub_degrees={r["id"]: int(r["n"]) for r in degree_rows},
    )


READABLE_SHARE_SQL = text(
    f"""/* sibyl:bench.readable_share */
SELECT count(*) FILTER (WHERE {readable("t")}) AS readable, count(*) AS total
FROM entities t WHERE t.org_id = :r_org"""
)


async def readable_share(url: str, org: str, readers: list[str]) -> dict[str, float]:
    """The share of the org's memories each reader may read (rule: one-read-rule)."""
    engine = make_engine(url)
    out: dict[str, float] = {}
    try:
        async with engine.connect() as conn:
            for user in readers:
                reader = await reader_by_user(conn, user_id=user)
                if reader is None or reader.org_id != org:
                    continue
                row = (await conn.execute(READABLE_SHARE_SQL, reader.params())).one()
                out[user] = round(row.readable / row.total, 4) if row.total else 0.0
    finally:
        await engine.dispose()
    return out


async def generate(
    url: str, spec: GraphSpec, *, fresh: bool, log: Log | None = None
) -> GenerateSummary:
    """Generate ``spec`` into the (migrated) database at ``url`` (see :func:`load`) and measure
    the share of the graph each bench reader may read."""
    summary = await load(url, spec, fresh=fresh, log=log)
    summary.readable_share = await readable_share(url, spec.org, summary.readers)
    return summary
