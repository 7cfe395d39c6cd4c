"""Asking the LoCoMo questions through the real ``search`` verb, beside the grep baseline.

Every question as written over one haystack (every session of every conversation, limit 10):
recall@5, recall@10 and MRR per category and for 1-4 (:mod:`evaluation.locomo`); the grep
baseline of the data README on the same bodies, in the same run. With ``project`` set to the
question's conversation, each empty page is checked: if a readable session of that project holds
a word of the question (the database's own word match), the page must say the bound cut it
(``filters.candidates_capped``); such a page that says nothing was cut is a *silent* empty page.
The acceptance wants none of the first kind at all: every word is a way in.

With ``with_context``, each question is also asked of ``context`` as its goal (default bounds),
and the pack's Markdown is checked for the question's evidence turns
(:func:`evaluation.locomo.exposed_turns`): per category, the mean share of a question's evidence
turns exposed and the share of questions with every one exposed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import read_tx
from app.core.reader import Reader
from app.domain.context import context_pack
from app.domain.schemas import ContextRequest, SearchRequest
from app.domain.search import SearchSettings, search
from evaluation import locomo

LIMIT = 10

# Whether a readable session of the project holds a word of the question (any lexeme of it).
HOLDS_WORD_SQL = text(
    """/* sibyl:eval.locomo_holds_word */
SELECT EXISTS (
    SELECT 1 FROM entities t
    WHERE t.org_id = :org AND t.project_id = :project
      AND t.search_tsv @@ CAST(replace(CAST(plainto_tsquery('english', :q) AS text), '&', '|')
                               AS tsquery)
) OR EXISTS (
    SELECT 1 FROM passages p JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
    WHERE p.org_id = :org AND t.project_id = :project AND p.parent_revision = t.revision
      AND p.search_tsv @@ CAST(replace(CAST(plainto_tsquery('english', :q) AS text), '&', '|')
                               AS tsquery)
) AS holds"""
)


@dataclass
class LocomoReport:
    """What one run over the LoCoMo questions measured."""

    search: dict[str, dict[str, float | int]]
    grep: dict[str, dict[str, float | int]] | None
    empty_pages: int | None = None
    empty_pages_holding_a_word: int | None = None
    silent_empty_pages: int | None = None
    search_ms_p50: float | None = None
    per_question: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, dict[str, float | int]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON."""
        return {
            "search": self.search,
            "grep": self.grep,
            "empty_pages": self.empty_pages,
            "empty_pages_holding_a_word": self.empty_pages_holding_a_word,
            "silent_empty_pages": self.silent_empty_pages,
            "search_ms_p50": self.search_ms_p50,
            "per_question": self.per_question,
            "context": self.context,
        }


async def run(
    engine: AsyncEngine,
    reader: Reader,
    sessions: Sequence[locomo.Session],
    questions: Sequence[locomo.LocomoQuestion],
    *,
    pipeline: SearchSettings | None = None,
    baseline: bool = True,
    per_project: bool = True,
    with_context: bool = False,
) -> LocomoReport:
    """Ask every question (see the module docstring); ``baseline``: also score the grep
    baseline; ``per_project``: also ask within each question's conversation and count the
    empty pages; ``with_context``: also measure the context pack of each question."""
    rows: list[tuple[int, locomo.Scored]] = []
    grep_rows: list[tuple[int, locomo.Scored]] = []
    documents = [(s.id, s.body) for s in sessions]
    per_question: list[dict[str, Any]] = []
    times: list[float] = []
    empty = holding = silent = 0
    packs: list[tuple[int, tuple[float, bool]]] = []  # category, (share exposed, all of it)
    for q in questions:
        started = time.perf_counter()
        async with read_tx(engine) as conn:
            page = await search(
                conn, reader, SearchRequest(query=q.question, limit=LIMIT), pipeline=pipeline
            )
        times.append((time.perf_counter() - started) * 1000)
        got = [r.parent_entity_id or r.id for r in page.results]
        scored = locomo.score(q.answers, got)
        rows.append((q.category, scored))
        per_question.append({"id": q.id, "category": q.category, "returned": got[:LIMIT]})
        if baseline:
            grep_rows.append(
                (
                    q.category,
                    locomo.score(q.answers, locomo.grep_rank(q.question, documents, LIMIT)),
                )
            )
        if with_context and q.evidence:
            async with read_tx(engine) as conn:
                pack = await context_pack(
                    conn, reader, ContextRequest(goal=q.question), pipeline=pipeline
                )
            shown = locomo.exposed_turns(q.evidence, pack.markdown)
            packs.append((q.category, (shown / len(q.evidence), shown == len(q.evidence))))
            per_question[-1]["context_evidence_exposed"] = shown
        if per_project:
            async with read_tx(engine) as conn:
                own = await search(
                    conn,
                    reader,
                    SearchRequest(
                        query=q.question, limit=LIMIT, project=locomo.project_of(q.conversation)
                    ),
                    pipeline=pipeline,
                )
                if not own.results:
                    empty += 1
                    holds = (
                        await conn.execute(
                            HOLDS_WORD_SQL,
                            {
                                "org": locomo.ORG,
                                "project": locomo.project_of(q.conversation),
                                "q": q.question,
                            },
                        )
                    ).scalar_one()
                    if holds:
                        holding += 1
                        if not own.filters["candidates_capped"]:
                            silent += 1
    times.sort()
    return LocomoReport(
        search=locomo.summarize(rows),
        grep=locomo.summarize(grep_rows) if baseline else None,
        empty_pages=empty if per_project else None,
        empty_pages_holding_a_word=holding if per_project else None,
        silent_empty_pages=silent if per_project else None,
        search_ms_p50=round(times[len(times) // 2], 2) if times else None,
        per_question=per_question,
        context=_context_summary(packs) if with_context else None,
    )


def _context_summary(
    packs: Sequence[tuple[int, tuple[float, bool]]],
) -> dict[str, dict[str, float | int]]:
    """Per category (:func:`evaluation.locomo.by_category`): ``{"questions", "evidence_exposed"
    (the mean share of a question's evidence turns in its pack), "all_exposed" (the share of
    questions with every evidence turn in it)}``."""
    return {
        name: {
            "questions": len(g),
            "evidence_exposed": round(sum(x for x, _ in g) / len(g), 4),
            "all_exposed": round(sum(1 for _, w in g if w) / len(g), 4),
        }
        for name, g in locomo.by_category(packs).items()
    }
