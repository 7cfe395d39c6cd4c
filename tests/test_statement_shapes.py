"""Each verb sends a small, fixed set of statement texts, whatever the request (contract §10).

Every statement the service sends while serving many different requests over REST is recorded
(an engine listener). Per verb, the distinct texts stay within the documented bound
(``app.service.explain.STATEMENT_SHAPES``: 2 each), each starts with the constant comment naming
its verb (REST expand sends one statement that authenticates the key too:
``sibyl:expand_neighbors.keyed``), and no value of any request (ids, names, types,
relationship names, projects, query words, numbers) appears in any text: everything is bound,
arrays included, so ``pg_stat_statements`` groups a verb's calls into that many rows.
"""

from __future__ import annotations

import itertools
import random
import secrets
from collections import defaultdict

from sqlalchemy import event

from app.core.db import statement_engine
from app.service.explain import STATEMENT_SHAPES
from tests.builders import import_dicts, make_key

PREFIX = {
    "expand": "/* sibyl:expand_neighbors",
    "slice": "/* sibyl:fetch_slice",
    "search": "/* sibyl:search.",
    "auth": "/* sibyl:reader.by_key */",
    "keyed": "/* sibyl:expand_neighbors.keyed */",
}
ROUTES = {"expand": "/api/search/expand", "slice": "/api/search/slice", "search": "/api/search"}


def _records(org: str, tag: str) -> tuple[list[dict], dict[str, list[str]]]:
    """An org whose every name is unique to this run (so a leaked literal is recognisable)."""
    user = f"user_{tag}"
    projects = [f"proj_{tag}_a", f"proj_{tag}_b"]
    types = [f"kind{tag}x", f"kind{tag}y", "document"]
    rels = [f"LINK_{tag.upper()}", "DEPENDS_ON", "SUPERSEDES"]
    out: list[dict] = [
        {"kind": "org", "id": org, "name": f"Org {tag}"},
        {"kind": "user", "id": user, "org": org, "handle": f"h{tag}", "role": "member"},
    ]
    for p in projects:
        out.append({"kind": "project", "id": p, "org": org, "name": f"P {p}", "visibility": "org"})
        out.append({"kind": "member", "project": p, "user": user, "role": "contributor"})
    ids = [f"mem_{tag}_{i:02d}" for i in range(24)]
    body = "\n\n".join(f"## Head {tag} {i}\n\n" + f"lorem{tag} ipsum " * 90 for i in range(6))
    for i, id_ in enumerate(ids):
        out.append(
            {
                "kind": "entity",
                "id": id_,
                "org": org,
                "type": types[i % 3],
                "name": f"Name {tag} {i}",
                "content": body if i % 3 == 2 else f"Short body {tag} {i} [[{ids[(i + 5) % 24]}]]",
                "project": projects[i % 2],
                "owner": user,
            }
        )
    rng = random.Random(7)
    for _ in range(60):
        s, d = rng.sample(ids, 2)
        out.append(
            {"kind": "edge", "org": org, "src": s, "dst": d, "relationship": rng.choice(rels)}
        )
    values = {
        "ids": ids,
        "projects": projects,
        "types": types[:2],
        "rels": [rels[0]],
        "names": [f"Name {tag}", f"lorem{tag}", f"Head {tag}", org, user],
    }
    return out, values


async def test_each_verb_sends_a_fixed_small_set_of_statement_texts(engine, client):
    tag = secrets.token_hex(3)
    org = f"org_shapes_{tag}"
    records, values = _records(org, tag)
    await import_dicts(engine, records)
    key = await make_key(engine, f"user_{tag}")
    headers = {"Authorization": f"Bearer {key}"}
    ids, projects = values["ids"], values["projects"]

    r = await client.post("/api/search/slice", json={"entity_id": ids[2]}, headers=headers)
    passages = [p["id"] for p in r.json()["passages"]]
    assert r.status_code == 200 and len(passages) == 3

    requests: list[tuple[str, dict]] = []
    rng = random.Random(11)
    for n, depth, incoming, rels, types, project in itertools.product(
        range(1, 9),
        (1, 2, 3),
        (True, False, None),
        (None, values["rels"], ["DEPENDS_ON", "SUPERSEDES"]),
        (None, values["types"]),
        (None, projects[0]),
    ):
        if rng.random() > 0.2:
            continue
        body: dict = {"entity_ids": rng.sample(ids + passages + ["absent_" + tag], n)}
        body |= {"depth": depth, "limit": rng.choice([1, 5, 17, 24, 99])}
        body |= {"content_max_chars": rng.choice([0, 123, 4321, 60000])}
        for field, value in (
            ("include_incoming", incoming),
            ("relationship_types", rels),
            ("types", types),
            ("project", project),
        ):
            if value is not None:
                body[field] = value
        requests.append(("expand", body))
    requests.append(("expand", {"entity_ids": [f"absent_{tag}"]}))  # no walk at all
    requests.append(("expand", {"entity_ids": ids[:12], "depth": 3}))  # past the seed cap
    for target, window, budget, project in itertools.product(
        [ids[0], ids[2], ids[5], f"absent_{tag}", *passages],
        (None, 1, 4, 64),
        (None, 0, 321, 50000),
        (None, projects[0], projects[1]),
    ):
        if rng.random() > 0.35:
            continue
        body = {"entity_id": target}
        for field, value in (
            ("window", window),
            ("content_max_chars", budget),
            ("project", project),
        ):
            if value is not None:
                body[field] = value
        requests.append(("slice", body))
    for query, types, project, limit, offset in itertools.product(
        [f"lorem{tag}", ids[3], f"Name {tag} 1", f'"Head {tag} 2" -ipsum', f"nothing{tag}"],
        (None, values["types"]),
        (None, projects[1]),
        (None, 3),
        (None, 2),
    ):
        body = {"query": query}
        for field, value in (
            ("types", types),
            ("project", project),
            ("limit", limit),
            ("offset", offset),
        ):
            if value is not None:
                body[field] = value
        requests.append(("search", body))

    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    texts: dict[str, set[str]] = defaultdict(set)
    engines = [engine.sync_engine, statement_engine(engine).sync_engine]  # REST expand: the 2nd
    for eng in engines:
        event.listen(eng, "before_cursor_execute", record)
    try:
        for verb, body in requests:
            sent.clear()
            r = await client.post(ROUTES[verb], json=body, headers=headers)
            assert r.status_code in (200, 404), (verb, body, r.text)
            if verb == "expand":  # REST expand: one statement, which authenticates the key
                assert sent and sent[0].startswith(PREFIX["keyed"]), sent[:1]
                assert len(sent) == 1, sent
                own = sent
            else:
                assert sent and sent[0].startswith(PREFIX["auth"]), sent[:1]
                texts["auth"].add(sent[0])
                own = sent[1:]
            for sql in own:
                assert sql.startswith(PREFIX[verb]), (verb, sql[:80])
                texts[verb].add(sql)
    finally:
        for eng in engines:
            event.remove(eng, "before_cursor_execute", record)

    assert len(requests) > 300
    assert len(texts["auth"]) == 1
    for verb in ROUTES:
        assert 1 <= len(texts[verb]) <= STATEMENT_SHAPES[verb], (verb, len(texts[verb]))
    literals = [*ids, *passages, *projects, *values["types"], *values["rels"], *values["names"]]
    literals += [tag, "4321", "60000", "50000"]
    for verb, shapes in texts.items():
        for sql in shapes:
            leaked = [lit for lit in literals if lit in sql]
            assert not leaked, (verb, leaked)
