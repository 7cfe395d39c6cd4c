"""Leak canary over every surface, and absent vs denied (issue 9; contract §2, §10).

A private memory (the *secret*) carries a unique marker in its name, in every section of its body
and so in every passage it was cut into. It sits in a private project next to memories the readers
may see, linked to them every way the walk can go: edges both ways, a mention, a stale community
(detected before it was made private), and its passages. Three readers must not see it: the
project's owner (membership never authorizes a private memory), an org admin (reads every
project, never another's private memory) and the secret's own author through a key restricted to
another project.

**Every surface, enumerated.** The REST operations come from the app's own OpenAPI and the MCP
tools from ``list_tools`` (the SDK's in-memory client): every operation must be classified here,
as a read with sample requests or a write with its absent/denied probes, or the test fails. A
new route or tool is therefore covered as soon as it exists, or the test asks for samples.

Three properties are checked, on each read surface, for each reader and sample:

1. **No trace**: the marker, the secret's id and its passages' ids appear nowhere in the answer
   (status line aside: body, headers, error text, structured content), unless the request itself
   named them.
2. **Same answer as if it did not exist**: a *control org*, built identically but without the
   secret, gets byte-identical answers (after renaming the org and user ids and blanking
   timestamps), so nothing leaks through counts, ``total``, ``truncated``, ``has_more``, scores,
   ``unresolved`` ordering or the Markdown of a pack.
3. **Absent = denied**: naming the secret (or one of its passages) and naming an id that never
   existed give byte-identical answers, apart from the echo of the id itself. This holds on the
   write routes and tools that take a memory id too (they fail without changing anything).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from mcp import Client
from sqlalchemy import text

from app.api.app import create_app
from app.mcp.server import build_mcp, fixed_key
from app.repo import term_stats
from tests.builders import import_dicts, make_key

MARKER = "CANARY" + secrets.token_hex(8).upper()
SECRET = "decision_" + secrets.token_hex(6)
MISSING = "decision_" + secrets.token_hex(6)  # same shape as SECRET, never stored
MISSING_SPAN = "passage_" + secrets.token_hex(8)  # same shape as a passage id, never stored
V, BEYOND, COUSIN, OPEN, ORGNOTE = "note_visible", "note_beyond", "note_cousin", "note_open", "o1"
P, P_OPEN = "p_main", "p_open"
COMMUNITY = "community_p_main_0001"
READERS = ("powner", "admin", "author_open")
ADMIN_SCOPED = ("admin",)  # the org admin's key holds the `admin` scope (only theirs may)
EVERY_LINK = ["DEPENDS_ON", "SUPERSEDES", "BLOCKS", "MENTIONS", "PART_OF", "SHARES_COMMUNITY"]

# --- the surfaces ------------------------------------------------------------------------------
# Placeholders in samples: $SECRET, $SPAN0, $SPAN1 (the secret's passages), $MARKER, $USER (the
# author's user id). Every read sample is sent by every reader in both orgs.

READ_POSTS: dict[str, list[dict[str, Any]]] = {
    "/api/search/expand": [
        {"entity_ids": [V]},
        {"entity_ids": [V], "depth": 3, "limit": 24, "content_max_chars": 50_000},
        {"entity_ids": [V], "depth": 3, "limit": 24, "relationship_types": EVERY_LINK},
        {"entity_ids": [V], "depth": 3, "include_incoming": False},
        {"entity_ids": [V], "depth": 3, "types": ["decision", "passage"], "project": P},
        {"entity_ids": [BEYOND, COUSIN], "depth": 2, "limit": 1},
        {"entity_ids": ["$SECRET", V, "$SPAN0", "nope", BEYOND]},
        {"entity_ids": ["$SPAN1", *[f"n{i}" for i in range(7)], "$SECRET", V]},
    ],
    "/api/search/slice": [
        {"entity_id": V},
        {"entity_id": "$SECRET"},
        {"entity_id": "$SPAN0"},
        {"entity_id": "$SPAN1", "window": 64, "content_max_chars": 50_000},
        {"entity_id": BEYOND, "project": P},
    ],
    "/api/search": [
        {"query": "$MARKER"},
        {"query": "Secret"},
        {"query": "Se", "limit": 50},
        {"query": "$SECRET"},
        {"query": "$SPAN0"},
        {"query": "word1 word2 part", "limit": 50, "content_max_chars": 50_000},
        {"query": "plan", "project": P, "lifecycle": ["active", "superseded"]},
        {"query": "decision", "types": ["decision", "passage"]},
        {"query": "body", "limit": 1, "offset": 1},
        # a question whose words fill the secret (any word matches, issue 12): its hidden body
        # must not move, score or reorder what the readers see (no statistic over hidden rows)
        {"query": "What is the secret plan of part word1, word2 and word149?", "limit": 50},
        {"query": "word7 word8 word9 decision body plan", "content_max_chars": 0},
    ],
    "/api/context/pack": [
        {"goal": "$MARKER"},
        {"goal": "what is decided about the secret plan", "limit": 50, "related_limit": 5},
        {"goal": "secret part word1", "project": P, "markdown_token_budget": 100},
        {"goal": "$SECRET"},
    ],
}
READ_GETS: dict[str, list[str]] = {  # GET route -> sample URLs
    "/api/entities/{entity_id}": [f"/api/entities/{V}", "/api/entities/$SECRET"],
    "/api/admin/users": ["/api/admin/users"],
    "/api/admin/projects": ["/api/admin/projects"],
    "/api/admin/projects/{project_id}/members": [f"/api/admin/projects/{P}/members"],
    "/api/admin/entities/{entity_id}/grants": [
        f"/api/admin/entities/{V}/grants",
        "/api/admin/entities/$SECRET/grants",
    ],
    "/api/admin/keys": ["/api/admin/keys?include_revoked=true"],
}
# Reads whose answer is allowed to differ from the control org's, and why. They are still
# checked for traces of the secret and for absent = denied.
NOT_PAIRED = {
    ("post", "/api/admin/explain/{verb}"): "an operator's EXPLAIN ANALYZE counts rows before the "
    "read rule filters them: admin keys only, by design (contract §10)",
}
EXPLAIN_SAMPLES = [
    "/api/admin/explain/expand",
    "/api/admin/explain/slice",
    "/api/admin/explain/search",
]
EXPLAIN_BODIES: dict[str, dict[str, Any]] = {
    "/api/admin/explain/expand": {"entity_ids": ["$SECRET", V], "depth": 2},
    "/api/admin/explain/slice": {"entity_id": "$SECRET"},
    "/api/admin/explain/search": {"query": "$MARKER"},
}


@dataclass(frozen=True)
class Probe:
    """A request naming a memory id ($ID) that must fail the same way for a hidden memory and
    for one that never existed (a write probe changes nothing either way)."""

    method: str
    url: str
    body: dict[str, Any] | None = None


# Operations that take a memory id: the absent/denied probes ($ID: the secret, a passage, or a
# missing id). Every operation of the OpenAPI is either a read above, a probe here, or in
# NO_MEMORY_ID.
PROBES: dict[tuple[str, str], list[Probe]] = {
    ("get", "/api/entities/{entity_id}"): [Probe("GET", "/api/entities/$ID")],
    ("post", "/api/search/expand"): [
        Probe("POST", "/api/search/expand", {"entity_ids": [V, "$ID"], "depth": 2})
    ],
    ("post", "/api/search/slice"): [Probe("POST", "/api/search/slice", {"entity_id": "$ID"})],
    ("post", "/api/search"): [Probe("POST", "/api/search", {"query": "$ID"})],
    ("post", "/api/context/pack"): [Probe("POST", "/api/context/pack", {"goal": "$ID"})],
    ("patch", "/api/entities/{entity_id}"): [
        Probe("PATCH", "/api/entities/$ID", {"name": "renamed"})
    ],
    ("delete", "/api/entities/{entity_id}"): [Probe("DELETE", "/api/entities/$ID")],
    ("put", "/api/entities/{entity_id}/grants/{user_id}"): [
        Probe("PUT", "/api/entities/$ID/grants/$USER")
    ],
    ("delete", "/api/entities/{entity_id}/grants/{user_id}"): [
        Probe("DELETE", "/api/entities/$ID/grants/$USER")
    ],
    ("post", "/api/edges"): [
        Probe("POST", "/api/edges", {"src": V, "relationship": "RELATED_TO", "dst": "$ID"}),
        Probe("POST", "/api/edges", {"src": "$ID", "relationship": "BLOCKS", "dst": BEYOND}),
    ],
    ("delete", "/api/edges"): [
        Probe("DELETE", f"/api/edges?src={V}&relationship=DEPENDS_ON&dst=$ID"),
        Probe("DELETE", f"/api/edges?src=$ID&relationship=BLOCKS&dst={BEYOND}"),
    ],
    ("get", "/api/admin/entities/{entity_id}/grants"): [
        Probe("GET", "/api/admin/entities/$ID/grants")
    ],
    ("put", "/api/admin/entities/{entity_id}/grants/{user_id}"): [
        Probe("PUT", "/api/admin/entities/$ID/grants/$USER")
    ],
    ("delete", "/api/admin/entities/{entity_id}/grants/{user_id}"): [
        Probe("DELETE", "/api/admin/entities/$ID/grants/$USER")
    ],
    ("post", "/api/admin/explain/{verb}"): [
        Probe("POST", "/api/admin/explain/slice", {"entity_id": "$ID"})
    ],
}
NO_MEMORY_ID = {  # directory operations: no memory id in them, nothing of a memory in answers
    ("get", "/api/admin/users"),
    ("post", "/api/admin/users"),
    ("patch", "/api/admin/users/{user_id}"),
    ("delete", "/api/admin/users/{user_id}"),
    ("get", "/api/admin/projects"),
    ("post", "/api/admin/projects"),
    ("patch", "/api/admin/projects/{project_id}"),
    ("delete", "/api/admin/projects/{project_id}"),
    ("get", "/api/admin/projects/{project_id}/members"),
    ("put", "/api/admin/projects/{project_id}/members/{user_id}"),
    ("delete", "/api/admin/projects/{project_id}/members/{user_id}"),
    ("get", "/api/admin/keys"),
    ("post", "/api/admin/keys"),
    ("delete", "/api/admin/keys/{key_id}"),
    # server health (settings, index validity, visibility shares): no memory, no row count
    # (tests/test_doctor.py checks the answer holds no count)
    ("get", "/api/admin/doctor"),
}
# Known and documented: creating a memory with a caller-chosen id that is taken answers 409
# whether or not the caller can read it (ids are the writer's choice, in one namespace per org):
# the one place where a writer can learn that an id exists, and nothing more (docs/security.md).
ID_CHOICE = {("post", "/api/entities")}
UNAUTHENTICATED = {("get", "/healthz"), ("get", "/readyz")}

# MCP tools: read tools get the REST samples of their route; write tools get probes.
MCP_READS = {
    "search": "/api/search",
    "context": "/api/context/pack",
    "expand_neighbors": "/api/search/expand",
    "fetch_slice": "/api/search/slice",
}
MCP_PROBES: dict[str, list[dict[str, Any]]] = {
    "search": [{"query": "$ID"}],
    "context": [{"goal": "$ID"}],
    "expand_neighbors": [{"entity_ids": [V, "$ID"], "depth": 2}],
    "fetch_slice": [{"entity_id": "$ID"}, {"entity_id": "$ID", "window": 64}],
    "remember": [{"entity_id": "$ID", "name": "renamed"}],
    "link": [
        {"src": V, "relationship": "RELATED_TO", "dst": "$ID"},
        {"src": "$ID", "relationship": "BLOCKS", "dst": BEYOND},
    ],
}


# --- the two orgs ------------------------------------------------------------------------------


@dataclass
class Org:
    """One org of the pair: its id, the suffix of its user ids, a key per reader."""

    org: str
    sfx: str
    keys: dict[str, str] = field(default_factory=dict)
    spans: list[str] = field(default_factory=list)

    def u(self, name: str) -> str:
        """The id of user ``name`` in this org."""
        return f"u_{name}_{self.sfx}"


@dataclass
class Pair:
    """The org holding the secret and its control, which is identical without it."""

    real: Org
    control: Org

    @property
    def tokens(self) -> list[str]:
        """What must never show: the marker, the secret's id, its passages' ids."""
        return [MARKER, SECRET, *self.real.spans]


def records(o: Org, *, with_secret: bool) -> list[dict[str, Any]]:
    """The org's NDJSON records; the control (``with_secret=False``) lacks the secret and
    every link to it."""

    def entity(id_: str, name: str, content: str, **extra: Any) -> dict[str, Any]:
        rec = {"kind": "entity", "id": id_, "org": o.org, "type": "note", "name": name}
        rec.update(content=content, project=P, scope="project", owner=o.u("author"))
        rec.update(extra)
        return rec

    def edge(src: str, rel: str, dst: str) -> dict[str, Any]:
        return {"kind": "edge", "org": o.org, "src": src, "dst": dst, "relationship": rel}

    words = " ".join(f"word{j}" for j in range(150))
    body = f"[[{V}]]\n\n" + "\n".join(
        f"# Part {i} {MARKER}\n\n{MARKER} secret plan {words}\n" for i in range(6)
    )
    out: list[dict[str, Any]] = [
        {"kind": "org", "id": o.org, "name": "Canary"},
        {"kind": "user", "id": o.u("powner"), "org": o.org, "handle": "powner", "role": "member"},
        {"kind": "user", "id": o.u("admin"), "org": o.org, "handle": "admin", "role": "admin"},
        {"kind": "user", "id": o.u("author"), "org": o.org, "handle": "author", "role": "member"},
        {"kind": "project", "id": P, "org": o.org, "name": "Main", "visibility": "private"},
        {"kind": "project", "id": P_OPEN, "org": o.org, "name": "Open", "visibility": "org"},
        {"kind": "member", "project": P, "user": o.u("powner"), "role": "owner"},
        {"kind": "member", "project": P, "user": o.u("author"), "role": "contributor"},
        {"kind": "member", "project": P_OPEN, "user": o.u("author"), "role": "contributor"},
        # superseded in both orgs: the secret's SUPERSEDES edge marks V (contract §9, one write
        # path), so the control org states the lifecycle that edge leaves
        entity(
            V,
            "Plan",
            "A plan the readers may read: part word1 word2, the decision body.",
            lifecycle="superseded",
        ),
        entity(BEYOND, "Beyond", "Downstream of the decision: body text."),
        entity(COUSIN, "Cousin", "Same community as the plan: body text."),
        entity(OPEN, "Open plan", "An open plan body.", project=P_OPEN),
        {
            "kind": "entity",
            "id": ORGNOTE,
            "org": o.org,
            "type": "note",
            "name": "Org note",
            "content": "Every member reads this body; secret plan word1.",
            "scope": "org",
            "owner": o.u("author"),
        },
        edge(BEYOND, "RELATED_TO", COUSIN),
    ]
    if with_secret:
        out += [
            entity(SECRET, f"Secret {MARKER}", body, type="decision", scope="private"),
            edge(V, "DEPENDS_ON", SECRET),
            edge(SECRET, "SUPERSEDES", V),
            edge(SECRET, "BLOCKS", BEYOND),
            {"kind": "mention", "org": o.org, "src": V, "dst": SECRET},
        ]
    return out


async def load_org(engine: Any, o: Org, *, with_secret: bool) -> None:
    """Import the org, count its search statistics (issue 12: every read surface then weighs
    words by the counts of what its reader reads), add its (stale) community, mint the readers'
    keys."""
    await import_dicts(engine, records(o, with_secret=with_secret))
    await term_stats.refresh_orgs(engine, [o.org])
    members = [V, COUSIN, *([SECRET] if with_secret else [])]
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO communities (org_id, id, audience, size) VALUES (:o, :c, :a, :n)"),
            {"o": o.org, "c": COMMUNITY, "a": P, "n": len(members)},
        )
        await conn.execute(
            text(
                "INSERT INTO community_members (org_id, community_id, entity_id)"
                " VALUES (:o, :c, :e)"
            ),
            [{"o": o.org, "c": COMMUNITY, "e": e} for e in members],
        )
        o.spans = list(
            (
                await conn.execute(
                    text(
                        "SELECT id FROM passages WHERE org_id = :o AND parent_id = :p"
                        " ORDER BY passage_index"
                    ),
                    {"o": o.org, "p": SECRET},
                )
            ).scalars()
        )
    every = ("read", "write", "admin")
    o.keys = {
        "powner": await make_key(engine, o.u("powner"), scopes=("read", "write")),
        "admin": await make_key(engine, o.u("admin"), scopes=every),
        "author_open": await make_key(
            engine, o.u("author"), scopes=("read", "write"), projects=[P_OPEN]
        ),
        "author": await make_key(engine, o.u("author")),  # may read it: the positive control
    }


@pytest.fixture(scope="module")
async def pair(engine: Any) -> Pair:
    """The org with the secret and its control (same ids for every memory and project)."""
    tag = secrets.token_hex(4)
    real = Org(org=f"org_canary_{tag}", sfx=f"r{tag}")
    control = Org(org=f"org_cntrl_{tag}", sfx=f"c{tag}")
    await load_org(engine, real, with_secret=True)
    await load_org(engine, control, with_secret=False)
    assert len(real.spans) >= 2, "the secret must be cut into passages"
    control.spans = real.spans  # the same ids name nothing in the control org
    return Pair(real, control)


# --- helpers -----------------------------------------------------------------------------------

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
KEY_ID = re.compile(r"key_[0-9a-f]{12}")


def fill(value: Any, o: Org, spans: list[str], **extra: str) -> Any:
    """``value`` with its placeholders replaced (recursively, inside strings too)."""
    if isinstance(value, dict):
        return {k: fill(v, o, spans, **extra) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, o, spans, **extra) for v in value]
    if not isinstance(value, str):
        return value
    names = {
        "$SECRET": SECRET,
        "$SPAN0": spans[0],
        "$SPAN1": spans[1],
        "$MARKER": MARKER,
        "$USER": o.u("author"),
        **extra,
    }
    for placeholder, real in names.items():
        value = value.replace(placeholder, real)
    return value


def normalized(answer: str, o: Org) -> str:
    """An answer with what legitimately differs between the two orgs blanked: the org id, the
    user ids' suffix, timestamps, key ids."""
    answer = answer.replace(o.org, "<org>").replace(o.sfx, "<sfx>")
    return KEY_ID.sub("<key>", TIMESTAMP.sub("<ts>", answer))


