"""``app.domain.excerpt``: query-focused excerpts (pure; no database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.domain.excerpt import excerpt

FILLER = " ".join(f"filler{i}" for i in range(200))


def test_a_text_that_fits_comes_back_whole():
    assert excerpt("short text", [("text", 1.0)], 50) == "short text"


def test_no_match_gives_the_opening_cut_at_whitespace():
    got = excerpt(FILLER, [("absent", 1.0)], 40)
    assert got.endswith("...") and len(got) <= 40 and FILLER.startswith(got[:-3])


def test_the_window_holds_the_heaviest_words_and_starts_at_their_sentence():
    text = (
        FILLER
        + ". The kelp grows. "
        + FILLER
        + ". Kelp forests grow in cold water near coasts. "
        + FILLER
    )
    words = [("kelp", 5.0), ("cold", 3.0), ("water", 2.0)]
    got = excerpt(text, words, 80)
    assert len(got) <= 80
    assert got.startswith("...Kelp forests grow in cold water")
    assert got.endswith("...")


def test_a_word_finds_its_inflections_at_a_word_start_only():
    text = FILLER + " returning values " + FILLER + " unreturnable " + FILLER
    got = excerpt(text, [("returns", 1.0)], 60)
    assert "returning" in got and "unreturnable" not in got


def test_a_word_inside_a_snake_case_identifier_is_found():
    # the database's parser splits get_type_hints into get, type, hints: a span that scored on
    # "type hints" through it must show that line, not a TypeVar further on (a new-user trial)
    text = (
        "Interaction with ``get_type_hints()``: it returns the hints. "
        + FILLER
        + " T = TypeVar('T')"
    )
    got = excerpt(text, [("hints", 2.0), ("type", 1.0)], 80)
    assert "get_type_hints()``: it returns the hints" in got and "TypeVar" not in got, got
    # an underscore starts a word; a letter or digit before the stem still does not
    assert excerpt("x" * 100 + " subtype mytype " + FILLER, [("type", 1.0)], 40).startswith("x")


def test_never_longer_than_the_budget():
    text = FILLER + " needle " + FILLER
    for chars in (0, 3, 4, 10, 57, 300):
        got = excerpt(text, [("needle", 1.0)], chars)
        assert len(got) <= chars


def _quadratic_excerpt_start(text: str, words: list[tuple[str, float]], chars: int) -> int:
    """The window start the excerpt picks, by the plain definition (every match against every
    later match inside the window): the oracle for the one-pass search."""
    from app.domain.excerpt import matches

    found = matches(text, words)
    span = chars - 6
    best: tuple[float, int, int] | None = None
    best_start = 0
    for i, (position, _, _) in enumerate(found):
        seen: dict[int, float] = {}
        count = 0
        for other, n, weight in found[i:]:
            if other + 1 > position + span:
                break
            seen[n] = weight
            count += 1
        key = (sum(seen[n] for n in sorted(seen)), count, -position)
        if best is None or key > best:
            best, best_start = key, position
    return best_start


def test_the_window_search_agrees_with_the_plain_definition(monkeypatch):
    import random

    from app.domain import excerpt as module

    picked: list[int] = []
    cut_end = module._cut_end

    def recording_cut_end(text: str, start: int, chars: int) -> str:
        picked.append(start)
        return cut_end(text, start, chars)

    monkeypatch.setattr(module, "_cut_end", recording_cut_end)
    rng = random.Random(7)
    vocabulary = ["kelp", "cold", "water", "coast", "filler", "sea."]
    weights = [("kelp", 5.0), ("cold", 3.0), ("water", 2.0), ("coast", 0.5)]
    for _ in range(300):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(5, 120)))
        chars = rng.randint(10, 200)
        picked.clear()
        module.excerpt(text, weights, chars)
        if len(text) <= chars:
            continue
        best = _quadratic_excerpt_start(text, weights, chars)
        want = module._start_of_context(text, best, best - int((chars - 6) * module._LEAD))
        assert picked == [0 if want <= 3 else want], (text, chars)


class _CountedMatch(tuple[int, int, float]):
    """A match that counts how often the window search reads it (indexing or unpacking)."""

    reads = 0

    def __getitem__(self, index: Any) -> Any:
        _CountedMatch.reads += 1
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        _CountedMatch.reads += 1
        return super().__iter__()


def _reads_to_pick(repeats: int) -> int:
    """How many times the window search reads a match, for a text of ``repeats`` occurrences of
    one query word that all fit in the window."""
    from app.domain.excerpt import excerpt_at, matches

    text = "zqx " * repeats
    found = [_CountedMatch(m) for m in matches(text, [("zqx", 1.0)])]
    assert len(found) == repeats
    _CountedMatch.reads = 0
    start, got = excerpt_at(text, found, len(text) - 10)
    assert start == 0 and got == excerpt(text, [("zqx", 1.0)], len(text) - 10)
    return _CountedMatch.reads


def test_many_matches_are_read_a_bounded_number_of_times_each():
    """A memory's span may hold thousands of occurrences of a query word (a writer chooses the
    text); picking the window must not compare every match with every other one inside it: that
    ran for seconds per search result, on the server's event loop. Counted, not timed: four
    times the matches cost at most about four times the reads (comparing every match with every
    other one inside the window costs sixteen times), and each match is read a few times."""
    small, large = _reads_to_pick(1_000), _reads_to_pick(4_000)
    assert large <= 4 * small + 50, (small, large)
    assert large <= 8 * 4_000, large


def test_a_hard_cut_never_splits_a_character():
    """A focus excerpt or a context pack's text cut a flag, a family emoji or a letter and its
    accent in two at some budgets (a new user's trial, 2026-12-04): with no whitespace in
    reach the cut was a plain slice. At every budget, with or without a matched word, what is
    kept is whole grapheme clusters (the pair: plain ASCII is still cut at the budget)."""
    import regex

    flag, family, accent = (
        "\U0001f1eb\U0001f1f7",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",
        "e\u0301",
    )
    text = "kelpie" + (flag + family + accent) * 12 + " tail kelpie " + (family + flag) * 10
    bounds = {0, *(m.end() for m in regex.finditer(r"\X", text))}
    for words in ([], [("kelpie", 1.0)], [("tail", 1.0)]):
        for chars in range(4, len(text)):
            got = excerpt(text, words, chars)
            assert len(got) <= chars
            body = got.removeprefix("...").removesuffix("...")
            if not body:
                continue
            start = text.find(body)
            assert start >= 0, (chars, got)
            assert start in bounds and start + len(body) in bounds, (chars, words, got)
    ascii_text = "x" * 50
    assert excerpt(ascii_text, [], 20) == "x" * 17 + "..."
