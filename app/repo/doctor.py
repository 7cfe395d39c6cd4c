"""The catalog and statistics queries of ``doctor`` (rule: doctor-on-every-server): what the server
says about itself.

Every statement reads system views only (``pg_settings``, ``pg_class``, ``pg_index``,
``pg_stat_user_tables``, ``pg_stat_database``, ``pg_available_extensions``) and starts with its
``/* sibyl:doctor.<part> */`` name. None reads a row of the service's own tables except
``alembic_version`` and, for the search statistics' freshness, ``term_audiences`` (through
:func:`search_statistics`, scoped to the orgs asked about). The functions return plain facts;
:mod:`app.service.doctor` judges them.

Table statistics (pages, visibility map, analyze times) are per table, that is over every org of
the database: the domain decides what of them an org admin may see.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

STATEMENT_TIMEOUT_MS = 10_000
"""The longest any doctor statement may run (they read catalogs and statistics only)."""

SETTINGS_SQL = text(
    """/* sibyl:doctor.settings */
SELECT name,
       current_setting(name) AS shown,
       CASE WHEN unit IN ('B', 'kB', '8kB', 'MB') AND setting ~ '^[0-9]+$'
            THEN pg_size_bytes(current_setting(name)) END AS bytes,
       source
FROM pg_settings
WHERE name = ANY(:names)
ORDER BY name"""
)

VERSION_SQL = text(
    """/* sibyl:doctor.version */
SELECT current_setting('server_version_num')::int AS version_num, version() AS version,
       current_setting('is_superuser') = 'on' AS superuser, pg_jit_available() AS jit_available,
       -- the database's character classification, from the catalogue: PostgreSQL 16 removed
       -- the lc_ctype setting, so it is never read as one
       (SELECT d.datctype FROM pg_database d WHERE d.datname = current_database()) AS lc_ctype,
       -- whether the full-text parser lower-cases a letter outside ASCII (the locale decides)
       tsvector_to_array(to_tsvector('simple', 'ÉΣ')) = ARRAY['éσ'] AS unicode_lower"""
)

EXTENSIONS_SQL = text(
    """/* sibyl:doctor.extensions */
SELECT a.name, a.default_version, e.extversion AS installed_version
FROM pg_available_extensions a
LEFT JOIN pg_extension e ON e.extname = a.name
WHERE a.name = ANY(:names)"""
)

MIGRATION_TABLE_SQL = text(
    """/* sibyl:doctor.migration_table */
SELECT to_regclass('alembic_version') IS NOT NULL AS present"""
)

MIGRATION_SQL = text(
    """/* sibyl:doctor.migration */
SELECT version_num FROM alembic_version"""
)

TABLES_SQL = text(
    """/* sibyl:doctor.tables */
SELECT c.relname AS table_name,
       pg_relation_size(c.oid) / current_setting('block_size')::int AS pages,
       c.relallvisible AS all_visible_pages,
       pg_table_size(c.oid) AS table_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       coalesce(c.reltuples, -1)::bigint AS estimated_rows,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
       greatest(s.last_analyze, s.last_autoanalyze) AS last_analyze,
       coalesce(s.n_mod_since_analyze, 0) AS modified_since_analyze,
       coalesce(s.n_ins_since_vacuum, 0) AS inserted_since_vacuum,
       coalesce(s.n_live_tup, 0) AS live_rows,
       coalesce(array_to_string(c.reloptions, ','), '') LIKE '%autovacuum_enabled=false%'
           AS autovacuum_disabled
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relnamespace = to_regnamespace(current_schema())
  AND c.relkind = 'r'
  AND c.relname = ANY(:tables)
ORDER BY c.relname"""
)

VISIBILITY_SQL = text(
    """/* sibyl:doctor.visibility */
SELECT all_visible FROM pg_visibility_map_summary(CAST(:table_name AS regclass))"""
)

INDEXES_SQL = text(
    """/* sibyl:doctor.indexes */
