"""``app.domain.excerpt``: query-focused excerpts (pure; no database)."""

from __future__ import annotations

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


def test_never_longer_than_the_budget():
    text = FILLER + " needle " + FILLER
    for chars in (0, 3, 4, 10, 57, 300):
        got = excerpt(text, [("needle", 1.0)], chars)
        assert len(got) <= chars
