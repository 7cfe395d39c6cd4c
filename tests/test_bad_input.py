"""Bad input never reaches a 500: NUL bytes, lone surrogates, non-finite numbers, huge bodies."""

from __future__ import annotations

import json

import pytest
from starlette.responses import JSONResponse

from tests.team import Team, answer, call
from tests.world import World


@pytest.fixture
async def key(engine):
    return await World().entity("x").load(engine)


def raw(body: str) -> dict:
    return {
        "content": body.encode("utf-8", "surrogatepass"),
        "headers": {"Content-Type": "application/json"},
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/search/expand", '{"entity_ids": ["x\\u0000"]}'),
        ("/api/search/expand", '{"entity_ids": ["\\udfff"]}'),
        ("/api/search/slice", '{"entity_id": "x\\u0000"}'),
        ("/api/search/slice", '{"entity_id": "\\ud800"}'),
        ("/api/search/expand", '{"entity_ids": ["x"], "project": "p\\u0000"}'),
        ("/api/search", '{"query": "\\u0000kestrel"}'),  # at the ends too: never dropped
        ("/api/search", '{"query": "kestrel\\u0000"}'),
        ("/api/search", '{"query": "kes\\u0000trel"}'),
        ("/api/context/pack", '{"goal": "kestrel\\u0000"}'),
    ],
)
async def test_unstorable_text_is_400(client, key, path, body):
    r = await client.post(
        path,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        content=body,
    )
    assert r.status_code == 400, r.text
    assert "detail" in r.json()


