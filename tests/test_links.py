"""Which ``[[...]]`` in a body are links (app/domain/memories.py ``links``, ``code_regions``):
code is not (fenced blocks, inline code spans), and nothing else hides a link (reviews of
2026-12-01: CRLF bodies, stray backticks across blocks, spans across fences)."""

from __future__ import annotations

import itertools

import pytest

from app.domain.memories import code_regions, links


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("See [[a]] and [[b]], [[a]] again.", ["a", "b"]),
        ("```toml\n[[packages]]\nname = 'x'\n```\nthen [[after]]", ["after"]),
        ("~~~\n[[t]]\n~~~\n[[after]]", ["after"]),
        ("Inline `x[[0]]` and RST ``[[packages]]`` but [[real]].", ["real"]),
        ("- a\n  - b\n\n     ```toml\n     [[packages]]\n\n     [[packages]]\n     ```\n", []),
        ("```\nnever closed [[hidden]]\n", []),
        ("```\ncode\n``` trailing text does not close\n[[still_code]]", []),
        ("`c`[[adjacent]]`d`", ["adjacent"]),
        # a stray backtick (an apostrophe typed as one) hides nothing across blocks
        ("Don`t do this.\n\nSee [[p1]].\n\nUse `x` here.", ["p1"]),
        ("Don`t do this.\r\n\r\nSee [[crlf]].\r\n\r\nUse `x` here.", ["crlf"]),
        ("a ` [[across]]\n```\ncode\n```\n` end", ["across"]),
        ("- Don`t panic\n- See [[item]]\n- Run `x`", ["item"]),
        ("# Title with `tick\n[[heading]] and `x`", ["heading"]),
        ("a\x0c```\n[[formfeed]]", ["formfeed"]),
    ],
)
def test_code_is_not_a_link_and_nothing_else_hides_one(body: str, expected: list[str]) -> None:
    assert links(body) == expected


def test_code_regions_are_sorted_and_disjoint() -> None:
    body = "a ` b\n```\n[[bar]]\n```\nsee [[foo]] and ` end `x` ``y``\n\n`z`"
    regions = code_regions(body)
    assert regions == sorted(regions)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(regions))
    assert links(body) == ["foo"]


def test_adversarial_backticks_stay_linear() -> None:
    """Runs of every length that never close, and a million characters of short spans: the
    answer comes back in well under a second (a pairing that rescanned to the end for each run
    would take hours; no time is asserted, the run itself is the check)."""
    body = "".join("`" * k + " a " for k in range(1, 1400)) + " [[z]]"
    assert links(body) == ["z"]
    assert links("`x` [[q]] " * 100_000) == ["q"]
