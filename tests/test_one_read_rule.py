"""No read path bypasses the one read rule (contract §2).

Every SQL statement the service sends while answering a read route is recorded; each statement
that reads memories (``entities`` or ``passages``) must embed the read-rule fragment of
``app/repo/readrule.py`` (recognised by its marker comment). New read routes must be added to
``READ_BODIES``: the test fails when the app serves a read route it does not know.
"""

from __future__ import annotations

import re

from sqlalchemy import event

from app.api.app import create_app
from app.repo.readrule import READ_RULE_MARKER
from tests.world import World

READ_BODIES: dict[str, list[dict]] = {
    "/api/search/expand": [
        {"entity_ids": ["a"], "depth": 3},
        {"entity_ids": ["a", "missing"], "project": "proj", "types": ["note"]},
    ],
    "/api/search/slice": [{"entity_id": "a"}, {"entity_id": "doc", "window": 5}],
    "/api/search": [{"query": "body"}],
    "/api/context/pack": [{"goal": "body"}],
}
READ_GETS: dict[str, list[tuple[str, int]]] = {  # GET route -> (URL, expected status) samples
    "/api/entities/{entity_id}": [
        ("/api/entities/a", 200),
        ("/api/entities/doc", 200),
        ("/api/entities/missing", 404),
    ],
}
WRITE_OR_ADMIN = re.compile(r"^/api/(entities|edges|admin)")
MEMORY_TABLE = re.compile(r"\b(entities|passages)\b")


def read_get_routes() -> set[str]:
    """Every GET route under /api/ except the admin routes (from OpenAPI)."""
    paths = create_app().openapi()["paths"]
    return {
        path
        for path, methods in paths.items()
        if path.startswith("/api/") and "get" in methods and not path.startswith("/api/admin")
    }


def read_routes() -> set[str]:
    """Every POST route under /api/ that is neither a write nor an admin route (from OpenAPI)."""
    paths = create_app().openapi()["paths"]
    return {
        path
        for path, methods in paths.items()
        if path.startswith("/api/") and "post" in methods and not WRITE_OR_ADMIN.match(path)
    }


async def test_every_statement_of_every_read_route_embeds_the_read_rule(engine, client):
    routes = read_routes()
    assert "/api/search/expand" in routes
    unknown = routes - set(READ_BODIES)
    assert not unknown, f"add sample bodies for new read routes: {unknown}"
    get_routes = read_get_routes()
    assert "/api/entities/{entity_id}" in get_routes
    unknown_gets = get_routes - set(READ_GETS)
    assert not unknown_gets, f"add sample URLs for new GET routes: {unknown_gets}"
    doc = "\n\n".join(f"# H{i}\n\n" + "text " * 300 for i in range(3))
    w = World().entity("a").entity("b").entity("doc", type_="document", content=doc)
    key = await w.edge("a", "RELATED_TO", "b").edge("a", "REFERENCES", "doc").load(engine)

    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        for path in sorted(routes):
            for body in READ_BODIES[path]:
                r = await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200, (path, body, r.text)
        for path in sorted(get_routes):
            for url, status in READ_GETS[path]:
                r = await client.get(url, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == status, (url, r.text)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)

    reading = [s for s in seen if MEMORY_TABLE.search(s)]
    assert reading, "no statement read memories: the test is not exercising anything"
    for statement in reading:
        assert READ_RULE_MARKER in statement, statement[:200]
