"""Content previews (contract §5): fit, cut at whitespace, hard cut, ellipsis, prefix form."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.preview import preview, preview_prefix
from tests.thorough import cases


def reference(content: str, budget: int) -> tuple[str, bool]:
    """The §5 rule, written as plainly as possible, over the whole content's clusters."""
    if len(content) <= budget:
        return content, False
    starts = {0} | {m.end() for m in regex.finditer(r"\X", content)}
    spaces = [i for i in range(budget + 1) if content[i].isspace() and i in starts]
    hard = max(b for b in starts if b <= budget)
    kept = content[: spaces[-1]] if spaces and 2 * spaces[-1] >= budget else content[:hard]
    return kept.rstrip() + "...", True


FLAG = "\U0001f1eb\U0001f1f7"  # France: two regional indicators
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points
E_ACUTE = "e\u0301"  # e + combining acute accent


@pytest.mark.parametrize(
    ("content", "budget", "expected"),
    [
        ("x" * 9 + FLAG + "yyyy", 10, "x" * 9 + "..."),  # the flag's first half is left out
        ("x" * 9 + FLAG + "yyyy", 11, "x" * 9 + FLAG + "..."),
        ("ab" + FAMILY + "cd", 5, "ab..."),  # never ends on a zero-width joiner
        ("ab" + FAMILY + "cd", 9, "ab" + FAMILY + "..."),
        ("caf" + E_ACUTE + "s and more", 4, "caf..."),  # e without its accent is not kept
        ("caf" + E_ACUTE + "s and more", 5, "caf" + E_ACUTE + "..."),
        (FAMILY * 3, 3, "..."),  # one cluster longer than the budget: left out whole
        ("word \u0301tail" + "x" * 20, 8, "word..."),  # a space carrying a mark starts a cluster
        ("xxxx\u1cf5\u0915yyyy", 5, "xxxx..."),  # a Vedic sign joins the letter after it
    ],
    ids=[
        *("flag-10", "flag-11", "family-5", "family-9", "accent-4", "accent-5", "long", "mark"),
        "vedic",
    ],
)
def test_a_cut_never_splits_a_grapheme_cluster(content: str, budget: int, expected: str) -> None:
    assert preview(content, budget) == (expected, True)
    assert preview_prefix(content[: budget + 1], len(content), budget) == (expected, True)
    assert reference(content, budget) == (expected, True)


def test_content_that_fits_is_unchanged() -> None:
    assert preview("hello world", 11) == ("hello world", False)
    assert preview("hello world", 500) == ("hello world", False)
    assert preview("", 0) == ("", False)
    assert preview("", 10) == ("", False)
    assert preview("  padded  ", 10) == ("  padded  ", False)  # not stripped when it fits


def test_cut_at_the_last_whitespace_within_the_budget() -> None:
    assert preview("hello world foo", 12) == ("hello world...", True)
    assert preview("hello world foo", 13) == ("hello world...", True)
    # whitespace exactly at position == budget counts: the kept text is exactly `budget` long
    assert preview("hello world foo", 11) == ("hello world...", True)
    assert preview("one two three four", 9) == ("one two...", True)


def test_hard_cut_when_the_last_whitespace_is_before_half_the_budget() -> None:
    assert preview("ab " + "x" * 20, 10) == ("ab xxxxxxx...", True)
    assert preview("x" * 30, 10) == ("x" * 10 + "...", True)  # no whitespace at all
    # whitespace at exactly half the budget is not "before half": it is used
    assert preview("abcde fghijklmnop", 10) == ("abcde...", True)
    assert preview("abcd efghijklmnop", 10) == ("abcd efghi...", True)


def test_kept_text_is_right_stripped() -> None:
    assert preview("abc    \n\n  defgh", 9) == ("abc...", True)
    assert preview("word\t\t\t\tmore", 8) == ("word...", True)
    assert preview(" " * 20, 5) == ("...", True)


def test_unicode_whitespace_counts() -> None:
    assert preview("alpha\u00a0beta gamma", 11) == ("alpha\u00a0beta...", True)
    assert preview("alpha\u2003betagamma", 9) == ("alpha...", True)


def test_budget_zero() -> None:
    assert preview("x", 0) == ("...", True)
    assert preview("   ", 0) == ("...", True)
    assert preview("", 0) == ("", False)


def test_negative_budget_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        preview("abc", -1)
    with pytest.raises(ValueError):
        preview_prefix("abc", 3, -1)


def test_preview_prefix_validates_its_input() -> None:
    with pytest.raises(ValueError):
        preview_prefix("abc", 10, 5)  # content longer than budget but prefix too short
    with pytest.raises(ValueError):
        preview_prefix("abcdef", 3, 10)  # prefix longer than the content
    with pytest.raises(ValueError):
        preview_prefix("ab", 3, 10)  # fitting content must be passed whole
    assert preview_prefix("hello world foo bar", 100, 12) == ("hello world...", True)
    assert preview_prefix("hello", 5, 12) == ("hello", False)


_text = st.text(
    alphabet=st.sampled_from(["a", "b", " ", "\n", "\r", "\t", "\u00a0", "é", "\u2028", "-"]),
    max_size=120,
)
_simple = st.text(
    alphabet=st.sampled_from(
        ["a", "b", " ", "\n", "\r", "\t", "-", "é", "日", "\u0600", "\u1cf5", "\u0915"]
    ),
    max_size=120,
)


@settings(max_examples=cases(200, 500), deadline=None)
@given(_text, st.integers(0, 130))
def test_preview_follows_the_rule(content: str, budget: int) -> None:
    text, truncated = preview(content, budget)
    assert (text, truncated) == reference(content, budget)
    if truncated:
        assert text.endswith("...")
        kept = text[:-3]
        assert len(kept) <= budget
        assert content.startswith(kept)
        assert kept == kept.rstrip()
    else:
        assert text == content


@settings(max_examples=cases(200, 500), deadline=None)
@given(_text, st.integers(0, 130))
def test_preview_prefix_agrees_with_preview(content: str, budget: int) -> None:
    prefix = content[: budget + 1]
    assert preview_prefix(prefix, len(content), budget) == preview(content, budget)
    # a longer prefix than needed gives the same answer too
    assert preview_prefix(content, len(content), budget) == preview(content, budget)


@settings(max_examples=cases(200, 500), deadline=None)
@given(_simple, st.integers(0, 130))
def test_simple_text_previews_follow_the_rule(content: str, budget: int) -> None:
    """ASCII content without CR takes a path of its own (no segmentation): the same answers as
    the segmented path, for ASCII and for any other text, CR LF (which joins) kept whole."""
    assert preview(content, budget) == reference(content, budget)


@pytest.mark.parametrize(
    ("content", "budget", "expected"),
    [
        ("x" * 9 + "\r\n" + "y" * 10, 10, "x" * 9 + "..."),  # not between CR and LF
        ("abcd efgh\r\nijkl", 10, "abcd efgh..."),  # the LF is no whitespace to cut at
        ("a" * 6 + "\r\n" + "b" * 10, 8, "a" * 6 + "..."),
    ],
)
def test_an_ascii_cut_keeps_cr_lf_whole(content: str, budget: int, expected: str) -> None:
    assert preview(content, budget) == reference(content, budget) == (expected, True)


def test_large_budget_is_fast_on_unbroken_text() -> None:
    content = "x" * 100_000
    assert preview(content, 50_000) == ("x" * 50_000 + "...", True)
    spaced = ("y" * 30_000) + " " + ("z" * 30_000)
    assert preview(spaced, 50_000) == ("y" * 30_000 + "...", True)