SELECT t.relname AS table_name,
       i.relname AS index_name,
       x.indisvalid AS valid,
       x.indisready AS ready,
       ARRAY(SELECT a.attname::text
             FROM unnest(x.indkey[0:x.indnkeyatts - 1]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
             ORDER BY k.ord) AS key_columns,
       pg_relation_size(i.oid) AS bytes
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relnamespace = to_regnamespace(current_schema())
  AND t.relkind = 'r'
ORDER BY t.relname, i.relname"""
)

TEMP_FILES_SQL = text(
    """/* sibyl:doctor.temp_files */
SELECT temp_files, temp_bytes, stats_reset
FROM pg_stat_database
WHERE datname = current_database()"""
)


@dataclass(frozen=True)
class Setting:
    """One server setting: as ``SHOW`` prints it, in bytes for memory settings, and its source."""

    name: str
    shown: str
    bytes: int | None
    source: str


@dataclass(frozen=True)
class ServerVersion:
    """``server_version_num`` (e.g. 150020), ``version()``, whether we connect as superuser,
    whether the server can JIT-compile at all (built with LLVM, provider found), and the
    database's ``LC_CTYPE`` with what it does to text search."""

    number: int
    text: str
    superuser: bool
    jit_available: bool
    lc_ctype: str
    unicode_lower: bool
    """Whether the database's full-text parser lower-cases letters outside ASCII (``É`` → ``é``):
    not in a database whose ``LC_CTYPE`` is ``C``."""


@dataclass(frozen=True)
class Extension:
    """An extension the server ships: its default version, and its version here if installed."""

    name: str
    default_version: str | None
    installed_version: str | None


@dataclass(frozen=True)
class TableStats:
    """One table of the current schema, over every org.

    ``pages`` is its heap size in blocks now; ``all_visible_pages`` is ``pg_class.relallvisible``
    (as of the last VACUUM/ANALYZE), or the visibility map itself when ``pg_visibility`` answered
    (``visibility_from_map``). Byte sizes include TOAST (table) and every index (indexes).
    """

    table_name: str
    pages: int
    all_visible_pages: int
    table_bytes: int
    index_bytes: int
    estimated_rows: int
    last_vacuum: datetime | None
    last_analyze: datetime | None
    modified_since_analyze: int
    inserted_since_vacuum: int
    live_rows: int
    autovacuum_disabled: bool
    visibility_from_map: bool = False


@dataclass(frozen=True)
class IndexState:
    """An index of a table of the current schema: valid/ready flags, key columns, size in bytes."""

    table_name: str
    index_name: str
    valid: bool
    ready: bool
    key_columns: tuple[str, ...]
    bytes: int


@dataclass(frozen=True)
class TempFiles:
    """Temporary files written by queries of this database since ``stats_reset`` (work_mem
    spills of sorts and hashes)."""

    files: int
    bytes: int
    stats_reset: datetime | None


SEARCH_STATISTICS_SQL = text(
    """/* sibyl:doctor.search_statistics */
SELECT count(*) AS audiences,
       count(*) FILTER (WHERE NOT a.fresh) AS stale,
       min(a.refreshed_at) FILTER (WHERE NOT a.fresh) AS oldest_stale
FROM term_audiences a
WHERE CAST(:orgs AS text[]) IS NULL OR a.org_id = ANY(CAST(:orgs AS text[]))"""
)

TERM_AUDIENCES_TABLE_SQL = text(
    """/* sibyl:doctor.term_audiences_table */
SELECT to_regclass('term_audiences') IS NOT NULL AND to_regclass('term_stats') IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = to_regclass('term_audiences')
                     AND attname = 'counted_snapshot' AND NOT attisdropped) AS present"""
)


@dataclass(frozen=True)
class SearchStatistics:
    """Freshness of the search word statistics (rule: word-stats-per-audience) of some orgs: their
    ``audiences`` counted, how many are ``stale`` (a write changed what they count; their readers
    get the fallback word weights) and since when the oldest stale one was last counted, and the
    orgs ``due`` a recount (stale audiences, or memories created since the count, or never counted:
    :func:`app.repo.term_stats.due_orgs`)."""

    audiences: int
    stale: int
    oldest_stale: datetime | None
    due: list[str]


async def search_statistics(
    conn: AsyncConnection, *, orgs: list[str] | None
) -> SearchStatistics | None:
    """The :class:`SearchStatistics` of ``orgs`` (None: every org), or None when the schema is
    older than the statistics (the migrations check says so)."""
    from app.repo.term_stats import due_orgs

    if not (await conn.execute(TERM_AUDIENCES_TABLE_SQL)).scalar_one():
        return None
    r = (await conn.execute(SEARCH_STATISTICS_SQL, {"orgs": orgs})).one()
    due = sorted(await due_orgs(conn, orgs))
    return SearchStatistics(int(r.audiences), int(r.stale), r.oldest_stale, due)


async def settings(conn: AsyncConnection, *, names: list[str]) -> dict[str, Setting]:
    """The settings ``names`` that the server knows (unknown names are absent), by name."""
    rows = (await conn.execute(SETTINGS_SQL, {"names": names})).all()
    return {r.name: Setting(r.name, r.shown, r.bytes, r.source) for r in rows}


async def server_version(conn: AsyncConnection) -> ServerVersion:
    """The server's version and whether the current role is a superuser."""
    r = (await conn.execute(VERSION_SQL)).one()
    return ServerVersion(
        r.version_num, r.version, r.superuser, r.jit_available, r.lc_ctype, bool(r.unicode_lower)
    )


async def extensions(conn: AsyncConnection, *, names: list[str]) -> dict[str, Extension]:
    """The extensions among ``names`` that the server ships (absent: not shipped), by name."""
    rows = (await conn.execute(EXTENSIONS_SQL, {"names": names})).all()
    return {r.name: Extension(r.name, r.default_version, r.installed_version) for r in rows}


async def migration_revision(conn: AsyncConnection) -> tuple[bool, list[str]]:
    """(whether ``alembic_version`` exists, the revision ids it holds)."""
    present = bool((await conn.execute(MIGRATION_TABLE_SQL)).scalar_one())
    if not present:
        return False, []
    return True, [str(v) for v in (await conn.execute(MIGRATION_SQL)).scalars()]


async def table_stats(
    conn: AsyncConnection, *, tables: list[str], use_visibility_map: bool
) -> list[TableStats]:
    """Statistics of ``tables`` (those that exist), sorted by name.

    With ``use_visibility_map`` (the ``pg_visibility`` extension is installed) each table's
    all-visible pages are counted in the visibility map itself, under a savepoint: when that is
    refused (it needs superuser or ``pg_stat_scan_tables``), ``relallvisible`` is kept.
    """
    rows = (await conn.execute(TABLES_SQL, {"tables": tables})).all()
    out: list[TableStats] = []
    for r in rows:
        values: dict[str, Any] = dict(r._mapping)
        if use_visibility_map:
            try:
                async with conn.begin_nested():
                    values["all_visible_pages"] = (
                        await conn.execute(VISIBILITY_SQL, {"table_name": r.table_name})
                    ).scalar_one()
                    values["visibility_from_map"] = True
            except DBAPIError:
                pass
        out.append(TableStats(**values))
    return out


async def indexes(conn: AsyncConnection) -> list[IndexState]:
    """Every index on a table of the current schema, with its validity and key columns."""
    rows = (await conn.execute(INDEXES_SQL)).all()
    return [
        IndexState(r.table_name, r.index_name, r.valid, r.ready, tuple(r.key_columns), r.bytes)
        for r in rows
    ]


async def temp_files(conn: AsyncConnection) -> TempFiles:
    """Temporary files written in the current database since its statistics were reset."""
    r = (await conn.execute(TEMP_FILES_SQL)).one()
    return TempFiles(int(r.temp_files or 0), int(r.temp_bytes or 0), r.stats_reset)


@asynccontextmanager
async def server_session(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """An engine on ``engine``'s database whose sessions carry no settings of the service's.

    The service's connections set ``jit``, ``plan_cache_mode`` and ``statement_timeout`` for
    themselves (:func:`app.core.db.make_engine`); the doctor must read what the *server* gives a
    new session of this role in this database instead. No pool: each connection is closed after
    use, so a ``LOAD`` never outlives its check. Statements are bounded by
    :data:`STATEMENT_TIMEOUT_MS`.
    """
    plain = create_async_engine(
        engine.url,
        poolclass=NullPool,
        connect_args={
            "timeout": 5.0,
            "server_settings": {
                "application_name": "sibyl-pg doctor",
                "statement_timeout": str(STATEMENT_TIMEOUT_MS),
            },
        },
    )
    try:
        yield plain
    finally:
        await plain.dispose()


async def library_loadable(engine: AsyncEngine, *, library: str) -> bool | None:
    """Whether ``LOAD '<library>'`` succeeds (True), finds no such file (False), or cannot be
    told (None: LOAD of a library outside ``$libdir/plugins`` needs a superuser).

    ``engine`` should come from :func:`server_session` (the connection is closed afterwards, so
    no session keeps the library). ``library`` is one of a fixed set of names, never input.
    """
    if library not in ("auto_explain",):
        raise ValueError(f"unexpected library {library!r}")
    async with engine.connect() as conn:
        try:
            await conn.exec_driver_sql(f"/* sibyl:doctor.load */ LOAD '{library}'")
            return True
        except DBAPIError as error:
            orig = error.orig
            codes = {getattr(e, "sqlstate", None) for e in (orig, getattr(orig, "__cause__", None))}
            if "58P01" in codes:  # undefined_file: the server does not ship it
                return False
            return None  # insufficient_privilege (42501), or anything else: unknown