def rest_answer(r: httpx.Response) -> str:
    """Status, headers (but the date) and body of a REST answer, as one string."""
    headers = {k: v for k, v in sorted(r.headers.items()) if k not in ("date", "content-length")}
    return f"{r.status_code}\n{json.dumps(headers)}\n{r.text}"


def mcp_answer(result: Any) -> str:
    """Error flag, text content and structured content of an MCP tool result, as one string."""
    texts = "".join(block.text for block in result.content if block.type == "text")
    return f"{result.is_error}\n{texts}\n{json.dumps(result.structured_content, sort_keys=True)}"


def traces(answer: str, tokens: list[str], request: str) -> list[str]:
    """The tokens of the secret found in ``answer`` that the request did not name itself."""
    lowered = answer.lower()
    return [t for t in tokens if t.lower() not in request.lower() and t.lower() in lowered]


def operations() -> set[tuple[str, str]]:
    """Every (method, path) the app serves, from its OpenAPI."""
    paths = create_app().openapi()["paths"]
    return {(method, path) for path, methods in paths.items() for method in methods}


def rest_reads() -> list[tuple[tuple[str, str], str, str, dict[str, Any] | None]]:
    """Every read sample: (operation, method, URL template, body template)."""
    out: list[tuple[tuple[str, str], str, str, dict[str, Any] | None]] = []
    for path, bodies in READ_POSTS.items():
        out += [(("post", path), "POST", path, body) for body in bodies]
    for path, urls in READ_GETS.items():
        out += [(("get", path), "GET", url, None) for url in urls]
    for url in EXPLAIN_SAMPLES:
        out.append((("post", "/api/admin/explain/{verb}"), "POST", url, EXPLAIN_BODIES[url]))
    return out


