"""The LoCoMo conversations as memories, their questions, and the grep baseline.

LoCoMo ("Evaluating Very Long-Term Conversational Memory of LLM Agents", Maharana et al., 2024)
holds long two-person chats in sessions, with questions whose evidence turns name the sessions
that answer them. This module turns a folder of its ``conv-NN.json`` files into import records
and questions, the way the data README of ``../shared/data/locomo`` says peers measure it:

- **Memories.** One ``note`` per session, id ``locomo_<conv>_s<N>``, in a project of its own
  conversation (``proj_locomo_<conv>``, org-visible), named ``Chat session at <date>``; its body
  is the Markdown shape of the README: a ``# Chat session at <date>`` heading, a
  ``## Conversation`` heading, then one ``- **Speaker:** text`` line per turn. Only the dialogue:
  the machine-written observations, summaries and event lists are left out, and so are the image
  fields of a turn (its caption is not a word anyone said).
- **Questions.** Every ``qa`` item as written, with its category (1-5) and its answering
  sessions: the sessions its evidence turns ``D<N>:<turn>`` lie in (an evidence entry that names
  no session of the conversation is ignored; a question left with none is not asked).
- **Scores.** Over one haystack of every session: recall@k = the share of a question's answering
  sessions among the first k distinct sessions returned; MRR = 1 / the rank of the first
  answering session (0 when none is returned).
- **Grep baseline** (:func:`grep_rank`): the README's floor, computed on the same bodies.
- **Context exposure** (:func:`exposed_turns`): the share of a question's evidence turns whose
  opening (:data:`EVIDENCE_CHARS` characters, whitespace and case folded) is in the Markdown of
  the ``context`` pack asked with the question as its goal.

Nothing here talks to the database; :mod:`evaluation.locomo_run` imports and asks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evaluation.questions import normalize_text

ORG = "org_locomo"
READER = "user_locomo_reader"
OWNER = "user_locomo_owner"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's question categories as its repository numbers them (5: the answer is not in the
conversation as asked; reported apart from 1-4, as peers do)."""

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"^D(\d+):\d+$")
EVIDENCE_CHARS = 120
"""How much of an evidence turn's text must be in a context pack for the turn to count as
exposed: its opening, enough to tell turns apart, so that a turn whose end a pack cut still
counts."""


@dataclass(frozen=True)
class Session:
    """One session of one conversation, as a memory."""

    conversation: str
    number: int
    date: str
    body: str

    @property
    def id(self) -> str:
        """The memory id: ``locomo_<conversation>_s<number>`` (number zero-padded to 2)."""
        return f"locomo_{self.conversation}_s{self.number:02d}"

    @property
    def project(self) -> str:
        """The project of the session's conversation."""
        return project_of(self.conversation)


@dataclass(frozen=True)
class LocomoQuestion:
    """One question as written, with its category and answering session ids."""

    id: str
    conversation: str
    question: str
    category: int
    answers: tuple[str, ...]
    evidence: tuple[str, ...] = ()
    """The texts of its evidence turns, whitespace-folded as in the session bodies."""


def project_of(conversation: str) -> str:
    """The project id of a conversation (``conv-26`` → ``proj_locomo_conv_26``)."""
    return "proj_locomo_" + conversation.replace("-", "_")


def _conversation_name(path: Path) -> str:
    return path.stem


def turn_text(turn: dict[str, Any]) -> str:
    """What a turn said, every whitespace run one space (as session bodies and evidence hold
    it)."""
    return " ".join(str(turn.get("text", "")).split())


def session_body(date: str, turns: Sequence[dict[str, Any]]) -> str:
    """The Markdown body of one session (see the module docstring)."""
    lines = [f"# Chat session at {date}", "", "## Conversation", ""]
    for turn in turns:
        lines.append(f"- **{turn['speaker']}:** {turn_text(turn)}")
    return "\n".join(lines) + "\n"


