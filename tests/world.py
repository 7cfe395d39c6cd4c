"""A tiny DSL for test orgs: one org, one owner, one org-visible project, entities and edges."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from tests.builders import import_dicts, make_key


@dataclass
class World:
    """Rows of one test org; ``await world.load(engine)`` imports them and mints a key."""

    org: str = field(default_factory=lambda: "org_w_" + secrets.token_hex(4))
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.user = f"user_{self.org}"
        self.records += [
            {"kind": "org", "id": self.org, "name": "World"},
            {"kind": "user", "id": self.user, "org": self.org, "handle": "w", "role": "member"},
            {"kind": "project", "id": "proj", "org": self.org, "name": "P", "visibility": "org"},
            {"kind": "member", "project": "proj", "user": self.user, "role": "contributor"},
        ]

    def entity(self, id_: str, *, type_: str = "note", content: str = "", **extra: Any) -> World:
        rec = {
            "kind": "entity",
            "id": id_,
            "org": self.org,
            "type": type_,
            "name": extra.pop("name", id_),
            "content": content or f"Body of {id_}.",
            "project": "proj",
            "owner": self.user,
        }
        rec.update(extra)
        if rec.get("scope") == "org":
            rec.pop("project", None)
        self.records.append(rec)
        return self

    def edge(self, src: str, rel: str, dst: str) -> World:
        self.records.append(
            {"kind": "edge", "org": self.org, "src": src, "dst": dst, "relationship": rel}
        )
        return self

    async def admin_key(self, engine: Any, scopes: tuple[str, ...] = ("read", "admin")) -> str:
        """Add an org admin to the (loaded) world and mint a key of theirs with ``scopes``."""
        admin = f"user_admin_{self.org}"
        await import_dicts(
            engine,
            [{"kind": "user", "id": admin, "org": self.org, "handle": "adm", "role": "admin"}],
        )
        return await make_key(engine, admin, scopes=scopes)

    async def load(self, engine: Any) -> str:
        """Import the rows; return a read key of the world's user."""
        await import_dicts(engine, self.records)
        return await make_key(engine, self.user)