async def call(
    client: httpx.AsyncClient, key: str, method: str, url: str, body: Any
) -> httpx.Response:
    """One REST request as ``key``."""
    headers = {"Authorization": f"Bearer {key}"}
    return await client.request(method, url, json=body, headers=headers)


# --- the tests ---------------------------------------------------------------------------------


def test_every_operation_and_tool_is_classified() -> None:
    ops = operations()
    read_ops = {("post", p) for p in READ_POSTS} | {("get", p) for p in READ_GETS}
    read_ops |= {("post", "/api/admin/explain/{verb}")}
    known = read_ops | set(PROBES) | NO_MEMORY_ID | ID_CHOICE | UNAUTHENTICATED
    unknown = ops - known
    assert not unknown, f"add read samples or absent/denied probes for: {sorted(unknown)}"
    # every operation that takes a memory id in its path has a probe
    for method, path in ops:
        if "{entity_id}" in path:
            assert (method, path) in PROBES, (method, path)


async def test_the_canary_is_reachable_by_its_author_on_every_read_surface(
    client, engine, pair: Pair
) -> None:
    """The positive control: the secret's author (an unrestricted key) finds a trace of it on
    every read route and tool through the samples, so the readers below would too if the read
    rule let them."""
    o = pair.real
    for path in [*READ_POSTS, *READ_GETS]:
        if path.startswith("/api/admin"):
            continue  # directory routes: they list no memory (and need an admin's key)
        seen = False
        for op, method, url_t, body_t in rest_reads():
            if op[1] != path:
                continue
            url, body = fill(url_t, o, o.spans), fill(body_t, o, o.spans)
            r = await call(client, o.keys["author"], method, url, body)
            seen = seen or bool(traces(rest_answer(r), pair.tokens, url + json.dumps(body)))
        assert seen, f"no sample of {path} reaches the secret: the samples test nothing"
    async with Client(build_mcp(lambda: engine, fixed_key(o.keys["author"]))) as mcp:
        for tool, path in MCP_READS.items():
            seen = False
            for body_t in READ_POSTS[path]:
                args = fill(body_t, o, o.spans)
                answer = mcp_answer(await mcp.call_tool(tool, args))
                seen = seen or bool(traces(answer, pair.tokens, json.dumps(args)))
            assert seen, f"no sample of the {tool} tool reaches the secret"


