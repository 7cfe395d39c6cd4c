"""Questions of the evaluation, and the keyword form of a question.

A question set is a JSON Lines file, one object a line::

    {"id": "q29", "question": "What replaced ...?", "answers": ["pep_0600"],
     "phrase": "manylinux_${GLIBCMAJOR}", "hop": {"relationship": "SUPERSEDES",
     "from": "pep_0599"}}

- ``answers``: the ids of the memories that answer the question (any one of them counts);
- ``phrase``: a short answer phrase that appears literally in at least one answering memory
  (compared by :func:`normalize_text`: case-folded, whitespace runs as one space);
- ``hop`` (optional): the question names ``from``; its answer lies one ``relationship`` edge
  away from it (a ``SUPERSEDES`` or ``DEPENDS_ON`` hop). Informative only: nothing of the
  harness treats a hop question differently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# English function words and question words: what a person types around the words that matter.
# A fixed list (no corpus statistic), applied the same way to every question.
_STOP_TEXT = """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either few
    for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just let may me might more most must my myself no nor not now of off
    on once only or other ought our ours ourselves out over own per same shall she should so
    some such than that the their theirs them themselves then there these they this those
    through to too under until up upon us very via was we were what when where whether which
    while who whom whose why will with within without would you your yours yourself yourselves
    instead rather s t
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
_TOKEN = re.compile(r"\w+(?:[.\-]\w+)*")
_SPACE = re.compile(r"\s+")


def keywords(question: str) -> str:
    """The keyword form of ``question``: its tokens (runs of word characters, keeping inner ``.``
    and ``-`` as in ``pyproject.toml`` or ``single-file``), lower-cased, stop words and repeats
    dropped, in order, joined by single spaces. A question of stop words only is returned
    lower-cased as is (a query is never blank)."""
    seen: list[str] = []
    for token in _TOKEN.findall(question):
        word = token.casefold()
        if word not in STOP_WORDS and word not in seen:
            seen.append(word)
    return " ".join(seen) if seen else question.strip().casefold()


def normalize_text(text: str) -> str:
    """Case-folded, every whitespace run one space, stripped: how phrases are compared."""
    return _SPACE.sub(" ", text).strip().casefold()


def contains_phrase(text: str, phrase: str) -> bool:
    """True iff ``phrase`` appears in ``text`` (both normalized by :func:`normalize_text`)."""
    return normalize_text(phrase) in normalize_text(text)


@dataclass(frozen=True)
class Question:
    """One question: what is asked, which memories answer it, and a phrase of the answer."""

    id: str
    question: str
    answers: tuple[str, ...]
    phrase: str
    hop_relationship: str | None = None
    hop_from: str | None = None


def parse_question(obj: Mapping[str, object], where: str = "<question>") -> Question:
    """One question from its JSON object; ``ValueError`` naming ``where`` when malformed."""
    try:
        answers = obj["answers"]
        hop = obj.get("hop")
        if not isinstance(answers, list) or not answers:
            raise ValueError("answers must be a non-empty list")
        if hop is not None and not isinstance(hop, dict):
            raise ValueError("hop must be an object")
        q = Question(
            id=str(obj["id"]),
            question=str(obj["question"]),
            answers=tuple(str(a) for a in answers),
            phrase=str(obj["phrase"]),
            hop_relationship=str(hop["relationship"]) if hop else None,
            hop_from=str(hop["from"]) if hop else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: malformed question ({exc})") from None
    if not q.question.strip() or not q.phrase.strip():
        raise ValueError(f"{where}: blank question or phrase")
    return q


def load_questions(path: Path) -> list[Question]:
    """The questions of a JSON Lines file, in file order (blank lines skipped); ``ValueError``
    for a malformed line or a repeated id."""
    out: list[Question] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            out.append(parse_question(json.loads(line), f"{path}:{n}"))
    ids = [q.id for q in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: repeated question id")
    return out


def check_phrases(questions: Iterable[Question], bodies: Mapping[str, str]) -> list[str]:
    """The ids of the questions whose phrase appears in none of their answering memories'
    ``bodies`` (an answer missing from ``bodies`` counts as not holding it). Empty: all good."""
    bad: list[str] = []
    for q in questions:
        if not any(contains_phrase(bodies.get(a, ""), q.phrase) for a in q.answers):
            bad.append(q.id)
    return bad
