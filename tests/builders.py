"""Helpers that put test rows into the database: oracle graphs, NDJSON records, API keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import with_database
from app.domain.keys import create_key
from app.importers import ndjson

try:
    from tests import oracle
except ImportError:  # pragma: no cover - run from inside tests/
    import oracle  # type: ignore[no-redef]


async def admin_sql(url: str, sql: str) -> None:
    """Run one statement outside any transaction (CREATE/DROP DATABASE) on the server at ``url``."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextlib.contextmanager
def throwaway_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database ``<prefix>_<random>`` on the server of ``server_url``: its URL,
    dropped (``WITH (FORCE)``) on the way out. Synchronous: for sync fixtures and tests."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = with_database(server_url, "postgres")
    asyncio.run(admin_sql(admin, f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(server_url, name)
    finally:
        asyncio.run(admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def import_dicts(engine: AsyncEngine, records: list[dict[str, Any]]) -> ndjson.ImportSummary:
    """Import §9 records through the real importer (cutting passages, deriving mentions)."""
    return await ndjson.import_records(engine, ndjson.from_dicts(records), total=len(records))


async def import_counted(
    engine: AsyncEngine, org: str, records: list[dict[str, Any]], lexemes: list[str]
) -> set[str]:
    """Import ``records`` (:func:`import_dicts`), count ``org``'s word statistics and impact
    lists, and return which of ``lexemes`` have lists."""
    from app.repo import term_stats

    await import_dicts(engine, records)
    await term_stats.refresh_orgs(engine, [org])
    async with engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT DISTINCT lexeme FROM term_impact_lists"
                " WHERE org_id = :o AND lexeme = ANY(CAST(:l AS text[]))"
            ),
            {"o": org, "l": lexemes},
        )
        return set(found.scalars())


async def search_as(
    engine: AsyncEngine,
    user_id: str,
    request: Any,
    *,
    key_projects: list[str] | None = None,
    pipeline: Any = None,
) -> Any:
    """The domain's ``search`` of ``request`` as ``user_id`` (a key restricted to
    ``key_projects``, or not), with the ranking settings ``pipeline`` (None: the service's)."""
    from app.domain.search import search
    from app.repo.readers import reader_by_user

    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=user_id, key_projects=key_projects)
        assert reader is not None, user_id
        return await search(conn, reader, request, pipeline=pipeline)


async def make_key(
    engine: AsyncEngine,
    user_id: str,
    *,
    scopes: tuple[str, ...] = ("read",),
    projects: list[str] | None = None,
) -> str:
    """Mint an API key for ``user_id``."""
    async with engine.begin() as conn:
        _, key = await create_key(conn, user_id=user_id, scopes=scopes, projects=projects)
    return key


async def load_graph(engine: AsyncEngine, g: oracle.Graph) -> None:
    """Insert an oracle graph as rows (passages inserted as given, not cut)."""
    org = g.org_id
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO orgs (id, name) VALUES (:id, :id)"), {"id": org})
        if g.users:
            await conn.execute(
                text("INSERT INTO users (org_id, id, handle, role) VALUES (:o, :id, :id, :r)"),
                [{"o": org, "id": u, "r": r} for u, r in g.users.items()],
            )
        if g.projects:
            await conn.execute(
                text(
                    "INSERT INTO projects (org_id, id, name, visibility) VALUES (:o, :id, :id, :v)"
                ),
                [{"o": org, "id": p, "v": v} for p, v in g.projects.items()],
            )
        if g.members:
            await conn.execute(
                text(
                    "INSERT INTO project_members (org_id, project_id, user_id, role) "
                    "VALUES (:o, :p, :u, :r)"
                ),
                [{"o": org, "p": p, "u": u, "r": r} for (p, u), r in g.members.items()],
            )
        kinds: dict[str, str] = {}
        totals: dict[str, int] = {}
        for p in g.passages.values():
            kinds[p.parent_id] = "evidence" if p.link == "DERIVED_FROM" else "prose"
            totals[p.parent_id] = totals.get(p.parent_id, 0) + 1
        await conn.execute(
            text(
                "INSERT INTO entities (org_id, id, type, name, content, project_id, scope,"
                " owner_id,"
                " lifecycle, metadata, passage_kind, passage_total, passages_lossless) VALUES "
                "(:o, :id, :type, :name, :content, :project_id, :scope, :owner_id, :lifecycle,"
                " CAST(:metadata AS jsonb), :kind, :total, false)"
            ),
            [
                {
                    "o": org,
                    "id": e.id,
                    "type": e.type,
                    "name": e.name,
                    "content": e.content,
                    "project_id": e.project_id,
                    "scope": e.scope,
                    "owner_id": e.owner_id,
                    "lifecycle": e.lifecycle,
                    "metadata": json.dumps({}),
                    "kind": kinds.get(e.id),
                    "total": totals.get(e.id, 0),
                }
                for e in g.entities.values()
            ],
        )
        if g.grants:
            await conn.execute(
                text("INSERT INTO entity_grants (org_id, entity_id, user_id) VALUES (:o, :e, :u)"),
                [{"o": org, "e": e, "u": u} for e, u in g.grants],
            )
        if g.edges:
            await conn.execute(
                text(
                    "INSERT INTO edges (org_id, src_id, relationship, dst_id) "
                    "VALUES (:o, :s, :r, :d)"
                ),
                [{"o": org, "s": s, "r": r, "d": d} for s, r, d in g.edges],
            )
        if g.mentions:
            await conn.execute(
                text("INSERT INTO mentions (org_id, src_id, dst_id) VALUES (:o, :s, :d)"),
                [{"o": org, "s": s, "d": d} for s, d in g.mentions],
            )
        for cid, members in g.communities.items():
            await conn.execute(
                text(
                    "INSERT INTO communities (org_id, id, audience, size) VALUES (:o, :c, 'x', :n)"
                ),
                {"o": org, "c": cid, "n": len(members)},
            )
            await conn.execute(
                text(
                    "INSERT INTO community_members (org_id, community_id, entity_id)"
                    " VALUES (:o, :c, :e)"
                ),
                [{"o": org, "c": cid, "e": e} for e in dict.fromkeys(members)],
            )
        if g.passages:
            await conn.execute(
                text(
                    "INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index,"
                    " start_offset, end_offset, breadcrumb, content) VALUES"
                    " (:o, :id, :parent, 1, :i, 0, 0, NULL, :content)"
                ),
                [
                    {
                        "o": org,
                        "id": p.id,
                        "parent": p.parent_id,
                        "i": p.index,
                        "content": p.content,
                    }
                    for p in g.passages.values()
                ],
            )