async def test_no_read_route_shows_a_trace_or_differs_from_the_control(client, pair: Pair) -> None:
    """Properties 1 and 2 on every REST read route, for every reader."""
    checked = 0
    for op, method, url_t, body_t in rest_reads():
        for reader in READERS:
            answers = {}
            for o in (pair.real, pair.control):
                url, body = fill(url_t, o, pair.real.spans), fill(body_t, o, pair.real.spans)
                r = await call(client, o.keys[reader], method, url, body)
                assert r.status_code < 500, (url, body, r.text)
                answers[o.org] = normalized(rest_answer(r), o)
                if o is pair.real:
                    request = url + json.dumps(body)
                    found = traces(rest_answer(r), pair.tokens, request)
                    assert not found, (reader, url, body, found, r.text[:500])
            if op not in NOT_PAIRED:
                real, control = answers[pair.real.org], answers[pair.control.org]
                assert real == control, (reader, url_t, body_t, real[:800], control[:800])
            checked += 1
    assert checked >= 30


async def test_no_mcp_read_tool_shows_a_trace_or_differs_from_the_control(
    engine, pair: Pair
) -> None:
    """Properties 1 and 2 on every MCP read tool (enumerated by ``list_tools``)."""
    async with Client(build_mcp(lambda: engine, fixed_key(None))) as mcp:
        listed = (await mcp.list_tools()).tools
    read_tools = [t.name for t in listed if t.annotations and t.annotations.read_only_hint]
    missing = set(read_tools) - set(MCP_READS)
    assert not missing, f"map these read tools to their REST samples: {missing}"
    for reader in READERS:
        clients = {}
        for o in (pair.real, pair.control):
            clients[o.org] = Client(build_mcp(lambda: engine, fixed_key(o.keys[reader])))
        async with clients[pair.real.org] as real_mcp, clients[pair.control.org] as control_mcp:
            for tool in read_tools:
                for body_t in READ_POSTS[MCP_READS[tool]]:
                    answers = {}
                    for o, mcp in ((pair.real, real_mcp), (pair.control, control_mcp)):
                        args = fill(body_t, o, pair.real.spans)
                        result = await mcp.call_tool(tool, args)
                        text_ = mcp_answer(result)
                        assert "Error executing tool" not in text_, (tool, args, text_)
                        answers[o.org] = normalized(text_, o)
                        if o is pair.real:
                            found = traces(text_, pair.tokens, json.dumps(args))
                            assert not found, (reader, tool, args, found)
                    assert answers[pair.real.org] == answers[pair.control.org], (reader, tool)


