"""Text is stored as it is searched: Unicode NFC, normalised once, on the way in (REST, MCP and
the import). A body or a name written decomposed (``cafe\\u0301``, ``Zu\\u0308rich``) is found by
both spellings of the query, exactly as one written composed."""

from __future__ import annotations

import secrets
import unicodedata
from typing import Literal

import httpx
import pytest
from sqlalchemy import text

from tests.builders import import_dicts, make_key, memory_record, org_records
from tests.team import call

NFD: Literal["NFD"] = "NFD"
NFC: Literal["NFC"] = "NFC"


def spelled(form: Literal["NFC", "NFD"], value: str) -> str:
    return unicodedata.normalize(form, value)


@pytest.fixture
async def org(engine) -> tuple[str, str]:
    org, sfx = "org_nfc_" + secrets.token_hex(3), secrets.token_hex(3)
    await import_dicts(engine, org_records(org, sfx, {"ann": "member"}))
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO project_members (org_id, project_id, user_id, role)"
                " VALUES (:o, 'p2', :u, 'contributor')"
            ),
            {"o": org, "u": f"user_ann_{sfx}"},
        )
    return org, sfx


async def search_ids(client, key: str, query: str) -> list[str]:
    r = await call(client, "POST", "/api/search", key, json={"query": query, "limit": 20})
    assert r.status_code == 200, r.text
    return [row["id"] for row in r.json()["results"] if row.get("parent_entity_id") is None]


@pytest.mark.parametrize("written", [NFD, NFC])
async def test_a_body_written_in_either_form_is_found_by_both_query_forms(
    engine, client, org, written: Literal["NFC", "NFD"]
) -> None:
    _, sfx = org
    key = await make_key(engine, f"user_ann_{sfx}", scopes=("read", "write"))
    body = spelled(written, "Die Bäckerei am Zürichsee serves café crème to the harbour.")
    r = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={"id": "bakery", "type": "note", "name": "Shop", "content": body, "project": "p2"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["content"] == spelled(NFC, body)  # stored composed, whatever was sent
    for word in ("Bäckerei", "café", "Zürichsee"):
        for form in (NFC, NFD):
            assert "bakery" in await search_ids(client, key, spelled(form, word)), (word, form)


@pytest.mark.parametrize("written", [NFD, NFC])
async def test_a_name_written_in_either_form_is_found_by_both_query_forms(
    engine, client, org, written: Literal["NFC", "NFD"]
) -> None:
    org_id, sfx = org
    name = spelled(written, "Crème brûlée für Jürgen")
    await import_dicts(engine, [memory_record(org_id, sfx, "dessert", name, "A recipe.")])
    key = await make_key(engine, f"user_ann_{sfx}")
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                text("SELECT name FROM entities WHERE org_id = :o AND id = 'dessert'"),
                {"o": org_id},
            )
        ).scalar_one()
    assert stored == spelled(NFC, name)
    for query in ("brûlée", "Jürgen", "Crème brûlée für Jürgen"):
        for form in (NFC, NFD):
            assert "dessert" in await search_ids(client, key, spelled(form, query)), (query, form)


async def test_a_patch_in_nfd_of_the_stored_text_changes_nothing(engine, client, org) -> None:
    _, sfx = org
    key = await make_key(engine, f"user_ann_{sfx}", scopes=("read", "write"))
    body = "Le café de la gare."
    made = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={"id": "gare", "type": "note", "name": "Gare", "content": body, "project": "p2"},
    )
    assert made.status_code == 201
    again = await call(
        client, "PATCH", "/api/entities/gare", key, json={"content": spelled(NFD, body)}
    )
    assert again.status_code == 200
    assert again.json()["revision"] == made.json()["revision"] == 1  # the same text: unchanged


async def test_declared_spans_of_a_decomposed_body_move_onto_the_composed_one(
    engine, client, org
) -> None:
    org_id, sfx = org
    key = await make_key(engine, f"user_ann_{sfx}", scopes=("read", "write"))
    first, second = spelled(NFD, "Zürich café. "), spelled(NFD, "Bäckerei.")
    spans = [
        {"start": 0, "end": len(first), "label": spelled(NFD, "Zürich")},
        {"start": len(first), "end": len(first) + len(second), "label": "Zwei"},
    ]
    r = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={
            "id": "spanned",
            "type": "document",
            "name": "Spans",
            "content": first + second,
            "project": "p2",
            "spans": spans,
        },
    )
    assert r.status_code == 201, r.text
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT start_offset, end_offset, breadcrumb, content FROM passages"
                    " WHERE org_id = :o AND parent_id = 'spanned' ORDER BY passage_index"
                ),
                {"o": org_id},
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        (0, len(spelled(NFC, first)), "Zürich", spelled(NFC, first)),
        (
            len(spelled(NFC, first)),
            len(spelled(NFC, first + second)),
            "Zwei",
            spelled(NFC, second),
        ),
    ]
    # a span starting with the accent of the character before it cannot be moved: refused
    split = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={
            "id": "split",
            "type": "document",
            "name": "Split",
            "content": "cafe\u0301",
            "project": "p2",
            "spans": [{"start": 0, "end": 4, "label": "a"}, {"start": 4, "end": 5, "label": "b"}],
        },
    )
    assert split.status_code == 400
    assert "inside a character" in split.json()["detail"]
    # offsets count the body as sent: spans that tile only its composed form are refused, with
    # the reason counted on the body as sent (8 characters here, 7 composed); the pair, the
    # same text tiled as sent, is the move above
    sent = "cafe\u0301 ok"

    async def frames(tiles: list[tuple[int, int]]) -> httpx.Response:
        spans = [{"start": a, "end": b, "label": "x"} for a, b in tiles]
        body = {"id": "frames", "type": "document", "name": "Frames", "content": sent}
        return await call(
            client, "POST", "/api/entities", key, json={**body, "project": "p2", "spans": spans}
        )

    for tiles_composed in ([(0, 4), (4, 7)], [(0, 5), (5, 9)]):
        refused = await frames(tiles_composed)
        assert refused.status_code == 400, refused.text
        assert "8" in refused.json()["detail"], refused.text
    tiled_as_sent = await frames([(0, 6), (6, 8)])
    assert tiled_as_sent.status_code == 201, tiled_as_sent.text
