"""The evaluation machinery: recall of ``search``, the scripted three-round loop, context packs.

Everything goes through the public domain verbs (:func:`app.domain.search.search`,
:func:`app.service.expand.expand_neighbors`, :func:`app.domain.slice.fetch_slice`,
:func:`app.domain.context.context_pack`), each in its own read transaction as the API runs it,
as one :class:`~app.core.reader.Reader`. Nothing here knows the corpus: the questions, the
reader and the whole bodies of the memories (for the cost ratio) are handed in.

**Recall.** For each question, ``search`` with the question as written and with its
:func:`~evaluation.questions.keywords` form (limit 5, default lifecycles). The rank of a
question is the 1-based position of the first result whose memory (the result itself, or a
passage's parent) is one of its answers; recall@k = share of questions ranked ≤ k.

**The loop** (:class:`LoopPlan`; model-free, the same script for every question):

1. ``search`` the question as written: ``search_limit`` results, previews of ``search_chars``;
   each result's name, preview and ``metadata.focus.excerpt`` (the query-centred excerpt of its
   memory's best-matching span, at most ``search_chars``) are returned text.
2. ``expand_neighbors`` from the memories of the top ``expand_seeds`` results, depth 1, limit
   ``expand_limit``, previews of ``expand_chars`` (default relationships, as an agent calls it).
3. ``fetch_slice`` (window ``slice_window``, ``slice_chars`` each) of the best-matching spans
   of the top results (``metadata.focus``: ``id``, then ``next``; without a focus, the result
   when it is a passage, else the first passage among its ``metadata.collapsed`` hits, else the
   memory from its start), ``slice_spans[r]`` of the result ranked r (5, 4, 3), the best one of
   the top ``best_hits`` (2) with window ``best_window`` at ``best_chars`` (it and the span after
   it); of a result that is the memory itself (its name or lead matched) whose best span is not
   its first, also its opening; and of the best ``slice_neighbors`` (0 since 2026-12-01: the
   slice never exposed what the spans did not) neighbors of round 2 that are neither a seed, a
   seed's own passage, nor already sliced (from their start). Each id is sliced once, and a span
   already returned in another's window is not sliced again.

*Returned text* = every name and content (preview, neighbor preview, span) the three rounds
returned; a question is *exposed* when its answer phrase appears in it
(:func:`~evaluation.questions.contains_phrase`), and the round that first exposed it is
kept. *Cost* = returned characters ÷ the whole-body characters of the memories the loop touched
(every memory a result, a neighbor or a span belongs to); also given against the whole body of
the question's first answer.

**Context.** ``context_pack`` of the question as the goal, default bounds: the size of the
whole JSON response (characters), its wall time (ms), and whether the Markdown holds the phrase.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import read_tx
from app.core.errors import NotFound
from app.core.reader import Reader
from app.domain.context import context_pack
from app.domain.schemas import ContextRequest, ExpandRequest, SearchRequest, SliceRequest
from app.domain.search import SearchSettings, search
from app.domain.slice import fetch_slice
from app.service.expand import expand_neighbors
from evaluation.questions import Question, contains_phrase, keywords

RECALL_DEPTH = 5


@dataclass(frozen=True)
class LoopPlan:
    """The bounds of the scripted loop (see the module docstring); the same for every question.
    The first plan (window 3 of 3,000 characters around the first collapsed hit of the top 2
    results) was fixed before any figure was measured; this one replaced it on 2026-11-30 after
    the diagnosis in docs/eval.md (search's ``metadata.focus``); the best span's window of 2
    was added the same day (measured on every set before it was kept: docs/eval.md)."""

    search_limit: int = 5
    search_chars: int = 300
    expand_seeds: int = 3
    expand_limit: int = 8
    expand_chars: int = 100
    slice_spans: tuple[int, ...] = (5, 4, 3)
    """The best-matching spans read of each top result, by rank (``metadata.focus``: ``id``,
    then ``next``): the best-ranked memory is the answer most often, so it gets the most."""
    slice_neighbors: int = 0
    slice_window: int = 1
    slice_chars: int = 1500
    best_window: int = 2
    """The window of the best span of each of the top ``best_hits`` results (it and the span
    after it: an example or a code block often follows the prose that matched), at
    ``best_chars`` for the whole window."""
    best_hits: int = 2
    best_chars: int = 3000
    promoted_opening: bool = True
    """Whether round 3 also reads the opening of a result search promoted for its edge to the
    result above it (``metadata.match.promoted_by``): it is listed for that relationship, not
    for the question's words, so its own spans' match says less than what it opens with."""

    @property
    def slice_hits(self) -> int:
        """How many of the top results round 3 widens."""
        return len(self.slice_spans)

    def __post_init__(self) -> None:
        if self.search_limit < RECALL_DEPTH:
            raise ValueError(
                f"search_limit must be at least {RECALL_DEPTH} (recall@5 reads round 1)"
            )
        if any(n < 1 for n in self.slice_spans):
            raise ValueError("every top result's slice_spans must be at least 1")


@dataclass
class QuestionResult:
    """What one question measured. Ranks are 1-based, ``None`` = not in the top
    :data:`RECALL_DEPTH`; chars are characters; times are milliseconds of wall time."""

    id: str
    hop: str | None
    rank_written: int | None
    rank_keywords: int | None
    exposed_round: int | None
    returned_chars: int
    touched_chars: int
    answer_chars: int
    touched: list[str] = field(default_factory=list)
    search_ms: float = 0.0
    context_chars: int | None = None
    context_ms: float | None = None
    context_exposed: bool | None = None
    rank_hop_from: int | None = None


def answer_rank(result_memories: Sequence[str], answers: Sequence[str]) -> int | None:
    """1-based position of the first of ``result_memories`` (each result's memory id) that is
    one of ``answers``; None when none is."""
    wanted = set(answers)
    for n, memory in enumerate(result_memories, start=1):
        if memory in wanted:
            return n
    return None


def recall_at(ranks: Sequence[int | None], k: int) -> float:
    """Share (0..1) of ``ranks`` that are ≤ ``k``; 0.0 for no ranks."""
    if not ranks:
        return 0.0
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def _memory_of(item: Any) -> str:
    return str(item.parent_entity_id or item.id)


async def _search_memories(
    engine: AsyncEngine,
    reader: Reader,
    query: str,
    *,
    limit: int,
    chars: int,
    pipeline: SearchSettings | None = None,
) -> tuple[Any, float]:
    started = time.perf_counter()
    async with read_tx(engine) as conn:
        response = await search(
            conn,
            reader,
            SearchRequest(query=query, limit=limit, content_max_chars=chars),
            pipeline=pipeline,
        )
    return response, (time.perf_counter() - started) * 1000


async def run_loop(
    engine: AsyncEngine,
    reader: Reader,
    question: Question,
    *,
    bodies: Mapping[str, str],
    plan: LoopPlan = LoopPlan(),
    pipeline: SearchSettings | None = None,
) -> QuestionResult:
    """Rank ``question`` (as written and as keywords) and run the three-round loop for it.

    ``bodies``: the whole body of every memory by id (missing ids count 0 characters);
    ``pipeline``: search's settings (default: the service's).
    Returns the question's :class:`QuestionResult` (context fields left None).
    """
    texts: list[str] = []
    touched: list[str] = []

    def touch(memory: str) -> None:
        if memory not in touched:
            touched.append(memory)

    def exposed() -> bool:
        return contains_phrase("\n".join(texts), question.phrase)

    exposed_round: int | None = None

    # round 1: search the question as written
    found, search_ms = await _search_memories(
        engine,
        reader,
        question.question,
        limit=plan.search_limit,
        chars=plan.search_chars,
        pipeline=pipeline,
    )
    results = found.results
    found_memories = [_memory_of(r) for r in results][:RECALL_DEPTH]
    rank_written = answer_rank(found_memories, question.answers)
    rank_hop_from = answer_rank(found_memories, [question.hop_from]) if question.hop_from else None
    for r in results:
        texts += [r.name, r.content, _excerpt(r)]
        touch(_memory_of(r))
    if exposed():
        exposed_round = 1

    # round 2: expand the top memories
    seeds: list[str] = []
    for r in results:
        if len(seeds) < plan.expand_seeds and _memory_of(r) not in seeds:
            seeds.append(_memory_of(r))
    neighbors: list[Any] = []
    if seeds:
        async with read_tx(engine) as conn:
            expanded = await expand_neighbors(
                conn,
                reader,
                ExpandRequest(
                    entity_ids=seeds,
                    depth=1,
                    limit=plan.expand_limit,
                    content_max_chars=plan.expand_chars,
                ),
            )
        neighbors = list(expanded.neighbors)
        for n in neighbors:
            texts += [n.name, n.content]
            touch(_memory_of(n))
    if exposed_round is None and exposed():
        exposed_round = 2

    # round 3: widen the best passages
    targets: list[str] = []
    bests: set[str] = set()
    for rank, r in enumerate(results[: plan.slice_hits]):
        best = _best_passage(r)
        targets.append(best)
        if rank < plan.best_hits:
            bests.add(best)
        targets += _next_spans(r)[: plan.slice_spans[rank] - 1]
        if _opening_too(r, best):
            targets.append(str(r.id))
        elif plan.promoted_opening and _promoted(r) and _focus_index(r) != 0:
            targets.append(_memory_of(r))
    sliced_memories = {_memory_of(r) for r in results[: plan.slice_hits]}
    picked = 0
    for n in neighbors:
        if picked >= plan.slice_neighbors:
            break
        memory = _memory_of(n)
        if memory in seeds or memory in sliced_memories:
            continue
        targets.append(n.id)
        sliced_memories.add(memory)
        picked += 1
    returned: set[str] = set()  # spans already returned (a best span's window holds its next)
    for target in dict.fromkeys(targets):
        if target in returned:
            continue
        try:
            async with read_tx(engine) as conn:
                window = await fetch_slice(
                    conn,
                    reader,
                    SliceRequest(
                        entity_id=target,
                        window=plan.best_window if target in bests else plan.slice_window,
                        content_max_chars=(
                            plan.best_chars if target in bests else plan.slice_chars
                        ),
                    ),
                )
        except NotFound:  # pragma: no cover - read in the same rounds; a concurrent edit only
            continue
        touch(window.parent_id)
        for p in window.passages:
            texts += [p.name, p.content]
            if not p.truncated:  # a span cut short by the window's budget is sliced again
                returned.add(p.id)
    if exposed_round is None and exposed():
        exposed_round = 3

    keyword_found, _ = await _search_memories(
        engine, reader, keywords(question.question), limit=RECALL_DEPTH, chars=0, pipeline=pipeline
    )
    rank_keywords = answer_rank([_memory_of(r) for r in keyword_found.results], question.answers)
    return QuestionResult(
        id=question.id,
        hop=question.hop_relationship,
        rank_written=rank_written,
        rank_keywords=rank_keywords,
        exposed_round=exposed_round,
        returned_chars=sum(len(t) for t in texts),
        touched_chars=sum(len(bodies.get(m, "")) for m in touched),
        answer_chars=len(bodies.get(question.answers[0], "")),
        touched=touched,
        search_ms=round(search_ms, 2),
        rank_hop_from=rank_hop_from,
    )


def _opening_too(result: Any, best: str) -> bool:
    """Whether round 3 also widens ``result``'s memory from its start: when the result is the
    memory itself (its name or lead matched, so its opening is evidence too) and its best span
    is not already that opening."""
    if result.parent_entity_id or best == str(result.id):
        return False
    focus = result.metadata.get("focus") or {}
    return focus.get("passage_index") not in (None, 0)


def _focus_index(result: Any) -> int | None:
    """The passage index of ``result``'s best-matching span (None: no focus, or never cut)."""
    index = (result.metadata.get("focus") or {}).get("passage_index")
    return int(index) if index is not None else None


def _promoted(result: Any) -> bool:
    """Whether search listed ``result`` for its edge to the result above it."""
    return bool((result.metadata.get("match") or {}).get("promoted_by"))


def _next_spans(result: Any) -> list[str]:
    """A search result's next best-matching spans (``metadata.focus.next``), best first."""
    return [str(i) for i in (result.metadata.get("focus") or {}).get("next") or ()]


def _excerpt(result: Any) -> str:
    """A search result's query-focused excerpt (``metadata.focus.excerpt``; "" when none)."""
    return str((result.metadata.get("focus") or {}).get("excerpt") or "")


def _best_passage(result: Any) -> str:
    """The id to widen a search result around: its ``metadata.focus`` span (the memory's span
    that best matches the query); without one, itself when a passage; else the best of its
    collapsed hits that is a passage of it; else the memory (sliced from its start)."""
    focus = result.metadata.get("focus")
    if focus and focus.get("id"):
        return str(focus["id"])
    if result.parent_entity_id:
        return str(result.id)
    for other in result.metadata.get("collapsed") or ():
        if other != result.id:
            return str(other)
    return str(result.id)


async def run_context(
    engine: AsyncEngine,
    reader: Reader,
    question: Question,
    result: QuestionResult,
    pipeline: SearchSettings | None = None,
) -> None:
    """Fill ``result``'s context fields: the default pack of the question as its goal."""
    started = time.perf_counter()
    async with read_tx(engine) as conn:
        pack = await context_pack(
            conn, reader, ContextRequest(goal=question.question), pipeline=pipeline
        )
    result.context_ms = round((time.perf_counter() - started) * 1000, 2)
    result.context_chars = len(pack.model_dump_json())
    result.context_exposed = contains_phrase(pack.markdown, question.phrase)


async def evaluate(
    engine: AsyncEngine,
    reader: Reader,
    questions: Sequence[Question],
    *,
    bodies: Mapping[str, str],
    plan: LoopPlan = LoopPlan(),
    with_context: bool = True,
    pipeline: SearchSettings | None = None,
) -> list[QuestionResult]:
    """Run every question (in order) through :func:`run_loop` and, unless told not to,
    :func:`run_context`, with search's settings ``pipeline`` (default: the service's)."""
    out: list[QuestionResult] = []
    for q in questions:
        result = await run_loop(engine, reader, q, bodies=bodies, plan=plan, pipeline=pipeline)
        if with_context:
            await run_context(engine, reader, q, result, pipeline)
        out.append(result)
    return out


def _percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """The figures of one question set: counts, recall@1/@5 (as written, as keywords; and for
    the hop questions alone), loop exposure (share exposed, by round), cost ratios, and context
    size and time. Shares are 0..1, rounded to 4 places; times in ms."""
    written = [r.rank_written for r in results]
    kw = [r.rank_keywords for r in results]
    hops = [r for r in results if r.hop]
    exposed = [r for r in results if r.exposed_round is not None]
    returned = sum(r.returned_chars for r in results)
    touched = sum(r.touched_chars for r in results)
    answer = sum(r.answer_chars for r in results)
    per_q = [r.returned_chars / r.touched_chars for r in results if r.touched_chars]
    ctx_chars = [r.context_chars for r in results if r.context_chars is not None]
    ctx_ms = [r.context_ms for r in results if r.context_ms is not None]
    ctx_exposed = [r for r in results if r.context_exposed]

    def share(n: int) -> float:
        return round(n / len(results), 4) if results else 0.0

    return {
        "questions": len(results),
        "hop_questions": len(hops),
        "recall_at_1_written": round(recall_at(written, 1), 4),
        "recall_at_5_written": round(recall_at(written, 5), 4),
        "recall_at_1_keywords": round(recall_at(kw, 1), 4),
        "recall_at_5_keywords": round(recall_at(kw, 5), 4),
        "hop_recall_at_5_written": round(recall_at([r.rank_written for r in hops], 5), 4),
        "hop_from_recall_at_5_written": round(recall_at([r.rank_hop_from for r in hops], 5), 4),
        "exposure": share(len(exposed)),
        "exposure_by_round": {
            str(n): share(sum(1 for r in results if r.exposed_round and r.exposed_round <= n))
            for n in (1, 2, 3)
        },
        "hop_exposure": round(len([r for r in hops if r.exposed_round]) / len(hops), 4)
        if hops
        else None,
        "returned_chars_mean": round(returned / len(results)) if results else 0,
        "cost_vs_touched": round(returned / touched, 4) if touched else None,
        "cost_vs_touched_median": round(statistics.median(per_q), 4) if per_q else None,
        "cost_vs_answer": round(returned / answer, 4) if answer else None,
        "context_chars_max": max(ctx_chars) if ctx_chars else None,
        "context_chars_median": round(statistics.median(ctx_chars)) if ctx_chars else None,
        "context_ms_p50": _percentile(ctx_ms, 50),
        "context_ms_p95": _percentile(ctx_ms, 95),
        "context_exposure": share(len(ctx_exposed)) if ctx_chars else None,
        "search_ms_p50": _percentile([r.search_ms for r in results], 50),
    }


def as_dicts(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    """The per-question results as plain dicts (for the JSON report)."""
    return [asdict(r) for r in results]