def load_conversation(path: Path) -> tuple[list[Session], list[LocomoQuestion]]:
    """The sessions and questions of one ``conv-NN.json`` file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    name = _conversation_name(path)
    sessions: list[Session] = []
    for key, turns in data.items():
        m = _SESSION_KEY.match(key)
        if not m or not isinstance(turns, list) or not turns:
            continue
        n = int(m.group(1))
        date = str(data.get(f"{key}_date_time", "")).strip()
        sessions.append(Session(name, n, date, session_body(date, turns)))
    sessions.sort(key=lambda s: s.number)
    by_number = {s.number: s.id for s in sessions}
    said = {
        str(turn.get("dia_id", "")): turn_text(turn)
        for key, turns in data.items()
        if _SESSION_KEY.match(key) and isinstance(turns, list)
        for turn in turns
        if isinstance(turn, dict)
    }
    questions: list[LocomoQuestion] = []
    for i, qa in enumerate(data.get("qa", [])):
        answers: list[str] = []
        for ev in qa.get("evidence", []):
            m = _EVIDENCE.match(str(ev).strip())
            sid = by_number.get(int(m.group(1))) if m else None
            if sid and sid not in answers:
                answers.append(sid)
        if not answers:
            continue
        questions.append(
            LocomoQuestion(
                id=f"{name}:q{i + 1:03d}",
                conversation=name,
                question=str(qa["question"]),
                category=int(qa["category"]),
                answers=tuple(answers),
                evidence=tuple(
                    said[e]
                    for e in dict.fromkeys(str(ev).strip() for ev in qa.get("evidence", []))
                    if said.get(e)
                ),
            )
        )
    return sessions, questions


def exposed_turns(evidence: Sequence[str], markdown: str) -> int:
    """How many of ``evidence`` (turn texts) have their first :data:`EVIDENCE_CHARS` characters
    in ``markdown``, both whitespace and case folded."""
    text = normalize_text(markdown)
    return sum(1 for t in evidence if normalize_text(t)[:EVIDENCE_CHARS] in text)


def load(folder: Path) -> tuple[list[Session], list[LocomoQuestion]]:
    """Every ``conv-*.json`` of ``folder``, in name order. ``FileNotFoundError`` when the folder
    holds none."""
    paths = sorted(folder.glob("conv-*.json"))
    if not paths:
        raise FileNotFoundError(f"no conv-*.json in {folder}")
    sessions: list[Session] = []
    questions: list[LocomoQuestion] = []
    for path in paths:
        s, q = load_conversation(path)
        sessions += s
        questions += q
    return sessions, questions


def records(sessions: Iterable[Session]) -> Iterator[dict[str, Any]]:
    """The import records (the import format, rule: import-idempotent) of ``sessions``: the org, an
    owner and a reader (a member of the org who reads its org-visible projects), a project per
    conversation, a ``note`` per session."""
    sessions = list(sessions)
    yield {"kind": "org", "id": ORG, "name": "LoCoMo conversations"}
    yield {"kind": "user", "id": OWNER, "org": ORG, "handle": "locomo_owner", "role": "owner"}
    yield {"kind": "user", "id": READER, "org": ORG, "handle": "locomo_reader", "role": "member"}
    for conv in dict.fromkeys(s.conversation for s in sessions):
        yield {
            "kind": "project",
            "id": project_of(conv),
            "org": ORG,
            "name": f"LoCoMo {conv}",
            "visibility": "org",
        }
    for s in sessions:
        yield {
            "kind": "entity",
            "id": s.id,
            "org": ORG,
            "type": "note",
            "name": f"Chat session at {s.date}",
            "content": s.body,
            "project": s.project,
            "scope": "project",
            "owner": OWNER,
        }


# The grep baseline of the data README: terms = the question lower-cased, split on
# [a-z0-9][a-z0-9'-]*, minus about 45 function words.
GREP_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "was",
        "were",
        "are",
        "be",
        "been",
        "what",
        "when",
        "where",
        "who",
        "whom",
        "which",
        "why",
        "how",
        "did",
        "do",
        "does",
        "has",
        "have",
        "had",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "with",
        "by",
        "and",
        "or",
        "but",
        "it",
        "its",
        "he",
        "she",
        "they",
        "his",
        "her",
        "their",
        "this",
        "that",
    ]
)
"""The baseline's 45 function words (the README: "about 45 ... a, an, the, is, was, what, when,
did, do, ...")."""
_GREP_TERM = re.compile(r"[a-z0-9][a-z0-9'-]*")


