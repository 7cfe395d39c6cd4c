"""The evaluation machinery (issue 12, docs/eval.md) on a tiny made-up corpus: recall, the
keyword form, the three-round loop's exposure and cost, the question files' shape."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from app.core.settings import PROJECT_ROOT
from app.repo.readers import reader_by_user
from evaluation.harness import (
    LoopPlan,
    QuestionResult,
    answer_rank,
    evaluate,
    recall_at,
    summarize,
)
from evaluation.questions import (
    Question,
    check_phrases,
    contains_phrase,
    keywords,
    load_questions,
)
from evaluation.runner import QUESTION_SETS
from tests.builders import import_dicts

# --- pure parts ----------------------------------------------------------------------------------


def test_recall_counts_ranks_within_k():
    ranks = [1, 3, None, 6, 5]
    assert recall_at(ranks, 1) == pytest.approx(1 / 5)
    assert recall_at(ranks, 5) == pytest.approx(3 / 5)
    assert recall_at(ranks, 10) == pytest.approx(4 / 5)
    assert recall_at([], 5) == 0.0


def test_answer_rank_is_the_first_answering_memory():
    assert answer_rank(["a", "b", "c"], ["c", "b"]) == 2
    assert answer_rank(["a", "b"], ["z"]) is None
    assert answer_rank([], ["a"]) is None


def test_keywords_drop_stop_words_and_punctuation_but_keep_compound_tokens():
    q = "Which table of pyproject.toml holds the single-file script's data, and why?"
    assert keywords(q) == "table pyproject.toml holds single-file script data"
    assert keywords("What is THE the what?") == "what is the the what?"  # only stop words
    assert keywords("Spam, spam and SPAM!") == "spam"


def test_phrases_compare_without_case_or_line_breaks():
    assert contains_phrase(
        "Use 4 spaces\n   per INDENTATION level.", "use 4 spaces per indentation"
    )
    assert not contains_phrase("Use 4 spaces", "use 8 spaces")
    qs = [
        Question("a", "?", ("m1", "m2"), "in two"),
        Question("b", "?", ("m1",), "nowhere"),
        Question("c", "?", ("m9",), "in one"),
    ]
    assert check_phrases(qs, {"m1": "text in one", "m2": "text in\ntwo"}) == ["b", "c"]


def test_question_files_are_well_formed(tmp_path: Path):
    main = load_questions(PROJECT_ROOT / "eval" / "questions.jsonl")
    held = load_questions(PROJECT_ROOT / "eval" / "heldout.jsonl")
    assert len(main) >= 40 and len(held) >= 12
    sets = [load_questions(path) for _, path in QUESTION_SETS]
    assert len(sets) == 9 and sets[0] == main and sets[1] == held
    ids = [q.id for qs in sets for q in qs]
    questions = [q.question for qs in sets for q in qs]
    assert len(ids) == len(set(ids)) and len(questions) == len(set(questions))
    for (name, _), qs in zip(QUESTION_SETS, sets, strict=True):
        hops = {q.hop_relationship for q in qs if q.hop_relationship}
        # heldout7 was drawn after every eligible SUPERSEDES successor was an answer elsewhere
        assert hops == ({"DEPENDS_ON"} if name == "heldout7" else {"SUPERSEDES", "DEPENDS_ON"})
        assert all(q.hop_from and q.hop_from not in q.answers for q in qs if q.hop_relationship)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "q?", "answers": [], "phrase": "p"}))
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_questions(bad)


# --- the loop on a made-up corpus ----------------------------------------------------------------

SECTION = "Wading birds stand still in shallow water for a long time. " * 12


def _corpus(org: str, sfx: str) -> list[dict]:
    admin = f"user_admin_{sfx}"

    def ent(id_: str, type_: str, name: str, content: str) -> dict:
        return {
            "kind": "entity",
            "id": id_,
            "org": org,
            "type": type_,
            "name": name,
            "content": content,
            "project": "p",
            "scope": "project",
            "owner": admin,
        }

    # a long document cut into passages; the answer sits in its third section
    guide = "\n\n".join(
        [
            f"# Heron guide\n\n{SECTION}",
            f"## Plumage\n\n{SECTION}",
            f"## Breeding\n\nGrey herons nest in colonies called heronries. {SECTION}",
            f"## Feeding\n\n{SECTION}",
        ]
    )
    return [
        {"kind": "org", "id": org, "name": "Eval"},
        {"kind": "user", "id": admin, "org": org, "handle": "admin", "role": "admin"},
        {"kind": "project", "id": "p", "org": org, "name": "Birds", "visibility": "private"},
        ent("doc_guide", "document", "Heron field guide", guide),
        ent("dec_old", "decision", "Aviary feeding schedule", "Feed the aviary at dawn."),
        ent("dec_new", "decision", "Revised schedule", "Twice a day, with sardines."),
        ent("note_other", "note", "Shopping", "Buy sardines for the cat."),
        {
            "kind": "edge",
            "org": org,
            "src": "dec_new",
            "dst": "dec_old",
            "relationship": "SUPERSEDES",
        },
    ]


async def test_the_loop_measures_recall_exposure_and_cost(engine):
    org, sfx = "org_eval_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _corpus(org, sfx)
    await import_dicts(engine, records)
    bodies = {r["id"]: r["content"] for r in records if r["kind"] == "entity"}
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=f"user_admin_{sfx}")
    assert reader is not None
    questions = [
        # the answer's rarest word, held by no other memory
        Question("rare", "heronries", ("doc_guide",), "nest in colonies called heronries"),
        # a word no memory holds: no rank, nothing exposed
        Question("none", "zeppelin", ("doc_guide",), "heronries"),
        # the question names the old decision; the answer is its successor's (one SUPERSEDES hop)
        Question("hop", "aviary", ("dec_new",), "with sardines", "SUPERSEDES", "dec_old"),
    ]
    results = await evaluate(engine, reader, questions, bodies=bodies)
    answers = {q.id: q.answers[0] for q in questions}
    by_id = {r.id: r for r in results}

    rare = by_id["rare"]
    assert rare.rank_written == 1 and rare.rank_keywords == 1
    assert rare.exposed_round is not None
    assert "doc_guide" in rare.touched
    none = by_id["none"]
    assert none.rank_written is None and none.rank_keywords is None
    assert none.exposed_round is None
    assert none.returned_chars == 0 and none.touched == []
    hop = by_id["hop"]
    assert hop.exposed_round is not None  # through the expand round, if search missed it
    assert "dec_old" in hop.touched and "dec_new" in hop.touched
    assert hop.rank_hop_from is not None and rare.rank_hop_from is None
    for r in results:
        # cost: the returned characters against the whole bodies of the memories touched
        assert r.touched_chars == sum(len(bodies[m]) for m in r.touched)
        assert r.answer_chars == len(bodies[answers[r.id]])
        assert r.context_chars is not None and r.context_chars > 0
        assert r.context_ms is not None and r.context_ms > 0

    figures = summarize(results)
    ranks = [r.rank_written for r in results]
    assert figures["recall_at_5_written"] == round(recall_at(ranks, 5), 4)
    assert figures["recall_at_1_keywords"] == round(
        recall_at([r.rank_keywords for r in results], 1), 4
    )
    assert figures["exposure"] == round(2 / 3, 4)
    assert figures["exposure_by_round"]["3"] == figures["exposure"]
    assert figures["hop_questions"] == 1 and figures["hop_exposure"] == 1.0
    returned = sum(r.returned_chars for r in results)
    touched = sum(r.touched_chars for r in results)
    assert figures["cost_vs_touched"] == round(returned / touched, 4)


def test_summary_of_hand_made_results():
    def res(id_: str, rank: int | None, kw: int | None, exposed: int | None) -> QuestionResult:
        return QuestionResult(id_, None, rank, kw, exposed, 100, 1000, 400)

    results = [res("a", 1, 2, 1), res("b", 4, None, 3), res("c", None, None, None)]
    s = summarize(results)
    assert s["recall_at_1_written"] == round(1 / 3, 4)
    assert s["recall_at_5_written"] == round(2 / 3, 4)
    assert s["recall_at_5_keywords"] == round(1 / 3, 4)
    assert s["exposure_by_round"] == {
        "1": round(1 / 3, 4),
        "2": round(1 / 3, 4),
        "3": round(2 / 3, 4),
    }
    assert s["cost_vs_touched"] == 0.1 and s["cost_vs_answer"] == 0.25
    assert s["hop_exposure"] is None and s["context_ms_p50"] is None


async def test_round_3_widens_the_best_matching_span_that_search_names(engine):
    """With previews and excerpts too short to hold the phrase, the loop exposes it in round 3 by
    widening the span ``metadata.focus`` names (window 1; the default plan's window 2 adds the
    span after it), and the returned text holds no span twice."""
    org, sfx = "org_evalf_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _corpus(org, sfx)
    await import_dicts(engine, records)
    bodies = {r["id"]: r["content"] for r in records if r["kind"] == "entity"}
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=f"user_admin_{sfx}")
    assert reader is not None
    question = Question(
        "focus", "Where do grey herons nest?", ("doc_guide",), "nest in colonies called heronries"
    )
    plan = LoopPlan(
        search_chars=20, expand_chars=20, best_window=1, best_chars=1500, slice_spans=(1, 1, 1)
    )
    (result,) = await evaluate(
        engine, reader, [question], bodies=bodies, plan=plan, with_context=False
    )
    assert result.rank_written == 1
    assert result.exposed_round == 3
    # round 3 read the Breeding span (≈ 780 characters), not the guide from its start
    assert result.returned_chars < len(bodies["doc_guide"])
    # the default plan reads the best span with the one after it, and more of the best memory's
    # spans: more text, the same exposure
    (wider,) = await evaluate(
        engine,
        reader,
        [question],
        bodies=bodies,
        plan=LoopPlan(search_chars=20, expand_chars=20),
        with_context=False,
    )
    assert wider.exposed_round == 3 and wider.returned_chars > result.returned_chars


async def test_round_3_reads_the_opening_of_a_promoted_successor(engine):
    """A result search lists for its edge to the result above it (``promoted_by``) was not
    ranked for the question's words, so round 3 reads its opening too: the answer a successor
    states first is exposed although the successor's best-matching span is a later one."""
    org, sfx = "org_evalp_" + secrets.token_hex(4), secrets.token_hex(3)
    records = _corpus(org, sfx)
    old = "\n\n".join(
        [
            f"# Colony census\n\nCount the heron colony nests every spring. {SECTION}",
            f"## Method\n\nCount the heron colony nests from the hide. {SECTION}",
            f"## Season\n\n{SECTION}",
            f"## Records\n\n{SECTION}",
        ]
    )
    new = "\n\n".join(
        [
            f"# Census by drone\n\nA drone photographs the heronry in March. {SECTION}",
            f"## Flights\n\n{SECTION}",
            f"## Nests\n\nBefore the drone, they were tallied by hand. {SECTION}",
            f"## Archive\n\n{SECTION}",
        ]
    )
    doc = {k: v for k, v in records[3].items() if k not in ("id", "name", "content")}
    records += [
        {**doc, "id": "doc_census_old", "name": "Colony census", "content": old},
        {**doc, "id": "doc_census_new", "name": "Census by drone", "content": new},
        {
            "kind": "edge",
            "org": org,
            "src": "doc_census_new",
            "dst": "doc_census_old",
            "relationship": "SUPERSEDES",
        },
    ]
    await import_dicts(engine, records)
    bodies = {r["id"]: r["content"] for r in records if r["kind"] == "entity"}
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=f"user_admin_{sfx}")
    assert reader is not None
    question = Question(
        "successor",
        "How are the heron colony nests counted?",
        ("doc_census_new",),
        "A drone photographs the heronry in March",
        "SUPERSEDES",
        "doc_census_old",
    )
    lean = {
        "search_chars": 20,
        "expand_chars": 20,
        "best_window": 1,
        "best_chars": 1500,
        "slice_spans": (1, 1, 1),
    }
    (without,) = await evaluate(
        engine,
        reader,
        [question],
        bodies=bodies,
        plan=LoopPlan(**lean, promoted_opening=False),
        with_context=False,
    )
    (with_opening,) = await evaluate(
        engine, reader, [question], bodies=bodies, plan=LoopPlan(**lean), with_context=False
    )
    assert without.rank_hop_from == 1 and without.rank_written == 2  # promoted right after it
    assert without.exposed_round is None
    assert with_opening.exposed_round == 3


def test_the_ablation_table_names_a_run_that_could_not_run():
    """On a server without pgvector the runs that need vectors are reported as not run, with
    why, beside the ones that ran."""
    from rich.console import Console

    from evaluation.runner import render_ablations

    summary = {"questions": 10, "exposure": 0.9, "recall_at_5_written": 0.8}
    report = {
        "sets": {"heldout8": {"summary": summary}},
        "locomo": None,
        "ablations": [
            {"name": "no promotion", "changes": {}, "sets": {"heldout8": {"summary": summary}}},
            {"name": "rerank on, BM25 weight 0.3", "changes": {}, "unavailable": "no pgvector"},
        ],
    }
    console = Console(record=True, width=200)
    render_ablations(report, console)
    out = console.export_text()
    assert "no promotion" in out and "9 / 8 of 10" in out
    assert "not run: no pgvector" in out
