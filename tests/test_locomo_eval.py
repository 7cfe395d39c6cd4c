"""The LoCoMo evaluation's loader and measures (evaluation/locomo.py): what a question's answer
and evidence are, and when a context pack exposes an evidence turn."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation import locomo


def _conversation(tmp_path: Path) -> Path:
    data = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:00 pm on 1 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted   a dog named Max."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Congrats on Max!"},
        ],
        "session_2_date_time": "2:00 pm on 8 May, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "I ran a marathon " + "far " * 60},
        ],
        "session_2_summary": "machine-written: left out",
        "qa": [
            {
                "question": "What is Ann's dog called?",
                "answer": "Max",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What did they do?",
                "answer": "x",
                "evidence": ["D1:1", "D2:1", "D1:1"],
                "category": 1,
            },
            {"question": "Unanswerable?", "answer": "x", "evidence": ["D9:9"], "category": 5},
        ],
    }
    path = tmp_path / "conv-99.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_question_names_its_sessions_and_its_evidence_turns(tmp_path):
    sessions, questions = locomo.load(_conversation(tmp_path).parent)
    assert [s.id for s in sessions] == ["locomo_conv-99_s01", "locomo_conv-99_s02"]
    assert "summary" not in sessions[1].body and "machine-written" not in sessions[1].body
    assert [q.id for q in questions] == ["conv-99:q001", "conv-99:q002"]  # D9:9 names no session
    first, second = questions
    assert first.answers == ("locomo_conv-99_s01",)
    assert first.evidence == ("I adopted a dog named Max.",)  # whitespace folded, as in the body
    assert second.answers == ("locomo_conv-99_s01", "locomo_conv-99_s02")
    assert len(second.evidence) == 2  # a repeated evidence entry counts once


def test_an_evidence_turn_is_exposed_by_its_opening_whatever_the_case_and_spacing(tmp_path):
    _, questions = locomo.load(_conversation(tmp_path).parent)
    first, second = questions
    assert (
        locomo.exposed_turns(first.evidence, "## Notes\n- **Ann:** I ADOPTED a\n dog named Max.")
        == 1
    )
    assert locomo.exposed_turns(first.evidence, "I adopted a cat named Max.") == 0
    long_turn = second.evidence[1]
    assert len(long_turn) > locomo.EVIDENCE_CHARS
    cut = long_turn[: locomo.EVIDENCE_CHARS] + " …"  # a pack that cut the turn's end
    assert locomo.exposed_turns(second.evidence, cut) == 1
    assert locomo.exposed_turns(second.evidence, long_turn[1 : locomo.EVIDENCE_CHARS + 1]) == 0


async def test_the_run_measures_search_and_the_context_pack_of_each_question(engine, tmp_path):
    """Through the real importer, search and context: the dog question finds its session first
    and its pack shows the evidence turn; a question whose words no session holds finds none."""
    from app.repo.readers import reader_by_user
    from evaluation import locomo_run
    from tests.builders import import_dicts

    sessions, questions = locomo.load(_conversation(tmp_path).parent)
    await import_dicts(engine, list(locomo.records(sessions)))
    async with engine.connect() as conn:
        reader = await reader_by_user(conn, user_id=locomo.READER)
    assert reader is not None
    report = await locomo_run.run(
        engine, reader, sessions, questions, per_project=False, with_context=True
    )
    assert report.search["4"]["recall_at_5"] == 1.0 and report.search["4"]["mrr"] == 1.0
    assert report.context is not None
    assert report.context["4"] == {"questions": 1, "evidence_exposed": 1.0, "all_exposed": 1.0}
    shown = {q["id"]: q["context_evidence_exposed"] for q in report.per_question}
    assert shown["conv-99:q001"] == 1
    without = await locomo_run.run(engine, reader, sessions, questions, per_project=False)
    assert without.context is None and "context_evidence_exposed" not in without.per_question[0]