def grep_terms(question: str) -> list[str]:
    """The grep baseline's terms of ``question`` (each once, in order)."""
    found = _GREP_TERM.findall(question.lower())
    return list(dict.fromkeys(t for t in found if t not in GREP_STOP_WORDS))


def grep_score(terms: Sequence[str], text: str) -> float:
    """The grep baseline's score of one lower-cased document: each term found as a substring
    adds 1 + ln(occurrences); the sum times (terms found / terms)²."""
    if not terms:
        return 0.0
    total, found = 0.0, 0
    for t in terms:
        n = text.count(t)
        if n:
            total += 1.0 + math.log(n)
            found += 1
    return total * (found / len(terms)) ** 2


def grep_rank(question: str, documents: Sequence[tuple[str, str]], limit: int) -> list[str]:
    """The ids of the ``limit`` best ``documents`` (``(id, text)``, in document order) for
    ``question`` by :func:`grep_score` (ties in document order); documents scoring 0 are not
    returned."""
    terms = grep_terms(question)
    scored = [(grep_score(terms, text.lower()), i, doc) for i, (doc, text) in enumerate(documents)]
    ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
    return [doc for _, _, doc in ranked[:limit]]


@dataclass(frozen=True)
class Scored:
    """One question's figures: recall@5, recall@10 and reciprocal rank."""

    recall_5: float
    recall_10: float
    rr: float


def score(answers: Sequence[str], returned: Sequence[str]) -> Scored:
    """recall@5, recall@10 and the reciprocal rank of ``returned`` (memory ids, best first; a
    repeat counts once) against ``answers``."""
    distinct = list(dict.fromkeys(returned))
    truth = set(answers)

    def recall(k: int) -> float:
        return len(truth & set(distinct[:k])) / len(truth)

    rank = next((i for i, m in enumerate(distinct, start=1) if m in truth), None)
    return Scored(recall(5), recall(10), 1.0 / rank if rank else 0.0)


T = TypeVar("T")


def by_category(rows: Sequence[tuple[int, T]]) -> dict[str, list[T]]:
    """``rows`` (category, item) grouped per category (``"1"``..``"5"``, in order) and for
    ``"1-4"`` (the headline, last); a group without items is left out."""
    groups: dict[str, list[T]] = {}
    for category, item in rows:
        groups.setdefault(str(category), []).append(item)
        if category in (1, 2, 3, 4):
            groups.setdefault("1-4", []).append(item)
    return {
        name: groups[name] for name in [*sorted(groups.keys() - {"1-4"}), "1-4"] if name in groups
    }


def summarize(rows: Sequence[tuple[int, Scored]]) -> dict[str, dict[str, float | int]]:
    """Mean recall@5, recall@10 and MRR per category (:func:`by_category`):
    ``{category: {"questions", "recall_at_5", "recall_at_10", "mrr"}}``."""
    return {
        name: {
            "questions": len(g),
            "recall_at_5": round(sum(s.recall_5 for s in g) / len(g), 4),
            "recall_at_10": round(sum(s.recall_10 for s in g) / len(g), 4),
            "mrr": round(sum(s.rr for s in g) / len(g), 4),
        }
        for name, g in by_category(rows).items()
    }
