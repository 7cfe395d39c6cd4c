"""A test org with every role the write rules distinguish (contract §2, §9), for the write tests.

Users (org role; project roles):
  own  org owner              adm  org admin
  ann  member, p1 contributor bob  member, p1 maintainer, p3 owner
  vic  member, p1 viewer      out  member, no project
  ovw  org viewer, p1 contributor

Projects: p1 private, p2 org-visible (nobody is a member), p3 private (bob only).

Memories: n1, n2 (p1, owner ann); pub (p2, owner own); hid (p3, owner bob); mine (private, no
project, owner ann); shared (private in p1, owner bob, granted to ann); orgnote (org, owner own).
``omit`` leaves one memory out: the control org of a pair test.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.builders import import_dicts, make_key

RW = ("read", "write")
COUNTED = (
    "entities",
    "passages",
    "edges",
    "mentions",
    "entity_grants",
    "project_members",
    "users",
    "projects",
    "api_keys",
    "community_members",
)


@dataclass
class Team:
    """One org of the write tests; ``u(name)`` is a user id, ``key(name)`` mints a key."""

    org: str = field(default_factory=lambda: "org_t_" + secrets.token_hex(4))

    def u(self, name: str) -> str:
        """The id of user ``name`` in this org (user ids are unique across orgs)."""
        return f"u_{name}_{self.org}"

    def records(self, omit: str | None = None, extra: list[dict[str, Any]] | None = None):
        """The NDJSON records of the org, without memory ``omit``."""
        org, u = self.org, self.u
        roles = {
            "own": "owner",
            "adm": "admin",
            "ann": "member",
            "bob": "member",
            "vic": "member",
            "out": "member",
            "ovw": "viewer",
        }
        out: list[dict[str, Any]] = [{"kind": "org", "id": org, "name": "Team"}]
        out += [
            {"kind": "user", "id": u(n), "org": org, "handle": n, "role": r}
            for n, r in roles.items()
        ]
        out += [
            {"kind": "project", "id": "p1", "org": org, "name": "P1", "visibility": "private"},
            {"kind": "project", "id": "p2", "org": org, "name": "P2", "visibility": "org"},
            {"kind": "project", "id": "p3", "org": org, "name": "P3", "visibility": "private"},
            {"kind": "member", "project": "p1", "user": u("ann"), "role": "contributor"},
            {"kind": "member", "project": "p1", "user": u("bob"), "role": "maintainer"},
            {"kind": "member", "project": "p1", "user": u("vic"), "role": "viewer"},
            {"kind": "member", "project": "p1", "user": u("ovw"), "role": "contributor"},
            {"kind": "member", "project": "p3", "user": u("bob"), "role": "owner"},
        ]

        def ent(id_: str, owner: str, project: str | None, scope: str, **kw: Any) -> dict:
            rec = {
                "kind": "entity",
                "id": id_,
                "org": org,
                "type": kw.pop("type", "note"),
                "name": f"Name of {id_}",
                "content": kw.pop("content", f"Body of {id_}."),
                "scope": scope,
                "owner": u(owner),
                **kw,
            }
            if project:
                rec["project"] = project
            return rec

        entities = [
            ent("n1", "ann", "p1", "project"),
            ent("n2", "ann", "p1", "project"),
            ent("pub", "own", "p2", "project"),
            ent("hid", "bob", "p3", "project"),
            ent("mine", "ann", None, "private"),
            ent("shared", "bob", "p1", "private"),
            ent("orgnote", "own", None, "org"),
        ]
        out += [e for e in entities if e["id"] != omit]
        if omit != "shared":
            out.append({"kind": "grant", "entity": "shared", "user": u("ann")})
        return out + (extra or [])

    async def load(
        self, engine: AsyncEngine, omit: str | None = None, extra: list[dict] | None = None
    ) -> Team:
        """Import the org's records."""
        await import_dicts(engine, self.records(omit, extra))
        return self

    async def key(
        self,
        engine: AsyncEngine,
        name: str,
        scopes: tuple[str, ...] = RW,
        projects: list[str] | None = None,
    ) -> str:
        """A fresh key of user ``name`` (read + write by default)."""
        return await make_key(engine, self.u(name), scopes=scopes, projects=projects)


async def call(
    client: httpx.AsyncClient, method: str, path: str, key: str | None, **kw: Any
) -> httpx.Response:
    """One REST call with ``Authorization: Bearer <key>`` (no header when ``key`` is None)."""
    headers = dict(kw.pop("headers", {}))
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return await client.request(method, path, headers=headers, **kw)


LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
)
"""Sessions of the test database waiting on a lock (a write held back by another's lock)."""


def bob_note(t: Team, id_: str, content: str, **placement: Any) -> dict[str, Any]:
    """The import record of a note of bob's in ``t`` named ``id_``, placed by ``placement``
    (``project``, ``scope``)."""
    return {
        "kind": "entity",
        "org": t.org,
        "id": id_,
        "type": "note",
        "name": id_,
        "content": content,
        "owner": t.u("bob"),
        **placement,
    }


def answer(response: httpx.Response) -> tuple[int, Any]:
    """(status, JSON body or None): what must be equal for absent and denied."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return response.status_code, body


async def counts(engine: AsyncEngine, org: str) -> dict[str, int]:
    """Row count of every table of ``org``."""
    async with engine.connect() as conn:
        out = {}
        for table in COUNTED:
            n = (
                await conn.execute(
                    text(f"SELECT count(*) FROM {table} WHERE org_id = :o"), {"o": org}
                )
            ).scalar()
            out[table] = int(n or 0)
        return out


async def snapshot(engine: AsyncEngine, org: str) -> list[tuple]:
    """Every memory's mutable state in ``org``, by id (to prove nothing else changed)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, type, name, content, scope, project_id, owner_id, lifecycle,"
                " metadata::text, revision, updated_at FROM entities WHERE org_id = :o ORDER BY id"
            ),
            {"o": org},
        )
        return [tuple(r) for r in rows]


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    """One value of one query."""
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()
