"""``doctor``: is the PostgreSQL server fit for the walk, and what should a DBA change (rule:
doctor-on-every-server).

The facts come from :mod:`app.repo.doctor` (catalog and statistics views only); this module judges
them. Each :class:`Check` has a status:

- ``ok``: nothing to do;
- ``info``: works, but a change would help (advice says which);
- ``warn``: the service answers correctly, but slower or less observable than it should;
- ``fail``: the service is wrong or broken on this database (not migrated to head, an index the
  walk relies on is missing or invalid, a server too old for the schema).

The report's status is the worst of its checks. The CLI exits 0 unless a check fails (1).

**Two views.** The operator's (CLI, :func:`doctor_for_operator`) shows everything the server says,
sizes and row counts included. The org admin's (REST ``GET /api/admin/doctor``,
:func:`doctor_for_key`) shows server-wide settings and the *health* of the shared tables
(validity, percentages, never/stale, times), but no size, page or row count: those count every
org's rows, and an org admin may only know their own (rule: one-read-rule). Messages are phrased
accordingly (a yes/no "fits in shared_buffers" instead of the size).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import read_tx
from app.core.migrations import head_revision
from app.core.settings import get_settings
from app.domain.permissions import ADMIN_HIDDEN
from app.repo import doctor as repo
from app.repo.tables import Base
from app.service.session import FAULTS, admin_for_key, raise_fault

Status = Literal["ok", "info", "warn", "fail"]
RANK: dict[str, int] = {"ok": 0, "info": 1, "warn": 2, "fail": 3}

HIDDEN = ADMIN_HIDDEN

WALK_TABLES = ("edges", "entities", "entity_grants", "mentions", "passages", "community_members")
"""The tables the walk, the slice and search read (docs/walk-plans.md §4)."""
VACUUM_SQL = "VACUUM (ANALYZE) " + ", ".join(WALK_TABLES)

MIN_VERSION = 120000  # generated (STORED) columns: search_tsv, name_lower
TESTED_VERSION = 150000  # CI runs 15, the embedded server is 16
VISIBLE_ENOUGH = 0.9  # share of a table's pages the visibility map should mark all-visible
STALE_SHARE = 0.1  # rows changed since ANALYZE, as a share of the table, that make stats stale
STALE_MIN_ROWS = 500
SMALL_TABLE_PAGES = 8
"""A table of fewer pages (64 KB) is not a visibility warning: an index-only scan of it fetches
at most that many heap pages, all in shared buffers (a few grant writes leave the one page of
``entity_grants`` not all-visible until a VACUUM, and that is no reason to warn)."""
SETTING_NAMES = [
    "autovacuum",
    "track_counts",
    "jit",
    "shared_buffers",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "shared_preload_libraries",
    "session_preload_libraries",
]


class Check(BaseModel):
    """One finding: what was checked, how it stands, what to change and why."""

    name: str = Field(description="Stable id of the check, e.g. 'autovacuum'")
    status: Status = Field(description="ok, info, warn or fail (see the module docstring)")
    summary: str = Field(description="One line: what the server says")
    advice: str | None = Field(default=None, description="What to change and why (absent when ok)")
    facts: dict[str, Any] = Field(default_factory=dict, description="The values read")


class DoctorReport(BaseModel):
    """Every check, and the worst status among them."""

    status: Status
    server_version: str
    view: Literal["operator", "org_admin"] = Field(
        description="operator: every check, sizes and row counts included; org_admin: the "
        "server's settings, the schema and the org's own search statistics only (nothing "
        "measured over the tables every org shares: their visibility, statistics, sizes and "
        "temporary files move with other orgs' writes)"
    )
    checks: list[Check]

    def failed(self) -> bool:
        """True when a check failed (the CLI's exit status 1)."""
        return self.status == "fail"


@dataclass(frozen=True)
class Facts:
    """Everything the server said, before judging (see :mod:`app.repo.doctor`)."""

    version: repo.ServerVersion
    settings: dict[str, repo.Setting]
    extensions: dict[str, repo.Extension]
    auto_explain_loadable: bool | None
    migration_table: bool
    revisions: list[str]
    head: str | None
    tables: list[repo.TableStats]
    indexes: list[repo.IndexState]
    temp: repo.TempFiles
    search: repo.SearchStatistics | None = None  # of the orgs asked about (None: old schema)
    refresh_s: float = 0.0  # SIBYL_STATS_REFRESH_S as this process reads it
    vectors: Vectors | None = None  # of the orgs asked about (None: neither stage is on)


@dataclass(frozen=True)
class Vectors:
    """Whether search's re-ranking and semantic lane can use vectors here: the model (``model``),
    why it cannot run (``unavailable``: the extra missing, no pgvector; None: it can), and of the
    orgs asked about, the memories whose vectors are missing or stale (``due``) of ``memories``."""

    model: str
    unavailable: str | None
    due: int = 0
    memories: int = 0
    interval_s: float = 0.0  # SIBYL_EMBED_INTERVAL_S as this process reads it
    others: dict[str, dict[str, int]] = field(default_factory=dict)
    """Of those orgs, each org whose memories (not retired) hold vectors by another model: model
    name → how many (the background worker leaves these orgs alone)."""


# --- gathering -----------------------------------------------------------------------------------


async def gather(engine: AsyncEngine, *, orgs: list[str] | None = None) -> Facts:
    """Read every fact from the server behind ``engine``, as a new session of its role sees it
    (not with the service's own session settings: :func:`app.repo.doctor.server_session`);
    the search statistics are those of ``orgs`` (None: every org)."""
    async with repo.server_session(engine) as plain:
        async with read_tx(plain) as conn:
            settings = await repo.settings(conn, names=SETTING_NAMES)
            exts = await repo.extensions(conn, names=["pg_stat_statements", "pg_visibility"])
            migrated, revisions = await repo.migration_revision(conn)
            vis = exts.get("pg_visibility")
            version = await repo.server_version(conn)
            tables = await repo.table_stats(
                conn,
                tables=list(WALK_TABLES),
                use_visibility_map=vis is not None and vis.installed_version is not None,
            )
            indexes = await repo.indexes(conn)
            temp = await repo.temp_files(conn)
            search = await repo.search_statistics(conn, orgs=orgs)
            vectors = await _vectors(conn, orgs)
        loadable: bool | None = None
        if not _preloaded(settings, "auto_explain"):
            loadable = await repo.library_loadable(plain, library="auto_explain")
    return Facts(
        version=version,
        settings=settings,
        extensions=exts,
        auto_explain_loadable=loadable,
        migration_table=migrated,
        revisions=revisions,
        head=head_revision(),
        tables=tables,
        indexes=indexes,
        temp=temp,
        search=search,
        refresh_s=get_settings().stats_refresh_s,
        vectors=vectors,
    )


async def _vectors(conn: AsyncConnection, orgs: list[str] | None) -> Vectors | None:
    from app.core import embedder as models
    from app.domain.search.semantic import unavailable
    from app.repo import embeddings

    s = get_settings()
    if not (s.search_rerank or s.search_semantic):
        return None
    reason = await unavailable(conn, s.embedder, fresh=True)
    if reason is not None:
        return Vectors(s.embedder, reason)
    name = models.embedder(s.embedder).name
    due, memories = await embeddings.due_count(conn, model=name, orgs=orgs)
    others = await embeddings.other_models(conn, model=name, orgs=orgs)
    return Vectors(s.embedder, None, due, memories, s.embed_interval_s, others)


def _libraries(settings: dict[str, repo.Setting], name: str) -> list[str]:
    s = settings.get(name)
    return [p.strip().strip('"') for p in s.shown.split(",") if p.strip()] if s else []


def _preloaded(settings: dict[str, repo.Setting], library: str) -> bool:
    return any(
        library in _libraries(settings, n)
        for n in ("shared_preload_libraries", "session_preload_libraries")
    )


# --- judging -------------------------------------------------------------------------------------


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit in ("B", "kB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover


def _coverage(t: repo.TableStats) -> float | None:
    """Share of ``t``'s pages marked all-visible (None for an empty table: no page, or pages
    left without a live row, which no scan fetches and autovacuum may never visit)."""
    if t.pages <= 0 or (t.live_rows <= 0 and t.estimated_rows <= 0):
        return None
    return min(1.0, t.all_visible_pages / t.pages)


def _pct(x: float | None) -> str:
    return "empty" if x is None else f"{x:.0%}"


def check_version(f: Facts) -> Check:
    """PostgreSQL 12+ is needed (generated columns); the service is tested on 15 and 16."""
    facts = {"server_version_num": f.version.number, "version": f.version.text}
    n = f.version.number
    major = f"{n // 10000}"
    if n < MIN_VERSION:
        return Check(
            name="version",
            status="fail",
            summary=f"PostgreSQL {major} is too old for the schema",
            advice="The schema uses stored generated columns (PostgreSQL 12+); the service "
            "is tested on 15 and 16. Upgrade the server.",
            facts=facts,
        )
    if n < TESTED_VERSION:
        return Check(
            name="version",
            status="info",
            summary=f"PostgreSQL {major}: supported, but the service is tested on 15 and 16",
            advice="Prefer 15 or newer (the walk's plans in docs/walk-plans.md were read there).",
            facts=facts,
        )
    return Check(name="version", status="ok", summary=f"PostgreSQL {major}", facts=facts)


def check_migrations(f: Facts) -> Check:
    """The database holds exactly the newest migration."""
    facts = {"head": f.head, "database": f.revisions}
    if not f.migration_table:
        return Check(
            name="migrations",
            status="fail",
            summary="the database was never migrated (no alembic_version table)",
            advice="Run `sibyl-pg migrate` with the service's DATABASE_URL.",
            facts=facts,
        )
    if f.revisions != [f.head]:
        return Check(
            name="migrations",
            status="fail",
            summary=f"the database is at {', '.join(f.revisions) or 'no revision'}, "
            f"the code expects {f.head}",
            advice="Run `sibyl-pg migrate` (the service's SQL assumes the newest schema).",
            facts=facts,
        )
    return Check(name="migrations", status="ok", summary=f"at head ({f.head})", facts=facts)


def _walk_visibility(f: Facts) -> str:
    parts = [f"{t.table_name} {_pct(_coverage(t))}" for t in f.tables if t.pages > 0]
    return ", ".join(parts) if parts else "all the walk's tables are empty"


def check_autovacuum(f: Facts, *, detail: bool = True) -> Check:
    """autovacuum (and track_counts, which it needs) on, and not disabled on a walk table.
    ``detail`` False (org admins): no per-table visibility in the advice (it follows every
    org's writes; a breaker read another org's import in it)."""
    on = f.settings["autovacuum"].shown == "on"
    counts = f.settings["track_counts"].shown == "on"
    disabled = [t.table_name for t in f.tables if t.autovacuum_disabled]
    facts = {"autovacuum": f.settings["autovacuum"].shown, "track_counts": counts}
    facts["disabled_on"] = disabled
    cost = (
        "Index-only scans of the walk (pk_edges, ix_edges_incoming, pk_mentions, "
        "ix_entities_read, ix_passages_parent) skip the heap only for pages the visibility map "
        "marks all-visible, and only VACUUM marks them: every page written since the last "
        "VACUUM costs the walk a heap fetch per row (`Heap Fetches` in `sibyl-pg explain`), "
        "and without ANALYZE the planner plans from stale row estimates."
        + (f" Visibility now: {_walk_visibility(f)}." if detail else "")
    )
    if not on or not counts:
        what = "autovacuum is off" if on is False else "track_counts is off (autovacuum idles)"
        return Check(
            name="autovacuum",
            status="warn",
            summary=f"{what}: nothing vacuums or analyzes the walk's tables after writes",
            advice=f"{cost} Turn it on: `ALTER SYSTEM SET autovacuum = on; "
            "SELECT pg_reload_conf();` (no restart; the migration already makes it eager on "
            "edges, mentions, passages, community_members). If it must stay off, run "
            f"`{VACUUM_SQL}` after every bulk load and regularly after writes.",
            facts=facts,
        )
    if disabled:
        return Check(
            name="autovacuum",
            status="warn",
            summary=f"autovacuum is disabled on {', '.join(disabled)}",
            advice=f"{cost} `ALTER TABLE <table> RESET (autovacuum_enabled);`",
            facts=facts,
        )
    return Check(name="autovacuum", status="ok", summary="autovacuum is on", facts=facts)


def check_text_case(f: Facts) -> Check:
    """Text search and the database's locale: with ``LC_CTYPE`` ``C`` the full-text parser
    lower-cases ASCII letters only, so search finds a word such as ``İstanbul`` or ``ÉCLAIR``
    only in the case it was written (docs/search.md, "Any word matches")."""
    facts = {"lc_ctype": f.version.lc_ctype, "unicode_lower": f.version.unicode_lower}
    if f.version.unicode_lower:
        return Check(
            name="text_case",
            status="ok",
            summary=f"LC_CTYPE {f.version.lc_ctype}: text search lower-cases every letter",
            facts=facts,
        )
    return Check(
        name="text_case",
        status="warn",
        summary=f"LC_CTYPE {f.version.lc_ctype}: text search lower-cases ASCII letters only",
        advice="Search then matches a word with a letter outside ASCII only in the case it was "
        "written (İstanbul is not istanbul, ÉCLAIR not éclair). Create the database with a "
        "UTF-8 locale the server's system provides (CREATE DATABASE ... TEMPLATE template0 "
        "LC_CTYPE 'C.UTF-8'; `locale -a` on the server lists the others), then migrate and "
        "import again: the index keeps the case it was built with.",
        facts=facts,
    )


def check_jit(f: Facts) -> Check:
    """JIT: the service turns it off on its own connections; say what it costs others."""
    facts = {"jit": f.settings["jit"].shown, "jit_available": f.version.jit_available}
    if f.settings["jit"].shown != "on":
        return Check(name="jit", status="ok", summary="jit is off", facts=facts)
    if not f.version.jit_available:
        return Check(
            name="jit",
            status="ok",
            summary="jit is on, but this server cannot JIT-compile (no LLVM): it has no effect",
            facts=facts,
        )
    return Check(
        name="jit",
        status="info",
        summary="jit is on (the service sets jit = off on its own connections)",
        advice="Compiling a walk-sized plan costs ~100+ ms and never pays back on millisecond "
        "queries (measured: 148 of 154 ms of a depth-1 walk). The service is unaffected; "
        "psql replays of `sibyl-pg explain --psql` and other clients are not: "
        "`ALTER SYSTEM SET jit = off` or `ALTER ROLE <role> SET jit = off`.",
        facts=facts,
    )


def check_memory(f: Facts, *, detail: bool) -> Check:
    """shared_buffers against the walk's indexes and tables (index-only scans want the indexes
    cached)."""
    sb = f.settings["shared_buffers"]
    index_bytes = sum(t.index_bytes for t in f.tables)
    total = index_bytes + sum(t.table_bytes for t in f.tables)
    buffers = sb.bytes or 0
    facts: dict[str, Any] = {
        "shared_buffers": sb.shown,
        "effective_cache_size": f.settings["effective_cache_size"].shown,
        "indexes_fit": index_bytes <= buffers,
        "tables_and_indexes_fit": total <= buffers,
    }
    if detail:
        facts |= {"walk_index_bytes": index_bytes, "walk_total_bytes": total}
    sizes = f" ({_size(index_bytes)})" if detail else ""
    all_sizes = f" ({_size(total)})" if detail else ""
    default = " (PostgreSQL's default, sized for a small machine)" if sb.shown == "128MB" else ""
    if index_bytes > buffers:
        return Check(
            name="shared_buffers",
            status="warn",
            summary=f"the walk's indexes{sizes} do not fit in shared_buffers ({sb.shown}){default}",
            advice="Every hop of the walk is an index probe: index pages evicted from "
            "shared_buffers are read again from the OS cache or the disk. Raise shared_buffers "
            "above the indexes' size (commonly ~25% of RAM; needs a restart).",
            facts=facts,
        )
    if total > buffers:
        return Check(
            name="shared_buffers",
            status="info",
            summary=f"the walk's indexes{sizes} fit in shared_buffers ({sb.shown}), "
            f"its tables and indexes{all_sizes} do not",
            advice="The walk reads mostly indexes; slices and search read heap pages too. "
            "Raise shared_buffers as the data grows (commonly ~25% of RAM; restart).",
            facts=facts,
        )
    return Check(
        name="shared_buffers",
        status="ok",
        summary=f"the walk's tables and indexes{all_sizes} fit in shared_buffers ({sb.shown})"
        f"{default}",
        facts=facts,
    )


def check_work_mem(f: Facts, *, detail: bool) -> Check:
    """work_mem against spills: temporary files written by queries of this database."""
    wm = f.settings["work_mem"].shown
    mwm = f.settings["maintenance_work_mem"].shown
    spilled = f.temp.files > 0
    facts: dict[str, Any] = {"work_mem": wm, "maintenance_work_mem": mwm, "spilled": spilled}
    if detail:
        facts |= {"temp_files": f.temp.files, "temp_bytes": f.temp.bytes}
    facts["stats_reset"] = f.temp.stats_reset
    if spilled:
        amount = f" ({f.temp.files} files, {_size(f.temp.bytes)})" if detail else ""
        return Check(
            name="work_mem",
            status="warn",
            summary=f"queries of this database wrote temporary files{amount}: a sort or hash "
            f"outgrew work_mem ({wm})",
            advice="The walk's visited set and search's candidate sort are bounded by the caps "
            "and fit in a few MB; find the statement with `temp_blks_written` in "
            "pg_stat_statements (index builds and imports count too: they use "
            f"maintenance_work_mem, {mwm}). Raise work_mem for the service's role if it is a "
            "service statement: `ALTER ROLE <role> SET work_mem = '16MB'`.",
            facts=facts,
        )
    return Check(
        name="work_mem",
        status="ok",
        summary=f"no temporary files in this database (work_mem {wm})",
        facts=facts,
    )


def check_pg_stat_statements(f: Facts) -> Check:
    """Shipped, preloaded and created in this database: the per-statement cost figures."""
    ext = f.extensions.get("pg_stat_statements")
    preloaded = "pg_stat_statements" in _libraries(f.settings, "shared_preload_libraries")
    facts = {
        "shipped": ext is not None,
        "preloaded": preloaded,
        "installed": ext is not None and ext.installed_version is not None,
    }
    why = (
        "Shared buffers per call of each named statement (`sibyl:expand_neighbors`, ...) is "
        "the stable cost figure on a busy machine (docs/walk-plans.md §8)."
    )
    if ext is None:
        return Check(
            name="pg_stat_statements",
            status="warn",
            summary="pg_stat_statements is missing: this server does not ship it",
            advice=f"{why} This build has no contrib modules (the embedded pgserver has none): "
            "for production point DATABASE_URL at a server with contrib (e.g. Debian's "
            "postgresql-16 package).",
            facts=facts,
        )
    if not preloaded or ext.installed_version is None:
        steps = []
        if not preloaded:
            steps.append(
                "add it to shared_preload_libraries "
                "(`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`, restart)"
            )
        if ext.installed_version is None:
            steps.append("`CREATE EXTENSION pg_stat_statements;` in the service's database")
        return Check(
            name="pg_stat_statements",
            status="info",
            summary="pg_stat_statements is available but not enabled",
            advice=f"{why} To enable it: " + ", then ".join(steps) + ".",
            facts=facts,
        )
    return Check(
        name="pg_stat_statements",
        status="ok",
        summary="pg_stat_statements is preloaded and installed",
        facts=facts,
    )


def check_auto_explain(f: Facts) -> Check:
    """Shipped and preloaded: plans of slow walks logged as they happen."""
    preloaded = _preloaded(f.settings, "auto_explain")
    shipped = True if preloaded else f.auto_explain_loadable
    facts = {"shipped": shipped, "preloaded": preloaded}
    enable = (
        "`ALTER SYSTEM SET session_preload_libraries = 'auto_explain'`, "
        "`auto_explain.log_min_duration = '500ms'`, `auto_explain.log_analyze = on`, "
        "`auto_explain.log_buffers = on`, then `SELECT pg_reload_conf();` (new sessions)"
    )
    if preloaded:
        return Check(
            name="auto_explain", status="ok", summary="auto_explain is preloaded", facts=facts
        )
    if shipped is False:
        return Check(
            name="auto_explain",
            status="warn",
            summary="auto_explain is missing: this server does not ship it",
            advice="Without it the plan of a slow walk is lost once it ran; "
            "`sibyl-pg explain` can only replay it. This build has no contrib modules (the "
            "embedded pgserver has none): for production use a server with contrib.",
            facts=facts,
        )
    if shipped is None:
        return Check(
            name="auto_explain",
            status="info",
            summary="auto_explain is not preloaded (whether the server ships it needs a "
            "superuser to tell)",
            advice=f"If it is shipped, log the plans of slow walks as they happen: {enable}.",
            facts=facts,
        )
    return Check(
        name="auto_explain",
        status="info",
        summary="auto_explain is available but not preloaded",
        advice=f"Log the plans of slow walks as they happen: {enable}.",
        facts=facts,
    )


def expected_indexes() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The indexes the schema declares on the walk's tables: name -> (table, key columns).

    Read from the SQLAlchemy models (:mod:`app.repo.tables`), so the list cannot drift from the
    migrations (``tests/test_migrations.py`` holds models and migrations together).
    """
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name in WALK_TABLES:
        table = Base.metadata.tables[name]
        pk = table.primary_key
        out[str(pk.name)] = (name, tuple(c.name for c in pk.columns))
        for index in table.indexes:
            out[str(index.name)] = (name, tuple(c.name for c in index.columns))
    return out


def check_indexes(f: Facts) -> Check:
    """No invalid index in the schema; every index the walk relies on present, as declared."""
    found = {i.index_name: i for i in f.indexes}
    invalid = sorted(i.index_name for i in f.indexes if not (i.valid and i.ready))
    missing: list[str] = []
    different: list[str] = []
    for name, (table, columns) in sorted(expected_indexes().items()):
        have = found.get(name)
        if have is None or have.table_name != table:
            missing.append(name)
        elif have.key_columns != columns:
            different.append(name)
    facts = {"invalid": invalid, "missing": missing, "different": different}
    facts["expected"] = sorted(expected_indexes())
    problems = []
    advice = []
    if invalid:
        problems.append(f"invalid: {', '.join(invalid)}")
        advice.append(
            "An invalid index (a failed CREATE INDEX CONCURRENTLY or REINDEX CONCURRENTLY) is "
            "never used for reads but still maintained on every write: "
            "`REINDEX INDEX CONCURRENTLY <name>;` (or drop it if it is not the schema's)."
        )
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
        advice.append(
            "The walk's hops are index-only scans on these indexes (docs/walk-plans.md §4); "
            "without them a hop reads a whole org. Run `sibyl-pg migrate`, or recreate them "
            "as the migrations declare."
        )
    if different:
        problems.append(f"not as declared: {', '.join(different)}")
        advice.append(
            "Their key columns differ from the schema's, so the walk's plans differ from "
            "docs/walk-plans.md: recreate them as the migrations declare."
        )
    if problems:
        return Check(
            name="indexes",
            status="fail",
            summary="; ".join(problems),
            advice=" ".join(advice),
            facts=facts,
        )
    return Check(
        name="indexes",
        status="ok",
        summary=f"all {len(facts['expected'])} indexes of the walk's tables present and valid",
        facts=facts,
    )


def check_visibility(f: Facts, *, detail: bool) -> Check:
    """Share of each walk table's pages that the visibility map marks all-visible."""
    source = (
        "pg_visibility"
        if any(t.visibility_from_map for t in f.tables)
        else "pg_class.relallvisible (as of the last VACUUM or ANALYZE: an upper bound)"
    )
    per_table: dict[str, Any] = {}
    low: list[str] = []
    for t in f.tables:
        c = _coverage(t)
        entry: dict[str, Any] = {"all_visible": None if c is None else round(c, 3)}
        if detail:
            entry |= {"pages": t.pages, "all_visible_pages": t.all_visible_pages}
        per_table[t.table_name] = entry
        if c is not None and c < VISIBLE_ENOUGH and t.pages >= SMALL_TABLE_PAGES:
            low.append(f"{t.table_name} {_pct(c)}")
    facts = {"source": source, "tables": per_table}
    if low:
        return Check(
            name="visibility",
            status="warn",
            summary=f"visibility map coverage below {VISIBLE_ENOUGH:.0%}: {', '.join(low)}",
            advice="Index-only scans of the walk fetch the heap page of every row on a page "
            f"not marked all-visible. Run `{VACUUM_SQL}` (after every bulk load), and keep "
            "autovacuum on.",
            facts=facts,
        )
    return Check(
        name="visibility",
        status="ok",
        summary=f"the walk's tables are {VISIBLE_ENOUGH:.0%}+ all-visible (or empty, or under "
        f"{SMALL_TABLE_PAGES} pages)",
        facts=facts,
    )


def _stale(t: repo.TableStats) -> bool:
    rows = max(t.estimated_rows, t.live_rows, 0)
    return t.modified_since_analyze > max(STALE_MIN_ROWS, STALE_SHARE * rows)


def check_statistics(f: Facts, *, detail: bool) -> Check:
    """Planner statistics of the walk's tables: analyzed at least once, not stale."""
    never = [t.table_name for t in f.tables if t.last_analyze is None and t.pages > 0]
    stale = [t.table_name for t in f.tables if t.last_analyze is not None and _stale(t)]
    per_table: dict[str, Any] = {}
    for t in f.tables:
        entry: dict[str, Any] = {
            "last_analyze": t.last_analyze,
            "last_vacuum": t.last_vacuum,
            "stale": t.table_name in stale,
        }
        if detail:
            entry |= {
                "modified_since_analyze": t.modified_since_analyze,
                "inserted_since_vacuum": t.inserted_since_vacuum,
                "estimated_rows": t.estimated_rows,
            }
        per_table[t.table_name] = entry
    facts = {"never_analyzed": never, "stale": stale, "tables": per_table}
    if never or stale:
        parts = []
        if never:
            parts.append(f"never analyzed: {', '.join(never)}")
        if stale:
            parts.append(
                f"more than {STALE_SHARE:.0%} of rows changed since ANALYZE: {', '.join(stale)}"
            )
        return Check(
            name="statistics",
            status="warn",
            summary="; ".join(parts),
            advice="The planner sizes the walk's joins from these statistics; without them it "
            "may choose a sequential scan or a hash of a whole org. Run "
            f"`{VACUUM_SQL}` (the importer runs ANALYZE after imports of 1,000+ lines; "
            "autovacuum does it later, when it runs).",
            facts=facts,
        )
    return Check(
        name="statistics",
        status="ok",
        summary="the walk's tables are analyzed and fresh (or empty)",
        facts=facts,
    )


def check_search_statistics(f: Facts, *, detail: bool) -> Check:
    """Whether the search word statistics (documents per word and audience) are up to
    date. Stale ones never make search wrong or leak (rule: no-leak-through-statistics): their
    readers get the fallback word weights, so the ranking is less relevant until the next recount.
    Operators see the counts and the orgs due; an org admin (``detail`` False) only whether their
    org is due."""
    s = f.search
    if s is None:
        return Check(
            name="search_statistics",
            status="info",
            summary="not checked: the schema is older than the search statistics",
            advice="Run `sibyl-pg migrate` (see the migrations check).",
        )
    facts: dict[str, Any] = {
        "due": bool(s.due),
        "oldest_stale": s.oldest_stale,
        "refresh_interval_s": f.refresh_s,
    }
    if detail:
        facts |= {"audiences": s.audiences, "stale": s.stale, "orgs_due": s.due[:20]}
    if not s.due:
        return Check(
            name="search_statistics",
            status="ok",
            summary="the search word statistics are up to date",
            facts=facts,
        )
    who = f"{len(s.due)} org(s): {', '.join(s.due[:5])}" if detail else "this org"
    # an org is due when an audience was retired by a write (stale), or memories were created
    # since its count, or it was never counted: say which, not "0 stale" beside "out of date"
    stale = (
        f"; {s.stale} of {s.audiences} audiences retired by writes"
        if detail and s.stale
        else "; memories were created since the last count (or none was made)"
        if detail
        else ""
    )
    by = (
        f"a serving process with this environment recounts due orgs every {f.refresh_s:g} s "
        "(SIBYL_STATS_REFRESH_S)"
        if f.refresh_s > 0
        else "SIBYL_STATS_REFRESH_S is 0 in this environment: no serving process recounts them"
    )
    return Check(
        name="search_statistics",
        status="info",
        summary=f"search word statistics out of date for {who}{stale}",
        advice="Search stays correct and leaks nothing, but its readers get fallback word "
        f"weights until a recount: {by}; or run `sibyl-pg stats refresh` now.",
        facts=facts,
    )


def check_vectors(f: Facts, *, detail: bool) -> Check:
    """Whether search's re-ranking (on by default) and semantic lane can use vectors here, and
    whether every memory has them. Without them search is lexical, still correct and leak-free
    (``filters.rerank`` says why on every answer). Operators see the counts; an org admin
    (``detail`` False) only whether their org's memories wait for vectors."""
    v = f.vectors
    if v is None:
        return Check(
            name="vectors", status="ok", summary="the re-ranking and the semantic lane are off"
        )
    if v.unavailable is not None:
        return Check(
            name="vectors",
            status="info",
            summary=f"search cannot re-rank by meaning here: {v.unavailable}",
            advice="Search ranks lexically, correctly and without leaks, but the re-ranking "
            "by meaning (docs/search.md) needs the `semantic` extra (pip install "
            "'sibyl-pg[semantic]') and a server with pgvector (the embedded PostgreSQL 16 of "
            "`make run` has it; on another server `CREATE EXTENSION vector`, then `sibyl-pg "
            "semantic setup`). SIBYL_SEARCH_RERANK=false says it is not wanted.",
            facts={"model": v.model, "unavailable": v.unavailable},
        )
    facts: dict[str, Any] = (
        {"model": v.model, "due": v.due, "memories": v.memories}
        if detail
        else {"model": v.model, "due": v.due > 0}
    )
    if v.others:
        held = sum(n for by in v.others.values() for n in by.values())
        names = sorted({m for by in v.others.values() for m in by})
        if detail:
            facts["other_models"] = v.others
        who = (
            f"{held:,} of {v.memories:,} memories ({len(v.others)} org"
            f"{'' if len(v.others) == 1 else 's'}) have"
            if detail
            else "this org's memories have"
        )
        return Check(
            name="vectors",
            status="warn",
            summary=f"{who} vectors by {', '.join(names)}, not by {v.model} (the model in use)",
            advice=f"Search compares only vectors by {v.model}, and a serving process writes "
            "none in the background for an org whose memories hold vectors by another model "
            "(two servers with different SIBYL_EMBEDDER values would otherwise rewrite each "
            "other's); the other orgs are kept up as usual. Replace them: `sibyl-pg embed "
            f"--model {v.model}` (`--org ORG` for one org); or, if {names[0]} is the model you "
            f"want, start every serving process with SIBYL_EMBEDDER={names[0]}.",
            facts=facts,
        )
    if v.due:
        who = f"{v.due:,} of {v.memories:,} memories" if detail else "memories of this org"
        return Check(
            name="vectors",
            status="info",
            summary=f"{who} wait for vectors by {v.model}",
            advice=(
                "A serving process writes them in the background every "
                f"{v.interval_s:g} s (SIBYL_EMBED_INTERVAL_S), on one thread; "
                if v.interval_s > 0
                else "SIBYL_EMBED_INTERVAL_S is 0 in this environment: no serving process writes "
                "them; "
            )
            + "`sibyl-pg embed` writes them now. Until the first memories of a search all have "
            "vectors, its order is the lexical one (filters.rerank says so).",
            facts=facts,
        )
    return Check(
        name="vectors",
        status="ok",
        summary=f"every memory has vectors by {v.model}",
        facts=facts,
    )


def judge(f: Facts, *, detail: bool) -> DoctorReport:
    """Every check over ``f``; ``detail`` False (org admins) leaves out sizes and row counts,
    and the checks measured over the tables every org shares (visibility, statistics, memory,
    work_mem: a breaker watched an org admin's visibility ratios move with another org's
    import), whose status alone tells of other orgs' writes."""
    shared = [
        check_visibility(f, detail=detail),
        check_statistics(f, detail=detail),
        check_memory(f, detail=detail),
        check_work_mem(f, detail=detail),
    ]
    checks = [
        check_version(f),
        check_migrations(f),
        check_autovacuum(f, detail=detail),
        *(shared[:2] if detail else []),
        check_search_statistics(f, detail=detail),
        check_vectors(f, detail=detail),
        check_indexes(f),
        *(shared[2:] if detail else []),
        check_text_case(f),
        check_jit(f),
        check_pg_stat_statements(f),
        check_auto_explain(f),
    ]
    worst = max(checks, key=lambda c: RANK[c.status]).status
    return DoctorReport(
        status=worst,
        server_version=f.version.text.split(" on ")[0],
        view="operator" if detail else "org_admin",
        checks=checks,
    )


# --- entry points --------------------------------------------------------------------------------


async def doctor_for_operator(engine: AsyncEngine) -> DoctorReport:
    """The full report for the CLI (sizes and row counts included). Database faults propagate
    as SQLAlchemy/driver errors (the CLI reports them and exits 2)."""
    return judge(await gather(engine), detail=True)


async def _guarded(call: Awaitable[DoctorReport]) -> DoctorReport:
    try:
        return await call
    except FAULTS as error:
        raise_fault(error)


async def doctor_for_key(engine: AsyncEngine, key: str | None) -> DoctorReport:
    """The org admin's report for ``GET /api/admin/doctor`` (no sizes, no row counts).

    The same rule as every ``/api/admin`` route: a missing, unknown or revoked key, a key
    without the ``admin`` scope, a project-restricted key and a key of a user who is not an org
    owner or admin all raise ``NotFound("Not found")``. Database faults raise ``Unavailable``.
    """

    async def go() -> DoctorReport:
        # Server facts are for an org owner's or admin's unrestricted admin key only (the rule
        # of every /api/admin route).
        reader = await admin_for_key(engine, key)
        return judge(await gather(engine, orgs=[reader.org_id]), detail=False)

    return await _guarded(go())
