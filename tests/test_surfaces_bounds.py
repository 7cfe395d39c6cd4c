"""The same odd values through REST and MCP (issue 3): identical applied bounds and identical
results, or a refusal on both (422 on REST, ``isError`` on MCP) for a value of the wrong type."""

from __future__ import annotations

import pytest
from mcp import Client

from app.core import policy
from app.mcp.server import build_mcp, fixed_key

pytestmark = pytest.mark.corpus

PATHS = {"expand_neighbors": "/api/search/expand", "fetch_slice": "/api/search/slice"}
# DEPENDS_ON and MENTIONS: a dense enough neighborhood that every bound shows, yet a depth-3
# walk that stays well inside the statement timeout
BASE = {
    "expand_neighbors": {
        "entity_ids": ["pep_0484"],
        "relationship_types": ["DEPENDS_ON", "MENTIONS"],
    },
    "fetch_slice": {"entity_id": "pep_0484"},
}
BOUNDS = {
    ("expand_neighbors", "depth"): policy.DEPTH,
    ("expand_neighbors", "limit"): policy.LIMIT,
    ("expand_neighbors", "content_max_chars"): policy.PREVIEW_CHARS,
    ("fetch_slice", "window"): policy.WINDOW,
    ("fetch_slice", "content_max_chars"): policy.SLICE_CHARS,
}


def odd_values(high: int) -> list[object]:
    return [-1, 0, 1, high, high + 1, 2**31, "3", 3.7, None, True]


def check_applied(tool: str, field: str, expected: int, body: dict) -> None:
    """The response reports (or, for the slice budget, respects) the clamped value."""
    if tool == "expand_neighbors":
        assert body["filters"][field] == expected
        if field != "content_max_chars":
            assert body[field] == expected
            assert len(body["neighbors"]) <= body["limit"]
    elif field == "window":
        assert body["window"] == expected and len(body["passages"]) <= expected
    else:  # one budget for the whole window, not echoed
        assert body["content_chars"] <= expected


THIRTEEN_SEEDS = [f"pep_{n:04d}" for n in (484, 526, 8, 9999, 544, 585, 20, 604, 612, 1, 649, 3, 7)]

CASES = [
    (tool, {field: value}, bound)
    for (tool, field), bound in BOUNDS.items()
    for value in odd_values(bound.high)
] + [
    ("expand_neighbors", {"entity_ids": THIRTEEN_SEEDS}, None),
    ("expand_neighbors", {"entity_ids": THIRTEEN_SEEDS, "depth": 2, "limit": 24}, None),
]
# wrong JSON shapes and unknown fields: refused on both, never coerced or ignored
SHAPES = [
    ("expand_neighbors", {"entity_ids": '["pep_0484"]'}),
    ("expand_neighbors", {"entity_ids": "pep_0484"}),
    ("expand_neighbors", {"include_incoming": "false"}),
    ("expand_neighbors", {"relationship_types": "DEPENDS_ON"}),
    ("expand_neighbors", {"types": [1]}),
    ("expand_neighbors", {"window": 3}),
    ("fetch_slice", {"entity_id": ["pep_0484"]}),
    ("fetch_slice", {"entity_id": 484}),
    ("fetch_slice", {"entity_id": None}),
    ("fetch_slice", {"project": 7}),
    ("fetch_slice", {"depth": 2}),
]


def case_id(case: tuple) -> str:
    tool, extra, _ = case
    shown = {
        k: (f"{len(v)} seeds" if k == "entity_ids" and isinstance(v, list) else v)
        for k, v in extra.items()
    }
    return f"{tool}-{shown}"


@pytest.mark.parametrize(("tool", "extra", "bound"), CASES, ids=[case_id(c) for c in CASES])
async def test_rest_and_mcp_agree(engine, client, pep_corpus, tool, extra, bound):
    key = pep_corpus["user_typing_reader"]
    body = {**BASE[tool], **extra}
    r = await client.post(PATHS[tool], json=body, headers={"Authorization": f"Bearer {key}"})
    async with Client(build_mcp(lambda: engine, fixed_key(key))) as mcp:
        result = await mcp.call_tool(tool, body)

    if r.status_code == 422:
        assert result.is_error and result.structured_content is None
        return
    assert r.status_code == 200, r.text
    assert not result.is_error, result.content
    assert result.structured_content == r.json()

    if bound is not None:
        ((field, value),) = extra.items()
        assert not isinstance(value, (str, float, bool)), "a wrong JSON type must be refused"
        check_applied(tool, field, bound.clamp(value), r.json())
    if "entity_ids" in extra and isinstance(extra["entity_ids"], list):
        out = r.json()
        walked = THIRTEEN_SEEDS[: policy.MAX_SEEDS]
        assert out["filters"]["origin_limit"] == policy.MAX_SEEDS
        assert out["unresolved"][-5:] == THIRTEEN_SEEDS[policy.MAX_SEEDS :]
        assert set(out["origins"]) <= set(walked) and "pep_0484" in out["origins"]


@pytest.mark.parametrize(("tool", "extra"), SHAPES, ids=[f"{t}-{e}" for t, e in SHAPES])
async def test_a_wrong_shape_is_refused_on_both(engine, client, pep_corpus, tool, extra):
    key = pep_corpus["user_typing_reader"]
    body = {**BASE[tool], **extra}
    r = await client.post(PATHS[tool], json=body, headers={"Authorization": f"Bearer {key}"})
    async with Client(build_mcp(lambda: engine, fixed_key(key))) as mcp:
        result = await mcp.call_tool(tool, body)
    assert r.status_code == 422
    assert result.is_error and result.structured_content is None


@pytest.mark.parametrize(("tool", "field"), list(BOUNDS), ids=[f"{t}-{f}" for t, f in BOUNDS])
async def test_the_wrong_types_are_exactly_the_refused_ones(client, pep_corpus, tool, field):
    key = pep_corpus["user_typing_reader"]
    refused = []
    for value in odd_values(BOUNDS[(tool, field)].high):
        r = await client.post(
            PATHS[tool],
            json={**BASE[tool], field: value},
            headers={"Authorization": f"Bearer {key}"},
        )
        if r.status_code == 422:
            refused.append(value)
    assert refused == ["3", 3.7, True]