def _no_words(answer: str) -> str:
    """``answer`` without search's echo of the query's words: they are the caller's own words as
    the database's parser splits them, and an id's hex part splits by its digits."""
    return re.sub(r'"words": ?\[[^\]]*\]', '"words": [...]', answer)


def _ids_to_probe(pair: Pair) -> list[tuple[str, str]]:
    """(hidden id, never-stored id of the same shape) pairs."""
    return [(SECRET, MISSING), (pair.real.spans[0], MISSING_SPAN)]


async def test_absent_and_denied_are_byte_identical_on_rest(client, pair: Pair) -> None:
    """Property 3 on every REST operation taking a memory id (reads and writes)."""
    o = pair.real
    for op, probes in sorted(PROBES.items()):
        for probe in probes:
            for reader in READERS:
                if op in NOT_PAIRED and reader in ADMIN_SCOPED:
                    continue  # an operator's plan: see NOT_PAIRED
                for hidden, missing in _ids_to_probe(pair):
                    answers = []
                    for id_ in (hidden, missing):
                        url = fill(probe.url, o, o.spans, **{"$ID": id_})
                        body = fill(probe.body, o, o.spans, **{"$ID": id_})
                        r = await call(client, o.keys[reader], probe.method, url, body)
                        assert r.status_code < 500, (reader, probe, r.text)
                        if _writes(probe):
                            assert r.status_code >= 400, (reader, probe, r.status_code, r.text)
                        answers.append(_no_words(rest_answer(r).replace(id_, "<id>")))
                    assert answers[0] == answers[1], (reader, probe, hidden, answers)