def org_records(
    org: str, sfx: str, users: dict[str, str], *, name: str = "Search", projects: bool = True
) -> list[dict[str, Any]]:
    """Import records of an org with ``users`` (handle → role, ids ``user_<handle>_<sfx>``) and,
    unless told not to, two projects: ``p2`` (visible to the org) and ``p1`` (private)."""
    out: list[dict[str, Any]] = [{"kind": "org", "id": org, "name": name}]
    out += [
        {"kind": "user", "id": f"user_{n}_{sfx}", "org": org, "handle": n, "role": r}
        for n, r in users.items()
    ]
    if projects:
        out += [
            {"kind": "project", "id": "p2", "org": org, "name": "Open", "visibility": "org"},
            {"kind": "project", "id": "p1", "org": org, "name": "Closed", "visibility": "private"},
        ]
    return out


def memory_record(
    org: str, sfx: str, id_: str, name: str, content: str, **extra: Any
) -> dict[str, Any]:
    """The import record of one memory: type ``decision``, scope ``project`` in ``p2``, owned by
    ``user_ann_<sfx>``, unless ``extra`` says otherwise (``type``, ``scope``, ``project``,
    ``owner`` as a handle; any other key is copied as is)."""
    rec: dict[str, Any] = {
        "kind": "entity",
        "id": id_,
        "org": org,
        "type": extra.pop("type", "decision"),
        "name": name,
        "content": content,
        "scope": extra.pop("scope", "project"),
        "owner": f"user_{extra.pop('owner', 'ann')}_{sfx}",
    }
    if rec["scope"] != "org":
        rec["project"] = extra.pop("project", "p2")
    rec.update(extra)
    return rec


def hidden_stuffing(org: str, sfx: str, stuffing: str, **extra: Any) -> list[dict[str, Any]]:
    """Memories an ``ann`` of p2 cannot read, full of ``stuffing``: 30 of ``bob`` in the private
    project p1 (``h_<i>``) and 10 private to ``bob`` (``hp_<i>``) (the no-leak-through-ranking
    tests: whatever they hold must change nothing ann sees)."""
    out = [
        memory_record(org, sfx, f"h_{i}", f"Kelp {i}", stuffing, project="p1", owner="bob", **extra)
        for i in range(30)
    ]
    out += [
        memory_record(
            org, sfx, f"hp_{i}", "Kelp water", stuffing, scope="private", owner="bob", **extra
        )
        for i in range(10)
    ]
    return out


async def audience_freshness(engine: AsyncEngine, org: str) -> dict[str, bool]:
    """The search statistics' audiences of ``org`` and whether each is fresh."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT audience, fresh FROM term_audiences WHERE org_id = :o"), {"o": org}
        )
        return {r.audience: r.fresh for r in rows}
