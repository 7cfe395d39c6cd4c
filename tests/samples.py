"""One valid sample request per REST operation of the app (issue 9).

The hostile-input test (``tests/test_hostile_input.py``) puts hostile values in every field of
these samples, the key tests (``tests/test_keys.py``) add identity fields to them and send them
without an admin key. Every operation of the OpenAPI must have one: those tests fail otherwise.
"""

from __future__ import annotations

from typing import Any

# A valid request per operation: a path (with its parameters filled), a query, a body. Every
# operation of the OpenAPI needs one. "$USER2" is a second user of the org.
SAMPLES: dict[tuple[str, str], tuple[str, dict[str, Any], Any]] = {
    ("get", "/healthz"): ("/healthz", {}, None),
    ("get", "/readyz"): ("/readyz", {}, None),
    ("post", "/api/search/expand"): (
        "/api/search/expand",
        {},
        {
            "entity_ids": ["e0"],
            "relationship_types": ["BLOCKS"],
            "types": ["note"],
            "project": "proj",
            "depth": 2,
            "limit": 5,
            "content_max_chars": 100,
            "include_incoming": True,
        },
    ),
    ("post", "/api/search/slice"): (
        "/api/search/slice",
        {},
        {"entity_id": "e0", "project": "proj", "window": 3, "content_max_chars": 100},
    ),
    ("post", "/api/search"): (
        "/api/search",
        {},
        {
            "query": "text",
            "types": ["note"],
            "project": "proj",
            "lifecycle": ["active"],
            "limit": 5,
            "offset": 0,
            "content_max_chars": 100,
        },
    ),
    ("post", "/api/context/pack"): (
        "/api/context/pack",
        {},
        {
            "goal": "text",
            "project": "proj",
            "limit": 5,
            "include_related": True,
            "related_limit": 2,
            "markdown_token_budget": 500,
        },
    ),
    ("post", "/api/admin/explain/{verb}"): (
        "/api/admin/explain/slice",
        {},
        {"entity_id": "e0", "window": 2},
    ),
    ("get", "/api/entities/{entity_id}"): ("/api/entities/e0", {}, None),
    ("post", "/api/entities"): (
        "/api/entities",
        {},
        {
            "type": "note",
            "name": "n",
            "content": "c",
            "project": "proj",
            "scope": "project",
            "lifecycle": "active",
            "metadata": {"k": "v"},
            "spans": [{"start": 0, "end": 1, "label": "L"}],
        },
    ),
    ("patch", "/api/entities/{entity_id}"): (
        "/api/entities/e1",
        {},
        {"name": "renamed", "metadata": {"k": "v"}},
    ),
    ("delete", "/api/entities/{entity_id}"): ("/api/entities/absent", {}, None),
    ("put", "/api/entities/{entity_id}/grants/{user_id}"): (
        "/api/entities/e0/grants/$USER2",
        {},
        None,
    ),
    ("delete", "/api/entities/{entity_id}/grants/{user_id}"): (
        "/api/entities/e0/grants/$USER2",
        {},
        None,
    ),
    ("post", "/api/edges"): ("/api/edges", {}, {"src": "e0", "relationship": "CITES", "dst": "e1"}),
    ("delete", "/api/edges"): (
        "/api/edges",
        {"src": "e0", "relationship": "NONE", "dst": "e1"},
        None,
    ),
    ("get", "/api/admin/users"): ("/api/admin/users", {}, None),
    ("post", "/api/admin/users"): ("/api/admin/users", {}, {"handle": "h", "role": "member"}),
    ("patch", "/api/admin/users/{user_id}"): ("/api/admin/users/$USER2", {}, {"handle": "h2"}),
    ("delete", "/api/admin/users/{user_id}"): ("/api/admin/users/absent", {}, None),
    ("get", "/api/admin/projects"): ("/api/admin/projects", {}, None),
    ("post", "/api/admin/projects"): (
        "/api/admin/projects",
        {},
        {"name": "p", "visibility": "private"},
    ),
    ("patch", "/api/admin/projects/{project_id}"): (
        "/api/admin/projects/proj",
        {},
        {"name": "P"},
    ),
    ("delete", "/api/admin/projects/{project_id}"): ("/api/admin/projects/absent", {}, None),
    ("get", "/api/admin/projects/{project_id}/members"): (
        "/api/admin/projects/proj/members",
        {},
        None,
    ),
    ("put", "/api/admin/projects/{project_id}/members/{user_id}"): (
        "/api/admin/projects/proj/members/$USER2",
        {},
        {"role": "viewer"},
    ),
    ("delete", "/api/admin/projects/{project_id}/members/{user_id}"): (
        "/api/admin/projects/absent/members/$USER2",
        {},
        None,
    ),
    ("get", "/api/admin/entities/{entity_id}/grants"): ("/api/admin/entities/e0/grants", {}, None),
    ("put", "/api/admin/entities/{entity_id}/grants/{user_id}"): (
        "/api/admin/entities/e0/grants/$USER2",
        {},
        None,
    ),
    ("delete", "/api/admin/entities/{entity_id}/grants/{user_id}"): (
        "/api/admin/entities/e0/grants/$USER2",
        {},
        None,
    ),
    ("get", "/api/admin/keys"): ("/api/admin/keys", {"include_revoked": "true"}, None),
    ("post", "/api/admin/keys"): (
        "/api/admin/keys",
        {},
        {"user_id": "$USER2", "scopes": ["read"], "projects": ["proj"], "label": "l"},
    ),
    ("delete", "/api/admin/keys/{key_id}"): ("/api/admin/keys/key_000000000000", {}, None),
    ("get", "/api/admin/doctor"): ("/api/admin/doctor", {}, None),
}
READ_OPERATIONS = {
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("post", "/api/search/expand"),
    ("post", "/api/search/slice"),
    ("post", "/api/search"),
    ("post", "/api/context/pack"),
    ("post", "/api/admin/explain/{verb}"),
    ("get", "/api/entities/{entity_id}"),
    ("get", "/api/admin/users"),
    ("get", "/api/admin/projects"),
    ("get", "/api/admin/projects/{project_id}/members"),
    ("get", "/api/admin/entities/{entity_id}/grants"),
    ("get", "/api/admin/keys"),
    ("get", "/api/admin/doctor"),
}