def _writes(probe: Probe) -> bool:
    """True for a probe that would change something if it succeeded."""
    return probe.method in ("PATCH", "PUT", "DELETE") or probe.url == "/api/edges"


async def test_absent_and_denied_are_byte_identical_on_mcp(engine, pair: Pair) -> None:
    """Property 3 on every MCP tool (read and write) taking a memory id."""
    async with Client(build_mcp(lambda: engine, fixed_key(None))) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
    missing = names - set(MCP_PROBES)
    assert not missing, f"add absent/denied probes for these tools: {missing}"
    o = pair.real
    for reader in READERS:
        async with Client(build_mcp(lambda: engine, fixed_key(o.keys[reader]))) as mcp:
            for tool, probes in MCP_PROBES.items():
                for args_t in probes:
                    for hidden, never in _ids_to_probe(pair):
                        answers = []
                        for id_ in (hidden, never):
                            result = await mcp.call_tool(
                                tool, fill(args_t, o, o.spans, **{"$ID": id_})
                            )
                            answers.append(_no_words(mcp_answer(result).replace(id_, "<id>")))
                        assert answers[0] == answers[1], (reader, tool, args_t, answers)
                        assert "Error executing tool" not in answers[0]


async def test_the_probes_changed_nothing(engine, pair: Pair) -> None:
    """The write probes above failed without a trace: the secret, its edges, mention, grants
    and community are exactly as imported (run after them: pytest keeps file order)."""
    async with engine.connect() as conn:
        for table, expected in (
            ("entities", 6),
            ("edges", 4),
            ("mentions", 2),
            ("entity_grants", 0),
            ("community_members", 3),
        ):
            count = text(f"SELECT count(*) FROM {table} WHERE org_id = :o")
            found = (await conn.execute(count, {"o": pair.real.org})).scalar()
            assert found == expected, (table, found)
        stale = text(
            "SELECT count(*) FILTER (WHERE NOT fresh), count(*) FROM term_audiences"
            " WHERE org_id = :o"
        )
        assert tuple((await conn.execute(stale, {"o": pair.real.org})).one()) == (0, 3)
        row = (
            await conn.execute(
                text("SELECT name, revision FROM entities WHERE org_id = :o AND id = :id"),
                {"o": pair.real.org, "id": SECRET},
            )
        ).one()
    assert (row.name, row.revision) == (f"Secret {MARKER}", 1)