@pytest.mark.parametrize(
    "body",
    [
        '{"entity_ids": ["x"], "depth": NaN}',
        '{"entity_ids": ["x"], "limit": Infinity}',
        '{"entity_ids": ["x"], "content_max_chars": -Infinity}',
        '{"entity_ids": ["x"], "depth": 1e400}',
        '{"entity_ids": ["x"], "surprise": NaN}',
    ],
)
async def test_non_finite_numbers_are_422_without_echo(client, key, body):
    r = await client.post(
        "/api/search/expand",
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert isinstance(body["detail"], str)
    assert all(set(e) == {"loc", "msg", "type"} for e in body["errors"])


async def test_422_does_not_echo_ids(client, key):
    r = await client.post(
        "/api/search/slice",
        json={"entity_id": ["secret_id_123"]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 422 and "secret_id_123" not in r.text


async def test_oversized_body_is_413(client, key):
    body = json.dumps({"entity_ids": ["x" * 1000] * 10_000})
    r = await client.post(
        "/api/search/expand",
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    # the one error body, serialised as every other one (a trial saw `{"detail": "...` here)
    assert r.content == JSONResponse(r.json()).body
    assert r.json()["detail"].startswith("Request body is larger than")


async def _metadata_refused(client, key: str, metadata: str) -> str:
    """POST a memory with ``metadata`` (raw JSON text) and PATCH ``n1``'s to it: both a 422 on
    ``body.metadata`` that writes nothing (no memory made, ``n1`` still at revision 1); returns
    the create's response text."""
    headers = {"Content-Type": "application/json"}
    created = await call(
        client,
        "POST",
        "/api/entities",
        key,
        headers=headers,
        content='{"id": "meta_bad", "type": "note", "name": "n", "project": "p1", "metadata": '
        + metadata
        + "}",
    )
    assert created.status_code == 422, created.text
    assert created.json()["errors"][0]["loc"] == ["body", "metadata"]
    assert answer(await call(client, "GET", "/api/entities/meta_bad", key))[0] == 404
    edited = await call(
        client,
        "PATCH",
        "/api/entities/n1",
        key,
        headers=headers,
        content='{"metadata": ' + metadata + "}",
    )
    assert edited.status_code == 422, edited.text
    assert (await call(client, "GET", "/api/entities/n1", key)).json()["revision"] == 1
    return created.text


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_non_finite_numbers_in_metadata_are_422_and_write_nothing(engine, client, number):
    """Python's JSON reader takes NaN, Infinity and 1e400 (→ inf) as numbers; jsonb refuses
    them. ``metadata`` is free-form, so no field type catches them: they must not reach the
    database (a 500), on create or on edit."""
    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    text = await _metadata_refused(client, ann, f'{{"a": [1, {{"secret_b": {number}}}]}}')
    assert "secret_b" not in text


async def test_oversized_streamed_body_is_413(client, key):
    """Without Content-Length (chunked) the body is counted as it arrives; the limit must still
    answer 413, not the parser's 400 for a body cut short."""
    body = json.dumps({"entity_ids": ["x" * 1000] * 10_000}).encode()

    async def chunks():
        for start in range(0, len(body), 1 << 16):
            yield body[start : start + (1 << 16)]

    r = await client.post(
        "/api/search/expand",
        content=chunks(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert r.json() == {"detail": "Request body is larger than 8388608 bytes"}


async def _stored_and_read_back(client, key: str, id_: str, metadata: dict) -> None:
    """A memory created with ``metadata`` (201) reads it back unchanged."""
    body = {"id": id_, "type": "note", "name": "n", "project": "p1", "metadata": metadata}
    ok = await call(client, "POST", "/api/entities", key, json=body)
    assert ok.status_code == 201, ok.text
    got = await call(client, "GET", f"/api/entities/{id_}", key)
    assert got.status_code == 200 and got.json()["metadata"] == metadata


@pytest.mark.parametrize("depth", [65, 300])
async def test_metadata_nested_too_deep_is_422_and_writes_nothing(engine, client, depth):
    """Metadata nested 280-300 levels deep was stored, answered 500 (the response's serializer
    recursed too deep; a retrying client made duplicates) and every later read of the memory was
    a 500 (a new-user trial). Now a create or an edit deeper than 64 levels is a 422 that
    writes nothing, and 64 levels are stored and read back."""
    from app.domain.write_schemas import METADATA_MAX_DEPTH

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")

    def nested(levels: int) -> str:
        return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)

    await _metadata_refused(client, ann, nested(depth))
    await _stored_and_read_back(client, ann, "deep_ok", json.loads(nested(METADATA_MAX_DEPTH)))


async def test_metadata_larger_than_64k_characters_is_422_and_writes_nothing(engine, client):
    """One memory with 400,000 metadata keys slowed every read returning it, for everyone (a
    breaker's trial): metadata over 65,536 characters of compact JSON is a 422 that writes
    nothing; exactly that much is stored and read back."""
    from app.domain.write_schemas import METADATA_MAX_CHARS

    t = await Team().load(engine)
    ann = await t.key(engine, "ann")
    text = await _metadata_refused(client, ann, json.dumps({f"k{i}": i for i in range(400_000)}))
    assert f"larger than {METADATA_MAX_CHARS} characters of JSON" in text
    fits = {"x": "y" * (METADATA_MAX_CHARS - len('{"x":""}'))}
    assert len(json.dumps(fits, separators=(",", ":"))) == METADATA_MAX_CHARS
    await _stored_and_read_back(client, ann, "meta_full", fits)
    await _metadata_refused(client, ann, json.dumps({"x": "y" * (METADATA_MAX_CHARS - 7)}))


@pytest.mark.parametrize(
    ("sent", "applied"),
    [
        ({"window": -9, "content_max_chars": 10**20}, (1, 50_000)),
        ({"window": 10**6, "content_max_chars": -5}, (64, 0)),
        ({}, (3, 18_000)),
    ],
)
async def test_slice_reports_the_bounds_it_applied(client, key, sent, applied):
    """Out-of-range bounds are clamped and the applied values reported, the window's and the
    character budget's alike (a breaker: the budget was clamped but not reported)."""
    r = await client.post(
        "/api/search/slice",
        json={"entity_id": "x", **sent},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["window"], r.json()["content_max_chars"]) == applied


@pytest.mark.parametrize(
    ("content", "keyed", "status", "says"),
    [
        (b'{"query": "\xff"}', False, 400, "There was an error parsing the body"),
        (b'{"query": "\xff"}', True, 400, "There was an error parsing the body"),
        (b"[" * 100_000 + b"]" * 100_000, False, 400, "There was an error parsing the body"),
        (b"\xff\xfe", False, 401, "Missing API key"),
        (b"\xff\xfe", True, 422, "JSON decode error"),
        (b"{oops", True, 422, "JSON decode error"),
    ],
)
async def test_unparseable_bodies_answer_as_the_readme_says(
    client, key, content, keyed, status, says
):
    # README "Errors" (a new-user trial found it said 400 for every body that is not JSON)
    headers = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {key}"} if keyed else {}),
    }
    r = await client.post("/api/search", content=content, headers=headers)
    assert r.status_code == status and says in r.text, r.text


@pytest.mark.parametrize(
    ("content_type", "keyed", "status"),
    [
        ("text/plain", True, 415),
        ("application/x-www-form-urlencoded", True, 415),
        ("text/plain; charset=utf-8", False, 401),  # no key: the 401 comes first, as for a 422
        ("application/json; charset=utf-8", True, 200),
        ("application/merge-patch+json", True, 200),  # any application/*+json is JSON
        (None, True, 415),  # no Content-Type: not read as JSON (FastAPI's strict content type)
    ],
)
async def test_a_body_sent_as_another_media_type_is_a_415_that_says_so(
    client, key, content_type, keyed, status
):
    # `curl -d '{"query": "x"}'` without -H sends a form: it answered 422 "body: Input should
    # be a valid dictionary", which names no cause
    headers = {**({"Authorization": f"Bearer {key}"} if keyed else {})}
    if content_type:
        headers["Content-Type"] = content_type
    r = await client.post("/api/search", content=b'{"query": "pattern"}', headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        assert r.json() == {
            "detail": "The request body must be JSON, sent with Content-Type: application/json"
        }


async def test_a_body_that_is_not_json_names_the_body_and_the_character(client, key):
    r = await client.post(
        "/api/search",
        content=b'{"query": "x",',
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [
        {"loc": ["body"], "msg": "JSON decode error at character 14", "type": "json_invalid"}
    ]
    assert r.json()["detail"] == "Invalid request: body: JSON decode error at character 14"


@pytest.mark.parametrize(
    ("path", "field", "named"),
    [
        ("/api/search/expand", "types", ["note"]),
        ("/api/search/expand", "relationship_types", ["DEPENDS_ON"]),
        ("/api/search", "types", ["note"]),
    ],
)
async def test_an_empty_filter_list_is_refused_not_read_as_match_nothing(
    engine, client, path, field, named
):
    """A new user's trial: ``types: []`` answered an empty page (everything filtered out) where
    ``lifecycle: []`` was a 400, and an agent sending ``[]`` most often means "no filter". Now a
    400 that says to omit it; the pair, the same request naming a type or relationship, answers
    and finds the memory."""
    key = (
        await World()
        .entity("a", content="kestrel")
        .entity("b")
        .edge("a", "DEPENDS_ON", "b")
        .load(engine)
    )
    base = {"entity_ids": ["a"]} if path.endswith("expand") else {"query": "kestrel"}
    headers = {"Authorization": f"Bearer {key}"}
    empty = await client.post(path, json={**base, field: []}, headers=headers)
    assert empty.status_code == 400, empty.text
    assert empty.json() == {
        "detail": f"{field} is empty, which would match nothing: omit it for no filter"
    }
    given = await client.post(path, json={**base, field: named}, headers=headers)
    assert given.status_code == 200, given.text
    found = given.json().get("neighbors", given.json().get("results"))
    assert found, given.text
