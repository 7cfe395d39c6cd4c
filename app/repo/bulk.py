"""The bulk import's statements: ``COPY`` into staging tables, then set-based checks and inserts
(``sibyl:import.*``). The rows are those the one-at-a-time path writes (:mod:`app.repo.writes`);
every check a foreign key or a rule makes row by row is made here for a whole kind at once,
answering *which* rows fail, so the import can name every refused line.

Staging tables are temporary, per transaction (``ON COMMIT DROP``), created on first use.
``COPY`` goes through asyncpg's binary ``copy_records_to_table`` on the transaction's own
connection.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.writes import PassageRow, parts

COPY_ROWS = 5_000
"""Rows sent by one ``COPY`` and inserted by one statement (at most: memories and passages are
also bounded by their text, :data:`app.repo.writes.TEXT_CHARS`): each statement stays well
under a second on a busy server, so a service engine's statement timeout never ends one, and
the progress display advances at least every second or two."""

_STAGES = {
    "sibyl_stage_entities": """(
        id text COLLATE "C", type text, name text, content text, project_id text COLLATE "C",
        scope text, owner_id text COLLATE "C", lifecycle text, metadata text, kind text,
        total integer, lossless boolean)""",
    "sibyl_stage_passages": """(
        id text COLLATE "C", parent_id text COLLATE "C", revision integer, idx integer,
        start_offset integer, end_offset integer, breadcrumb text, content text)""",
    "sibyl_stage_edges": """(
        src_id text COLLATE "C", relationship text COLLATE "C", dst_id text COLLATE "C")""",
}


async def _driver(conn: AsyncConnection) -> Any:
    """The asyncpg connection under ``conn`` (same transaction)."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection


