"""Passage projections (contract §7): prose cutter, evidence windows, declared spans, dispatch."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.spans import (
    HARD_MAX,
    MAX_SPANS,
    PACK_MAX,
    PACK_MIN,
    PROSE_MIN_BODY,
    Projection,
    Span,
    SpanError,
    _Lines,
    _title,
    cut_evidence,
    cut_prose,
    declared_spans,
    project,
)
from tests.thorough import cases

FENCE_OPENER = re.compile(r" {0,3}(`{3,}|~{3,})")
WORDS = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
]


# ----------------------------------------------------------------------------------- helpers


def filler(size: int, *, width: int = 72) -> str:
    """Exactly ``size`` characters of wrapped prose without blank lines (ends with a newline)."""
    assert size >= 1
    out: list[str] = []
    line = ""
    i = 0
    total = 0
    while total < size:
        word = WORDS[i % len(WORDS)]
        i += 1
        if len(line) + len(word) + 1 > width:
            out.append(line + "\n")
            total += len(line) + 1
            line = ""
        line = f"{line} {word}" if line else word
    text = "".join(out) + line
    return (text[: size - 1] + "\n") if size > 1 else "\n"


def section(heading: str, size: int) -> str:
    """A heading line, a blank line, and prose: exactly ``size`` characters."""
    head = heading + "\n\n"
    return head + filler(size - len(head))


def paragraphs(*sizes: int) -> str:
    """Paragraphs of exactly the given sizes, each counting its trailing blank line."""
    return "".join(filler(s - 1) + "\n" for s in sizes)


def texts(body: str, projection: Projection) -> list[str]:
    return [body[s.start : s.end] for s in projection.spans]


def lengths(projection: Projection) -> list[int]:
    return [s.end - s.start for s in projection.spans]


def assert_tiles_prefix(body: str, projection: Projection) -> None:
    """Spans are non-empty, contiguous from 0, and cover the body iff lossless."""
    assert projection.spans, "a projection has at least one span"
    assert projection.spans[0].start == 0
    for a, b in itertools.pairwise(projection.spans):
        assert a.end == b.start
    for s in projection.spans:
        assert s.start < s.end <= len(body)
    if projection.kind != "prose":  # prose spans have no count cap, each stays within the bound
        assert len(projection.spans) <= MAX_SPANS
    if projection.spans[-1].end == len(body):
        assert "".join(texts(body, projection)) == body


def is_single_token(text: str) -> bool:
    """A span allowed over HARD_MAX: one token no boundary cuts (whitespace only around it)."""
    return len(text.split()) == 1


def assert_prose_invariants(body: str, projection: Projection) -> None:
    assert projection.kind == "prose"
    assert projection.link_relationship == "PART_OF"
    assert_tiles_prefix(body, projection)
    # every character lies in some span, however long the body (issue 12)
    assert projection.spans[-1].end == len(body)
    assert projection.lossless
    for text in texts(body, projection):
        assert len(text) <= HARD_MAX or is_single_token(text), text[:200]
        assert text.strip(), "no span is only whitespace"
    # No span under PACK_MIN sits next to a span it could have been merged with (tail merge and
    # forward packing): of two neighbours, if either is short, together they exceed HARD_MAX.
    sizes = lengths(projection)
    for a, b in itertools.pairwise(sizes):
        if min(a, b) < PACK_MIN:
            assert a + b > HARD_MAX, sizes
    for s in projection.spans:
        if s.breadcrumb is not None:
            assert s.breadcrumb.strip()
            for part in s.breadcrumb.split(" > "):
                assert len(part) <= 60


# --------------------------------------------------------------------------------- prose: size


def test_bodies_up_to_2000_chars_are_never_cut() -> None:
    assert cut_prose("") is None
    assert cut_prose("x" * PROSE_MIN_BODY) is None
    assert cut_prose(section("# Big", 2000)) is None
    assert cut_prose("# A\n\n" + "word " * 399) is None  # 2000 chars exactly
    cut = cut_prose("x " * 1000 + "y")
    assert cut is not None
    assert cut.lossless


def test_paragraphs_pack_to_target_and_tail_merges_into_previous_span() -> None:
    # Seven 400-char paragraphs: greedy packing gives 1200, 1200 and a 400 tail, which is
    # merged into the previous span because 1600 <= 2000.
    body = paragraphs(*([400] * 7))
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert lengths(cut) == [1200, 1600]
    assert cut.spans[-1].end == len(body)
    assert all(s.breadcrumb is None for s in cut.spans)  # no heading: preamble only


def test_tail_is_not_merged_when_the_merge_would_exceed_2000() -> None:
    body = paragraphs(1900, 300)
    cut = cut_prose(body)
    assert cut is not None
    assert lengths(cut) == [1900, 300]
    assert cut.lossless


def test_small_unit_joins_the_following_one_up_to_2000() -> None:
    # A 300-char paragraph is under PACK_MIN, so it absorbs the next 1500-char paragraph
    # (1800 <= HARD_MAX) rather than standing alone.
    body = paragraphs(300, 1500, 1000)
    cut = cut_prose(body)
    assert cut is not None
    assert lengths(cut) == [1800, 1000]


def test_spans_respect_the_packing_window_on_uniform_sections() -> None:
    body = "".join(section(f"## Part {i}", 500) for i in range(30))
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert all(PACK_MIN <= n <= PACK_MAX for n in lengths(cut)), lengths(cut)
    # Sibling sections are packed whole: every span starts at a heading.
    assert all(body[s.start : s.start + 8] == "## Part " for s in cut.spans)


def test_sections_up_to_2000_are_kept_whole() -> None:
    body = section("# One", 1500) + section("# Two", 1900) + section("# Three", 1300)
    cut = cut_prose(body)
    assert cut is not None
    assert lengths(cut) == [1500, 1900, 1300]
    assert [s.breadcrumb for s in cut.spans] == ["One", "Two", "Three"]


def test_oversized_leaf_paragraph_is_split_and_only_a_long_token_stays_whole() -> None:
    long_paragraph = filler(5000)  # wrapped lines, no blank line
    body = "# Leaf\n\n" + long_paragraph + "\n" + "z" * 3000 + "\n\ntail " * 100
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    over = [t for t in texts(body, cut) if len(t) > HARD_MAX]
    assert over == ["z" * 3000 + "\n\n"]


def test_oversized_fenced_block_is_split_at_its_lines_only() -> None:
    code = "```python\n" + "".join(f"x_{i} = {i}\n\n" for i in range(400)) + "```\n"
    assert len(code) > HARD_MAX
    body = section("# Code", 900) + code + paragraphs(700, 700)
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    start = body.index("```python")
    line_starts = {start + i + 1 for i, c in enumerate(code) if c == "\n"} | {start}
    inside = [s.start for s in cut.spans if start < s.start < start + len(code)]
    assert inside, "the fence over the bound is cut"
    assert set(inside) <= line_starts  # at line starts, never inside a line


def test_a_fence_under_2000_is_never_split_at_its_blank_lines() -> None:
    code = "~~~\n" + "".join(f"line {i}\n\n" for i in range(150)) + "~~~\n"
    assert PACK_MAX < len(code) < HARD_MAX
    body = paragraphs(500, 500) + code + paragraphs(900, 900, 900)
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    start = body.index("~~~")
    assert any(s.start <= start and s.end >= start + len(code) for s in cut.spans)


# ---------------------------------------------------------------------------- prose: headings


def test_breadcrumb_is_the_heading_path_of_the_section_where_the_span_starts() -> None:
    body = (
        section("# Specification", 700)
        + section("## Motivation", 900)
        + section("## Rationale", 900)
        + section("### Details", 900)
        + section("# Appendix", 800)
    )
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert lengths(cut) == [700, 900, 1800, 800]
    assert [s.breadcrumb for s in cut.spans] == [
        "Specification",
        "Specification > Motivation",
        "Specification > Rationale",
        "Appendix",
    ]


def test_breadcrumb_of_a_split_leaf_repeats_its_section_path() -> None:
    body = section("# Guide", 300) + "## Install\n\n" + paragraphs(*([700] * 6))
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert cut.spans[0].breadcrumb == "Guide"
    assert [s.breadcrumb for s in cut.spans[1:]] == ["Guide > Install"] * (len(cut.spans) - 1)


def test_preamble_is_a_section_with_no_breadcrumb() -> None:
    body = paragraphs(700, 700) + section("# Later", 1000) + section("# End", 1000)
    cut = cut_prose(body)
    assert cut is not None
    assert [s.breadcrumb for s in cut.spans] == [None, "Later", "End"]
    assert lengths(cut) == [1400, 1000, 1000]


def test_skipped_levels_closing_hashes_and_long_headings() -> None:
    long_title = "A heading that goes on and on " * 5
    body = (
        section("# Top ##", 700)
        + section("### Deep", 900)
        + section("## " + long_title, 900)
        + section("# Second", 700)
    )
    cut = cut_prose(body)
    assert cut is not None
    crumbs = [s.breadcrumb for s in cut.spans]
    assert crumbs[:2] == ["Top", "Top > Deep"]
    third = crumbs[2]
    assert third is not None
    top, part = third.split(" > ")
    assert top == "Top"
    assert len(part) <= 60
    assert part.endswith("…")
    assert long_title.startswith(part[:-1])
    # cut at the last space within 59 characters, then the ellipsis
    assert part == "A heading that goes on and on A heading that goes on and on…"


def test_hash_lines_inside_fences_and_non_headings_are_not_headings() -> None:
    fence = "```\n# Fake in backticks\n\n# Another fake\n```\n"
    tilde = "~~~~\n# Fake in tildes\n```\n# still inside\n~~~~\n"
    body = (
        section("# Real", 300)
        + fence
        + tilde
        + "#hashtag is not a heading\n  # indented is not a heading\n\n"
        + paragraphs(*([700] * 8))
    )
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert len(cut.spans) > 3
    assert {s.breadcrumb for s in cut.spans} == {"Real"}


def test_an_unclosed_fence_runs_to_the_end_of_the_body() -> None:
    body = (
        section("# Before", 1500)
        + "```\n"
        + "".join(f"# not a heading {i}\ncode\n" for i in range(100))
    )
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert {s.breadcrumb for s in cut.spans} == {"Before"}


def test_crlf_lines_are_understood() -> None:
    body = (section("# One", 900) + section("# Two", 900) + section("# Three", 900)).replace(
        "\n", "\r\n"
    )
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert [s.breadcrumb for s in cut.spans] == ["One", "Two", "Three"]


# ------------------------------------------------------------------------------ prose: 64 cap


def test_more_than_64_spans_are_kept_each_within_the_bound() -> None:
    body = paragraphs(*([1000] * 100))
    cut = cut_prose(body)
    assert cut is not None
    assert len(cut.spans) == 100  # no count cap: nothing merged past the bound
    assert cut.lossless
    assert "".join(texts(body, cut)) == body
    assert all(s.start % 1000 == 0 for s in cut.spans)
    assert_prose_invariants(body, cut)


def test_a_250k_body_is_cut_whole_into_spans_within_the_bound() -> None:
    body = "# Top\n\n" + paragraphs(*([900] * 280)) + "\n## Tail\n\nthe last words\n"
    assert len(body) > 250_000
    cut = cut_prose(body)
    assert cut is not None and cut.lossless
    assert len(cut.spans) > MAX_SPANS
    assert "".join(texts(body, cut)) == body
    assert cut.spans[-1].end == len(body)
    assert cut.spans[0].breadcrumb == "Top"
    assert_prose_invariants(body, cut)


def test_exactly_64_spans_is_lossless() -> None:
    body = paragraphs(*([1000] * 64))
    cut = cut_prose(body)
    assert cut is not None
    assert len(cut.spans) == MAX_SPANS
    assert cut.lossless
    assert "".join(texts(body, cut)) == body


# ----------------------------------------------------------------------- prose: properties


def _heading() -> st.SearchStrategy[str]:
    return st.builds(
        lambda level, title: "#" * level + " " + title + "\n",
        st.integers(1, 6),
        st.text(alphabet="abc XYZ#>`", min_size=0, max_size=90),
    )


def _paragraph() -> st.SearchStrategy[str]:
    return st.builds(
        lambda lines, width: "".join(filler(width) for _ in range(lines)) + "\n",
        st.integers(1, 40),
        st.integers(10, 120),
    )


def _fence(*, closed: bool) -> st.SearchStrategy[str]:
    return st.builds(
        lambda mark, n: (
            mark
            + "\n"
            + "# fake heading\n\n" * n
            + ("x = 1\n" * n)
            + (mark.strip().removesuffix("py") + "\n" if closed else "")  # no info on a closer
        ),
        st.sampled_from(["```", "~~~", "````", "  ```", "```py"]),
        st.integers(0, 200),
    )


_blocks = st.lists(
    st.one_of(
        _heading(),
        _paragraph(),
        _paragraph(),
        _fence(closed=True),
        st.just("\n"),
        st.builds(lambda n: "y" * n + "\n", st.integers(1, 3000)),
        # noise of the markup's characters, never a fence marker (three backticks or tildes):
        # one would open a fence that the next fence block closes, turning its fake headings
        # into real ones (arbitrary fences: test_prose_partitions_arbitrary_text)
        st.text(alphabet="ab #`~\n\r\t>", max_size=300)
        .filter(lambda t: re.search("`{3}|~{3}", t) is None)
        .map(lambda t: t + "\n"),
    ),
    max_size=60,
)
# Every block ends with a newline, so fences and headings start their line; an unclosed fence
# may only come last (an unclosed fence followed by another fence would be closed by it).
_markdownish = st.builds(
    lambda blocks, last: "".join(blocks) + last,
    _blocks,
    st.one_of(st.just(""), _fence(closed=False)),
)


@settings(max_examples=cases(100, 300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_markdownish)
def test_prose_partitions_any_markdownish_body(body: str) -> None:
    cut = cut_prose(body)
    if len(body) <= PROSE_MIN_BODY:
        assert cut is None
        return
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert cut == cut_prose(body)  # deterministic
    for s in cut.spans:
        assert s.breadcrumb is None or "fake heading" not in s.breadcrumb


@settings(max_examples=cases(60, 200), deadline=None)
@given(st.text(alphabet="a #`~\n\r\t", min_size=2001, max_size=8000))
def test_prose_partitions_arbitrary_text(body: str) -> None:
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)


def _lines_one_by_one(body: str) -> tuple[list[int], list[int], list[bool], list[int], list]:
    """The line table read the plain way, one line after another (what ``_Lines`` computes
    column by column): starts, ends, blank outside fences, fenced block of each line, headings."""
    starts: list[int] = []
    ends: list[int] = []
    blank: list[bool] = []
    fence: list[int] = []
    headings: list[tuple[int, int, int, str]] = []
    raw_lines = body.split("\n")
    if raw_lines[-1] == "":
        raw_lines.pop()
    pos, char, length, current, count = 0, "", 0, -1, 0
    for index, raw in enumerate(raw_lines):
        end = min(pos + len(raw) + 1, len(body))
        starts.append(pos)
        ends.append(end)
        line = raw[:-1] if raw.endswith("\r") else raw
        if current >= 0:
            fence.append(current)
            blank.append(False)
            close = re.fullmatch(r" {0,3}(`{3,}|~{3,})[ \t]*", line)
            if close and close.group(1)[0] == char and len(close.group(1)) >= length:
                current = -1
        else:
            opening = re.fullmatch(r" {0,3}(`{3,}|~{3,})(.*)", line)
            if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
                char, length, current = opening.group(1)[0], len(opening.group(1)), count
                count += 1
                fence.append(current)
                blank.append(False)
            else:
                fence.append(-1)
                blank.append(not line.strip())
                heading = re.fullmatch(r"(#{1,6})(?:[ \t]+(.*))?", line)
                if heading:
                    headings.append((index, pos, len(heading.group(1)), heading.group(2) or ""))
        pos = end
    return starts, ends, blank, fence, headings


_LINE_STARTS = [
    "",
    " ",
    "    ",
    "\t",
    "#",
    "## ",
    "####### ",
    "```",
    "~~~",
    "````",
    " ```",
    "   ~~~",
]
_LINE_STARTS += ["    ```", "\t```", " #"]


@settings(max_examples=cases(200, 600), deadline=None)
@given(
    st.lists(
        st.builds(
            lambda head, rest, end: head + rest + end,
            st.sampled_from(_LINE_STARTS),
            st.text(alphabet=" \t`~#ax", max_size=12),
            st.sampled_from(["\n", "\r\n", "\r", ""]),
        ),
        max_size=40,
    ).map("".join)
)
def test_the_line_table_is_the_one_a_line_by_line_reading_gives(body: str) -> None:
    # _Lines reads only the lines that may be fence lines or headings one by one (a body of
    # short lines is cut ten times faster): it must agree with reading every line.
    lines = _Lines(body)
    starts, ends, blank, fence, headings = _lines_one_by_one(body)
    assert (lines.starts, lines.ends, lines.blank, lines.fence) == (starts, ends, blank, fence)
    assert [(h.line, h.offset, h.level) for h in lines.headings] == [h[:3] for h in headings]
    assert [h.title for h in lines.headings] == [_title(h[3]) for h in headings]


def test_a_200kb_body_is_cut_into_a_partition() -> None:
    # how fast is a benchmark matter, never a test's (tests assert behaviour)
    unit = (
        section("# Chapter", 900)
        + section("## Part", 2500)
        + "```\n# code\n"
        + "x = 1\n" * 50
        + "```\n\n"
        + paragraphs(300, 800, 1500)
    )
    body = (unit * (200_000 // len(unit) + 1))[:200_000]
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)


# ------------------------------------------------------------------------------------ evidence


def test_evidence_is_fixed_windows_of_lines_with_a_partial_last_window() -> None:
    body = "".join(f"log line {i}\n" for i in range(100))
    cut = cut_evidence(body)
    assert cut is not None
    assert cut.kind == "evidence"
    assert cut.link_relationship == "DERIVED_FROM"
    assert not cut.lossless
    assert [t.count("\n") for t in texts(body, cut)] == [40, 40, 20]
    assert texts(body, cut)[2].startswith("log line 80\n")
    assert all(s.breadcrumb is None for s in cut.spans)
    assert "".join(texts(body, cut)) == body


def test_evidence_window_size_is_configurable_and_last_line_may_lack_a_newline() -> None:
    body = "a\nb\nc\nd\ne"
    cut = cut_evidence(body, lines_per_span=2)
    assert cut is not None
    assert texts(body, cut) == ["a\nb\n", "c\nd\n", "e"]
    exact = cut_evidence("a\nb\nc\nd\n", lines_per_span=2)
    assert exact is not None
    assert len(exact.spans) == 2


def test_evidence_never_claims_coverage_and_empty_body_is_not_cut() -> None:
    single = cut_evidence("one line")
    assert single is not None
    assert len(single.spans) == 1
    assert not single.lossless
    assert cut_evidence("") is None
    with pytest.raises(ValueError):
        cut_evidence("x", lines_per_span=0)


def test_evidence_past_64_windows_widens_them_and_keeps_every_line() -> None:
    body = "l\n" * (40 * 64 + 5)
    cut = cut_evidence(body)
    assert cut is not None
    assert len(cut.spans) == 33  # windows of 80 lines: 2565 lines in 33 windows
    assert all(s.end - s.start == 160 for s in cut.spans[:-1])
    assert cut.spans[-1].end == len(body)
    exact = cut_evidence("l\n" * (40 * 64))
    assert exact is not None and len(exact.spans) == MAX_SPANS


@settings(max_examples=cases(100, 200), deadline=None)
@given(st.text(alphabet="ab\n\r", max_size=600), st.integers(1, 12))
def test_evidence_windows_partition_the_lines(body: str, n: int) -> None:
    cut = cut_evidence(body, lines_per_span=n)
    if not body:
        assert cut is None
        return
    assert cut is not None
    assert_tiles_prefix(body, cut)
    assert cut.spans[-1].end == len(body)
    lines = body.count("\n") + (not body.endswith("\n"))
    windows = -(-lines // n)
    n *= max(1, -(-windows // MAX_SPANS))  # windows widen past 64 of them
    parts = texts(body, cut)
    for text in parts[:-1]:
        assert text.count("\n") == n and text.endswith("\n")
    assert 1 <= parts[-1].count("\n") + (not parts[-1].endswith("\n")) <= n
    if len(parts) < MAX_SPANS:
        assert "".join(parts) == body


# ------------------------------------------------------------------------------------ declared


BODY = "alpha beta gamma delta"  # 22 characters


def test_declared_spans_are_used_verbatim() -> None:
    spans = [
        {"start": 0, "end": 6, "label": "  First  "},
        {"start": 6, "end": 11, "label": "Second", "extra": "ignored"},
        {"start": 11, "end": 22, "label": "Rest"},
    ]
    result = declared_spans(BODY, spans)
    assert result == Projection(
        "declared",
        (Span(0, 6, "  First  "), Span(6, 11, "Second"), Span(11, 22, "Rest")),
        lossless=True,
    )
    assert result.link_relationship == "PART_OF"


def _spans(*bounds: tuple[int, int]) -> list[dict[str, object]]:
    return [{"start": a, "end": b, "label": f"s{i}"} for i, (a, b) in enumerate(bounds)]


@pytest.mark.parametrize(
    ("spans", "fragment"),
    [
        ([], "must not be empty"),
        (_spans((0, 5), (7, 22)), "gap"),
        (_spans((0, 8), (6, 22)), "overlap"),
        (_spans((0, 5), (5, 30)), "past the end of the body (22 characters)"),
        (_spans((0, 5), (5, 20)), "cover the whole body"),
        (_spans((5, 22), (0, 5)), "first span must start at 0"),
        (_spans((0, 5), (11, 22), (5, 11)), "gap"),
        (_spans((0, 11), (11, 22), (5, 11)), "body order"),
        (_spans((0, 5), (5, 5), (5, 22)), "empty or reversed"),
        (_spans((0, 5), (5, 3)), "empty or reversed"),
        (_spans((-1, 22)), "must start at 0"),
        ([{"start": 0, "end": 22, "label": "   "}], "non-blank string"),
        ([{"start": 0, "end": 22, "label": ""}], "non-blank string"),
        ([{"start": 0, "end": 22, "label": "\u200b\u200b"}], "label must be a non-blank string"),
        ([{"start": 0, "end": 22, "label": 7}], "non-blank string"),
        ([{"start": 0, "end": 22}], "label must be a non-blank string"),
        ([{"start": 0, "end": 22, "label": "x" * 201}], "at most 200"),
        ([{"end": 22, "label": "x"}], "no 'start'"),
        ([{"start": 0, "end": "22", "label": "x"}], "end must be an integer"),
        ([{"start": False, "end": 22, "label": "x"}], "start must be an integer"),
        ([{"start": 0.0, "end": 22, "label": "x"}], "start must be an integer"),
        (["not an object"], "must be an object"),
        ("0-22", "must be a list"),
    ],
)
def test_declared_spans_reject_with_a_useful_reason(spans: object, fragment: str) -> None:
    with pytest.raises(SpanError) as info:
        declared_spans(BODY, spans)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_declared_spans_bounds_on_count_and_label() -> None:
    body = "x" * 65
    sixty_four = [{"start": i, "end": i + 1, "label": "l" * 200} for i in range(63)]
    sixty_four.append({"start": 63, "end": 65, "label": "last"})
    result = declared_spans(body, sixty_four)
    assert len(result.spans) == 64
    assert result.lossless
    too_many = [{"start": i, "end": i + 1, "label": "l"} for i in range(65)]
    with pytest.raises(SpanError, match="at most 64 spans"):
        declared_spans(body, too_many)
    with pytest.raises(SpanError, match="empty body"):
        declared_spans("", [{"start": 0, "end": 0, "label": "x"}])


# ---------------------------------------------------------------------------------- dispatch


LONG = paragraphs(*([700] * 5))
LOG = "".join(f"line {i}\n" for i in range(90))


def test_project_dispatches_on_type_and_declared_spans() -> None:
    prose = project("decision", LONG)
    assert prose is not None and prose.kind == "prose"
    assert project("note", "short") is None
    for kind in ("task", "person", "passage"):
        assert project(kind, LONG) is None
    evidence = project("observation", LOG)
    assert evidence is not None and evidence.kind == "evidence"
    assert len(evidence.spans) == 3
    assert evidence.lossless is False
    assert project("Observation", LOG, evidence_lines=30) is not None
    tens = project("observation", LOG, evidence_lines=10)
    assert tens is not None and len(tens.spans) == 9
    declared = project("task", BODY, declared=[{"start": 0, "end": 22, "label": "All"}])
    assert declared is not None and declared.kind == "declared"
    assert declared.spans == (Span(0, 22, "All"),)
    with pytest.raises(SpanError):
        project("decision", LONG, declared=[])


# ------------------------------------------------------------- prose: paragraphs over the bound

PARAGRAPH = (
    "The import reads every line. It keeps going past a bad one! Does it stop? Never… "
    "Each sentence here ends with punctuation and a space. "
) * 75


@pytest.mark.parametrize(
    "body",
    [
        PARAGRAPH[:10_489],  # one paragraph, no blank line, no newline
        (PARAGRAPH[:10_489] + "\n\n") * 3,  # it gave [10490, 1, 10490, 1, 10490, 1]
        ("word " * 200_000)[:999_999],  # one line of words: no sentence, no line boundary
        ("a line without any stop\n" * 42_000)[:999_999],  # lines, no sentence end
        "\n\n\n" + "# Title\n\n" + PARAGRAPH[:5000] + "\n\n\n\n",  # whitespace around it
        "   \n" * 400 + "some words. " * 200,  # a preamble of blank lines
    ],
    ids=["10489", "three-with-blank-lines", "999999-words", "lines", "blank-edges", "blanks"],
)
def test_a_paragraph_over_the_bound_is_split_and_no_span_is_only_whitespace(body: str) -> None:
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    assert all(len(t) <= HARD_MAX for t in texts(body, cut))  # no token is over the bound here
    assert all(t.strip() for t in texts(body, cut))


def test_a_paragraph_is_cut_at_sentence_ends_before_lines_and_words() -> None:
    body = PARAGRAPH[:10_489]
    cut = cut_prose(body)
    assert cut is not None
    for span in cut.spans[1:]:
        before = body[: span.start].rstrip()
        assert before[-1] in ".!?…", before[-20:]  # every cut follows a sentence's end


def test_a_single_token_over_the_bound_is_the_only_span_over_it() -> None:
    body = "# Blob\n\n" + "intro words. " * 50 + "\n\n" + "Q" * 7000 + "\n\nafter it. " * 100
    cut = cut_prose(body)
    assert cut is not None
    assert_prose_invariants(body, cut)
    over = [t for t in texts(body, cut) if len(t) > HARD_MAX]
    assert [t.strip() for t in over] == ["Q" * 7000]


def test_a_body_of_whitespace_alone_is_never_cut() -> None:
    assert cut_prose(" \n" * 3000) is None