async def stage(conn: AsyncConnection, table: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Empty staging table ``table`` (created for this transaction if needed) and ``COPY``
    ``rows`` into it."""
    await conn.execute(
        text(
            f"/* sibyl:import.stage */ CREATE TEMP TABLE IF NOT EXISTS {table} {_STAGES[table]}"
            " ON COMMIT DROP"
        )
    )
    await conn.execute(text(f"/* sibyl:import.stage_clear */ TRUNCATE {table}"))
    if rows:
        driver = await _driver(conn)
        await driver.copy_records_to_table(table, records=rows)


# ---- foreign keys checked set-based --------------------------------------------------------

MAY_SKIP_ROW_CHECKS_SQL = text(
    """/* sibyl:import.may_skip_row_checks */
SELECT has_parameter_privilege('session_replication_role', 'SET')"""
)
ROW_CHECKS_SQL = text(
    """/* sibyl:import.row_checks */
SELECT set_config('session_replication_role', :role, true)"""
)
# Where the row-by-row checks must run: PostgreSQL makes each a prepared lookup, which the
# engine's force_custom_plan would plan again for every row (the 357k-line bench import as a
# role that may not skip them: writing 27.9 s). The block's own statements insert from staging
# tables or bound arrays, whose plan no parameter value changes.
KEEP_CHECK_PLANS_SQL = text(
    """/* sibyl:import.keep_check_plans */
SELECT current_setting('plan_cache_mode') AS was,
       set_config('plan_cache_mode', 'force_generic_plan', true)"""
)
PLAN_MODE_SQL = text(
    """/* sibyl:import.plan_mode */ SELECT set_config('plan_cache_mode', :mode, true)"""
)


async def may_skip_row_checks(conn: AsyncConnection) -> bool:
    """Whether this role may turn PostgreSQL's row-by-row foreign key checks off for its own
    transaction (``session_replication_role``: a superuser, or a role granted ``SET`` on it)."""
    return bool((await conn.execute(MAY_SKIP_ROW_CHECKS_SQL)).scalar())


@contextlib.asynccontextmanager
async def checked_set_based(conn: AsyncConnection, allowed: bool) -> AsyncIterator[None]:
    """Inside the block, when ``allowed``, the foreign keys of the rows inserted are not checked
    row by row (each check a lookup and a row lock: two thirds of an edge's insert): the caller
    has checked every reference of the block's rows set-based beforehand and holds the rows
    referenced locked ``FOR KEY SHARE`` until the transaction ends, which is what a foreign key
    check does. Nothing the block does may delete a referenced row (a cascade would not run).
    Transaction-local; restored when the block ends. When not ``allowed``, PostgreSQL checks the
    rows itself, each check keeping its plan (:data:`KEEP_CHECK_PLANS_SQL`)."""
    if not allowed:
        was = (await conn.execute(KEEP_CHECK_PLANS_SQL)).scalar_one()
        yield  # an error aborts the transaction, and the setting with it: nothing to restore
        await conn.execute(PLAN_MODE_SQL, {"mode": was})
        return
    await conn.execute(ROW_CHECKS_SQL, {"role": "replica"})
    try:
        yield
    finally:
        await conn.execute(ROW_CHECKS_SQL, {"role": "origin"})


# ---- directory rows ------------------------------------------------------------------------

UPSERT_ORGS_SQL = text(
    """/* sibyl:import.orgs */
INSERT INTO orgs (id, name)
SELECT x.id, x.name FROM unnest(CAST(:ids AS text[]), CAST(:names AS text[])) AS x(id, name)
ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name
WHERE orgs.name IS DISTINCT FROM EXCLUDED.name
RETURNING id"""
)

ORGS_FOUND_SQL = text(
    """/* sibyl:import.orgs_found */
SELECT id FROM orgs WHERE id = ANY(CAST(:ids AS text[])) ORDER BY id FOR KEY SHARE"""
)

USERS_ELSEWHERE_SQL = text(
    """/* sibyl:import.users_elsewhere */
SELECT u.id FROM users u
JOIN unnest(CAST(:ids AS text[]), CAST(:orgs AS text[])) AS x(id, org_id) ON x.id = u.id
WHERE u.org_id <> x.org_id"""
)

UPSERT_USERS_SQL = text(
    """/* sibyl:import.users */
INSERT INTO users (org_id, id, handle, role)
SELECT x.org_id, x.id, x.handle, x.role
FROM unnest(CAST(:orgs AS text[]), CAST(:ids AS text[]), CAST(:handles AS text[]),
            CAST(:roles AS text[])) AS x(org_id, id, handle, role)
ON CONFLICT (org_id, id) DO UPDATE SET handle = EXCLUDED.handle, role = EXCLUDED.role
WHERE (users.handle, users.role) IS DISTINCT FROM (EXCLUDED.handle, EXCLUDED.role)
RETURNING id"""
)

UPSERT_PROJECTS_SQL = text(
    """/* sibyl:import.projects */
INSERT INTO projects (org_id, id, name, visibility)
SELECT x.org_id, x.id, x.name, x.visibility
FROM unnest(CAST(:orgs AS text[]), CAST(:ids AS text[]), CAST(:names AS text[]),
            CAST(:visibilities AS text[])) AS x(org_id, id, name, visibility)
ON CONFLICT (org_id, id) DO UPDATE SET name = EXCLUDED.name, visibility = EXCLUDED.visibility
WHERE (projects.name, projects.visibility)
      IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.visibility)
RETURNING id"""
)

MEMBERS_MISSING_SQL = text(
    """/* sibyl:import.members_missing */
SELECT x.n
FROM unnest(CAST(:lines AS integer[]), CAST(:projects AS text[]), CAST(:users AS text[]))
     AS x(n, project_id, user_id)
WHERE NOT EXISTS (SELECT 1 FROM users u
                  JOIN projects p ON p.org_id = u.org_id AND p.id = x.project_id
                  WHERE u.id = x.user_id)"""
)

GRANTS_MISSING_SQL = text(
    """/* sibyl:import.grants_missing */
SELECT x.n
FROM unnest(CAST(:lines AS integer[]), CAST(:entities AS text[]), CAST(:users AS text[]))
     AS x(n, entity_id, user_id)
WHERE NOT EXISTS (SELECT 1 FROM users u
                  JOIN entities e ON e.org_id = u.org_id AND e.id = x.entity_id
                  WHERE u.id = x.user_id)"""
)

INSERT_GRANTS_SQL = text(
    """/* sibyl:import.grants */
INSERT INTO entity_grants (org_id, entity_id, user_id)
SELECT u.org_id, x.entity_id, u.id
FROM unnest(CAST(:entities AS text[]), CAST(:users AS text[])) AS x(entity_id, user_id)
JOIN users u ON u.id = x.user_id
ON CONFLICT DO NOTHING
RETURNING user_id"""
)


async def upsert_orgs(conn: AsyncConnection, *, rows: Sequence[tuple[str, str]]) -> int:
    """Write ``(id, name)`` orgs; return how many changed."""
    if not rows:
        return 0
    result = await conn.execute(
        UPSERT_ORGS_SQL, {"ids": [r[0] for r in rows], "names": [r[1] for r in rows]}
    )
    return len(result.all())


async def orgs_found(conn: AsyncConnection, *, ids: Iterable[str]) -> set[str]:
    """The subset of ``ids`` that are orgs, locked ``FOR KEY SHARE`` until the transaction
    ends (rows about to reference them)."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    return {r.id for r in await conn.execute(ORGS_FOUND_SQL, {"ids": wanted})}


async def users_elsewhere(conn: AsyncConnection, *, rows: Sequence[tuple[str, str]]) -> set[str]:
    """The user ids of ``(id, org)`` rows that are users of another org (ids are unique
    across orgs)."""
    if not rows:
        return set()
    result = await conn.execute(
        USERS_ELSEWHERE_SQL, {"ids": [r[0] for r in rows], "orgs": [r[1] for r in rows]}
    )
    return {r.id for r in result}


async def upsert_users(conn: AsyncConnection, *, rows: Sequence[tuple[str, str, str, str]]) -> int:
    """Write ``(org, id, handle, role)`` users; return how many changed."""
    if not rows:
        return 0
    columns = list(zip(*rows, strict=True))
    result = await conn.execute(
        UPSERT_USERS_SQL,
        {
            "orgs": list(columns[0]),
            "ids": list(columns[1]),
            "handles": list(columns[2]),
            "roles": list(columns[3]),
        },
    )
    return len(result.all())


async def upsert_projects(
    conn: AsyncConnection, *, rows: Sequence[tuple[str, str, str, str]]
) -> int:
    """Write ``(org, id, name, visibility)`` projects; return how many changed."""
    if not rows:
        return 0
    columns = list(zip(*rows, strict=True))
    result = await conn.execute(
        UPSERT_PROJECTS_SQL,
        {
            "orgs": list(columns[0]),
            "ids": list(columns[1]),
            "names": list(columns[2]),
            "visibilities": list(columns[3]),
        },
    )
    return len(result.all())


async def members_missing(
    conn: AsyncConnection, *, rows: Sequence[tuple[int, str, str]]
) -> set[int]:
    """The lines of ``(line, project, user)`` rows whose user is unknown or whose project is
    not one of the user's org."""
    if not rows:
        return set()
    result = await conn.execute(
        MEMBERS_MISSING_SQL,
        {
            "lines": [r[0] for r in rows],
            "projects": [r[1] for r in rows],
            "users": [r[2] for r in rows],
        },
    )
    return {r.n for r in result}


async def grants_missing(
    conn: AsyncConnection, *, rows: Sequence[tuple[int, str, str]]
) -> set[int]:
    """The lines of ``(line, entity, user)`` rows whose user is unknown or whose memory is not
    one of the user's org."""
    if not rows:
        return set()
    result = await conn.execute(
        GRANTS_MISSING_SQL,
        {
            "lines": [r[0] for r in rows],
            "entities": [r[1] for r in rows],
            "users": [r[2] for r in rows],
        },
    )
    return {r.n for r in result}


async def insert_grants(conn: AsyncConnection, *, rows: Sequence[tuple[str, str]]) -> int:
    """Write ``(entity, user)`` grants (both known to exist); return how many were new."""
    if not rows:
        return 0
    result = await conn.execute(
        INSERT_GRANTS_SQL, {"entities": [r[0] for r in rows], "users": [r[1] for r in rows]}
    )
    return len(result.all())


# ---- references of memories and links ------------------------------------------------------

USERS_FOUND_SQL = text(
    """/* sibyl:import.users_found */
SELECT id FROM users WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[]))
ORDER BY id FOR KEY SHARE"""
)

PROJECTS_FOUND_SQL = text(
    """/* sibyl:import.projects_found */
SELECT id FROM projects WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[]))
ORDER BY id FOR KEY SHARE"""
)


async def users_found(conn: AsyncConnection, *, org_id: str, ids: Iterable[str]) -> set[str]:
    """The subset of ``ids`` that are users of ``org_id``, locked ``FOR KEY SHARE``."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    result = await conn.execute(USERS_FOUND_SQL, {"org_id": org_id, "ids": wanted})
    return {r.id for r in result}


async def projects_found(conn: AsyncConnection, *, org_id: str, ids: Iterable[str]) -> set[str]:
    """The subset of ``ids`` that are projects of ``org_id``, locked ``FOR KEY SHARE``."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    result = await conn.execute(PROJECTS_FOUND_SQL, {"org_id": org_id, "ids": wanted})
    return {r.id for r in result}


# ---- memories ------------------------------------------------------------------------------

INSERT_STAGED_ENTITIES_SQL = text(
    """/* sibyl:import.entities */
INSERT INTO entities (org_id, id, type, name, content, project_id, scope, owner_id, lifecycle,
                      metadata, revision, passage_kind, passage_total, passages_lossless)
SELECT :org_id, s.id, s.type, s.name, s.content, s.project_id, s.scope, s.owner_id,
       s.lifecycle, CAST(s.metadata AS jsonb), 1, s.kind, s.total, s.lossless
FROM sibyl_stage_entities s
ON CONFLICT (org_id, id) DO NOTHING
RETURNING id"""
)

INSERT_STAGED_PASSAGES_SQL = text(
    """/* sibyl:import.passages */
INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index, start_offset,
                      end_offset, breadcrumb, content)
SELECT :org_id, s.id, s.parent_id, s.revision, s.idx, s.start_offset, s.end_offset,
       s.breadcrumb, s.content
FROM sibyl_stage_passages s"""
)


async def insert_entities(
    conn: AsyncConnection,
    *,
    org_id: str,
    rows: Sequence[tuple[dict[str, Any], Any]],
) -> set[str]:
    """Insert new memories at revision 1 through the staging table, :data:`COPY_ROWS` a
    statement; ``rows``: (fields as for :func:`app.repo.writes.insert_entity`, their projection
    or None). Returns the ids inserted: an id a concurrent writer committed first is not."""
    inserted: set[str] = set()
    for part in parts(rows, COPY_ROWS, lambda r: min(len(r[0]["content"]), 100_000)):
        await stage(
            conn,
            "sibyl_stage_entities",
            [
                (
                    f["id"],
                    f["type"],
                    f["name"],
                    f["content"],
                    f["project_id"],
                    f["scope"],
                    f["owner_id"],
                    f["lifecycle"],
                    json.dumps(f["metadata"]),
                    p.kind if p is not None else None,
                    len(p.spans) if p is not None else 0,
                    bool(p.lossless) if p is not None else False,
                )
                for f, p in part
            ],
        )
        result = await conn.execute(INSERT_STAGED_ENTITIES_SQL, {"org_id": org_id})
        inserted.update(r.id for r in result)
    return inserted


async def insert_passages(
    conn: AsyncConnection, *, org_id: str, rows: Sequence[tuple[str, int, PassageRow]]
) -> None:
    """Insert the spans ``(parent id, parent revision, span)`` of new memories through the
    staging table."""
    for part in parts(rows, COPY_ROWS, lambda r: len(r[2].content)):
        await stage(
            conn,
            "sibyl_stage_passages",
            [
                (
                    p.id,
                    parent,
                    revision,
                    p.passage_index,
                    p.start_offset,
                    p.end_offset,
                    p.breadcrumb,
                    p.content,
                )
                for parent, revision, p in part
            ],
        )
        await conn.execute(INSERT_STAGED_PASSAGES_SQL, {"org_id": org_id})


# ---- edges ---------------------------------------------------------------------------------

INSERT_STAGED_EDGES_SQL = text(
    """/* sibyl:import.edges */
INSERT INTO edges (org_id, src_id, relationship, dst_id)
SELECT :org_id, s.src_id, s.relationship, s.dst_id FROM sibyl_stage_edges s
ON CONFLICT DO NOTHING"""
)

INSERT_STAGED_EDGES_RETURNING_SQL = text(
    """/* sibyl:import.edges_returning */
INSERT INTO edges (org_id, src_id, relationship, dst_id)
SELECT :org_id, s.src_id, s.relationship, s.dst_id FROM sibyl_stage_edges s
ON CONFLICT DO NOTHING
RETURNING src_id, relationship, dst_id"""
)

SUPERSEDES_EDGES_SQL = text(
    """/* sibyl:import.supersedes_edges */
SELECT src_id, dst_id FROM edges WHERE org_id = :org_id AND relationship = 'SUPERSEDES'"""
)


async def insert_edges(
    conn: AsyncConnection,
    *,
    org_id: str,
    edges: Sequence[tuple[str, str, str]],
    returning: bool,
) -> tuple[int, list[tuple[str, str, str]]]:
    """Insert ``(src, relationship, dst)`` edges (ends known to exist) through the staging
    table, once each; return (how many were new, the new ones when ``returning``)."""
    count = 0
    created: list[tuple[str, str, str]] = []
    for start in range(0, len(edges), COPY_ROWS):
        part = edges[start : start + COPY_ROWS]
        await stage(conn, "sibyl_stage_edges", part)
        if returning:
            result = await conn.execute(INSERT_STAGED_EDGES_RETURNING_SQL, {"org_id": org_id})
            new = [(r.src_id, r.relationship, r.dst_id) for r in result]
            created += new
            count += len(new)
        else:
            result = await conn.execute(INSERT_STAGED_EDGES_SQL, {"org_id": org_id})
            count += int(result.rowcount or 0)
    return count, created


async def supersedes_edges(conn: AsyncConnection, *, org_id: str) -> list[tuple[str, str]]:
    """Every ``(src, dst)`` SUPERSEDES edge of ``org_id`` (the caller holds the org's
    SUPERSEDES lock, so no other writer adds one meanwhile)."""
    result = await conn.execute(SUPERSEDES_EDGES_SQL, {"org_id": org_id})
    return [(r.src_id, r.dst_id) for r in result]
