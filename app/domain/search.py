"""``search``: find a starting set by words, id or name (contract §8, issues 4 and 12).

The rules live here and in :mod:`app.domain.terms` (the query's words and their weights); the
statement in :mod:`app.repo.search`.

**Lanes.** Two ranked lists of candidates, each already passed through the read rule (§2) and
the request's filters (lifecycle, types, project) before it is capped or ranked:

- *full text*: a memory or passage holding **any** of the query's words (at most 12, the rarest;
  stemmed by the ``english`` configuration, its stop words dropped) is a candidate. Documents are
  a memory's name (field A) with its body, or only a 600-character lead when passages carry the
  body (every cut tiles the whole body), and a passage's breadcrumb (A) with its text. Ranked by
  BM25: score = Σ over matched words of idf(w) × tf (k1 + 1) / (tf + k1 (1 − b + b × len /
  avg_len)), where tf counts a word's occurrences (one in a name or breadcrumb counts 3), len is
  the document's number of distinct lexemes, k1 = 1.2, b = 0.75; idf(w) and avg_len come from
  the document counts of the audiences the reader reads (its readable projects' project-scoped
  memories, the org's org-scoped ones; never a private memory), else from fixed English word
  frequencies with avg_len = 100 (:mod:`app.domain.terms`, :func:`weigh`): every row a reader's
  statistics count is one it may read, so rows a reader cannot read cannot move, score or
  reorder the rows they can (absent ≡ denied, §2). A document matching more words, rarer words,
  or a word in its name, ranks higher; a long memory competes through its name, its lead and its
  passages, so the passage holding the answer outranks the memory's opening.
- *exact*: the memory or passage whose id is the query; then memories whose name, or whose title
  after a conventional prefix (``PEP 8: ``, ``KEP-753: ``), equals the query, starts with it at
  a word boundary, or merely starts with it (case-insensitive), in that order, then by name.

**Fusion.** Reciprocal rank fusion: score(d) = Σ over the lanes d is in of 1 / (k + rank(d)),
k = 60 (:data:`app.domain.policy.RRF_K`); ties: a hit of the exact lane first, then id
(:func:`fused_order`). Then a memory and its passages are folded
into their best-scoring hit (one result per memory, so a long memory's spans cannot crowd a
page), and the others are listed, best first, in that result's ``metadata.collapsed``. The
best :data:`~app.domain.policy.SEARCH_RERANK` (40) memories then have every current span scored
and compete with their best span's score (:func:`rerank`; ``metadata.match.span_rank``). Paging
(``offset``, ``limit``) runs over this list, so pages have no gaps and ``has_more`` counts
nothing a reader cannot see.

**Bounded cost, relevance first.** With ``cap`` = ``SIBYL_SEARCH_CANDIDATE_CAP`` (default
200): candidates are found through the query's words by rarity, every word still counting in
each candidate's score (:data:`SCAN`): every word finds up to ``cap`` readable memories whose
*name* holds it (``head_tsv``: the shortest, strongest evidence), the
:data:`~app.domain.policy.SEARCH_BREADCRUMB_WORDS` (3) rarest find up to ``cap`` passages whose
breadcrumb holds them, and the :data:`~app.domain.policy.SEARCH_BODY_WORDS` (1) rarest up to
``cap`` matches anywhere, per table. A document holding none of the rarest words in its text can
only score through commoner ones. A rare word's matches are all kept; only a word with more than
``cap`` readable matches of one kind is sampled, among rows of equal standing for it (the order
of its index scan). Of the candidates so found, the ``cap`` found by the heaviest words (Σ idf, a
head find counting 3 times; then id) are scored. What a cap drops are candidates holding fewer
and commoner query words, never chosen by recency. ``filters.candidates_capped`` says when any
scan or the pool hit its cap, or when words were left out of the body scan
(``filters.scan_words`` echoes :data:`SCAN`). The exact lane reads the name and title indexes in
order and stops after ``cap + 1`` rows each.

Measured on the PEP corpus (736 memories, 11,595 passages), PostgreSQL 15, 2 shared cores, as
the org admin: ``docs/search.md``.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import BadRequest
from app.core.settings import Settings, get_settings
from app.domain import policy, terms
from app.domain.excerpt import excerpt
from app.domain.passages import passage_name
from app.domain.preview import ELLIPSIS, preview_prefix
from app.domain.reader import Reader
from app.domain.schemas import SearchRequest, SearchResponse, SearchResult
from app.domain.spans import MAX_SPANS
from app.domain.validation import normalize_names, normalize_project
from app.repo import search as search_repo
from app.repo import term_stats

__all__ = [
    "EXACT",
    "FULLTEXT",
    "Ranked",
    "SearchRequest",
    "find_candidates",
    "focus_by_ask",
    "fold",
    "fuse",
    "fused_order",
    "hit_fields",
    "match_metadata",
    "normalize_lifecycles",
    "normalize_query",
    "promote",
    "promote_first",
    "promotion_of",
    "rerank",
    "rrf_score",
    "score_spans",
    "search",
    "weigh",
    "weigh_all",
]

_LIFECYCLES = ("active", "superseded", "retired")
SCAN = search_repo.Scan(
    names=terms.MAX_WORDS,
    breadcrumbs=policy.SEARCH_BREADCRUMB_WORDS,
    bodies=policy.SEARCH_BODY_WORDS,
)
"""Where the query's words find candidates: every word in memory names, the 3 rarest in
breadcrumbs, the rarest anywhere (see the module docstring)."""


FULLTEXT = "fulltext"
EXACT = "exact"


@dataclass(frozen=True)
class Promotion:
    """How a promoted result is linked to the best result: the best result's memory id and the
    hop from it (``relationship``, ``direction`` ``outgoing`` or ``incoming``)."""

    id: str
    relationship: str
    direction: str


@dataclass(frozen=True)
class Ranked:
    """A candidate with its rank in each lane it is in (1 = best) and its fused score.

    ``type`` is the memory's type (a passage's parent's); ``text_rank`` its BM25 score in the
    full-text lane (> 0; None: no full-text match).
    """

    id: str
    parent_id: str | None
    type: str
    lanes: dict[str, int]
    text_rank: float | None
    score: float
    span_rank: float | None = None
    """The BM25 score of the memory's best span, when :func:`rerank` scored its spans."""
    promoted_by: Promotion | None = None
    """Set when :func:`promote` listed it right after the best result (its neighbour)."""

    @property
    def memory_id(self) -> str:
        """The memory the hit belongs to: itself, or a passage's parent."""
        return self.parent_id or self.id


def normalize_query(value: str, *, field: str) -> str:
    """The query without the characters that show nothing at its ends
    (:func:`app.domain.terms.strip_invisible`), so the exact lane meets ``task_a1`` in
    ``"\ufefftask_a1"`` as the word lane does (a trial: the memory it names was no result);
    ``BadRequest`` when nothing but such characters and lone combining marks is left (such a
    query answered 200 with no words, or an invisible one, while ``"  "`` answered 400;
    new-user trials) or longer than :data:`app.domain.policy.MAX_QUERY_CHARS` characters."""
    stripped = terms.strip_invisible(value)
    if all(unicodedata.category(c) in ("Mn", "Me") or terms.invisible(c) for c in stripped):
        raise BadRequest(f"{field} must be a non-blank string")
    if len(stripped) > policy.MAX_QUERY_CHARS:
        raise BadRequest(f"{field} must be at most {policy.MAX_QUERY_CHARS} characters")
    return stripped


def normalize_lifecycles(values: list[str] | None) -> list[str]:
    """The lifecycles to return: default ``active`` and ``superseded``; lower-cased, duplicates
    dropped, ``retired`` dropped (never returned). ``BadRequest`` for an unknown value, or when
    nothing but ``retired`` (or nothing at all) was named."""
    if values is None:
        return list(policy.SEARCH_LIFECYCLES)
    if len(values) > policy.MAX_NAMES:
        raise BadRequest(f"lifecycle may list at most {policy.MAX_NAMES} names")
    out: list[str] = []
    for value in values:
        name = value.strip().lower()
        if name not in _LIFECYCLES:
            raise BadRequest("lifecycle entries must be 'active' or 'superseded'")
        if name != "retired" and name not in out:
            out.append(name)
    if not out:
        raise BadRequest(
            "lifecycle must name 'active' or 'superseded' (retired memories are never returned)"
        )
    return out


def rrf_score(lanes: dict[str, int], k: int = policy.RRF_K) -> float:
    """Reciprocal rank fusion: Σ 1 / (k + rank) over the lanes a candidate is in."""
    return sum(1.0 / (k + rank) for rank in lanes.values())


def fused_order(r: Ranked) -> tuple[float, bool, str]:
    """The sort key of fused results: score, best first; of equal scores, a hit of the exact
    lane first (the query names it: its id, its name or title), then id (bytewise, as the
    database orders). Why the exact lane: a note that links ``[[task_0a1b2c3d4e5f]]`` ranks 1st
    in the full-text lane for that id, the task itself 1st in the exact lane, and by id alone
    the note came first (a new-user trial, 2026-12-03)."""
    return (-r.score, EXACT not in r.lanes, r.id)


def fuse(
    runs: list[tuple[str, list[search_repo.Candidate]]], k: int = policy.RRF_K
) -> list[Ranked]:
    """Fuse the lanes of one or more runs of the candidates statement, best first (ties:
    :func:`fused_order`).

    Each run is ``(name of its full-text lane, its candidates)``; every run computes the same
    exact lane, which is taken from the first (named :data:`EXACT`).
    """
    info: dict[str, search_repo.Candidate] = {}
    lanes: dict[str, dict[str, int]] = {}
    text_rank: dict[str, float] = {}
    for n, (lane, found) in enumerate(runs):
        for c in found:
            info.setdefault(c.id, c)
            mine = lanes.setdefault(c.id, {})
            if c.fulltext_rank is not None:
                mine[lane] = c.fulltext_rank
                if c.text_rank is not None:
                    text_rank.setdefault(c.id, c.text_rank)
            if n == 0 and c.exact_rank is not None:
                mine[EXACT] = c.exact_rank
    ranked = [
        Ranked(
            id=i,
            parent_id=info[i].parent_id,
            type=info[i].type,
            lanes=ranks,
            text_rank=text_rank.get(i),
            score=rrf_score(ranks, k),
        )
        for i, ranks in lanes.items()
        if ranks
    ]
    ranked.sort(key=fused_order)
    return ranked


def rerank(
    folded: list[tuple[Ranked, list[str]]], best_span: dict[str, float], k: int
) -> list[tuple[Ranked, list[str]]]:
    """The folded list with its first ``k`` memories re-ranked by their best span.

    ``best_span``: memory id → the BM25 score of its best-matching span over **all** its current
    spans (:func:`app.repo.search.focus`), for memories among the first ``k``. Each of those that
    is in the full-text lane gets the text score max(its hit's score, its best span's score), and
    the full-text ranks the ``k`` held are handed out again in that order (ties: id); the fused
    scores are recomputed (RRF with the exact lane, unchanged) and the whole list re-sorted
    (:func:`fused_order`). Why: the candidate scans find a passage only through its breadcrumb
    or the query's rarest word, so a memory whose answering passage holds the question's
    commoner words competed only through its name and lead (issue 12; docs/search.md). ``k`` is
    fixed (:data:`~app.domain.policy.SEARCH_RERANK`), never derived from a page, so every page
    is a slice of one total order."""
    head = folded[:k]
    texted = [r for r, _ in head if FULLTEXT in r.lanes]
    ranks = sorted(r.lanes[FULLTEXT] for r in texted)

    def text_score(r: Ranked) -> float:
        return max(r.text_rank or 0.0, best_span.get(r.memory_id, 0.0))

    order = sorted(texted, key=lambda r: (-text_score(r), r.id))
    new_rank = {r.id: rank for r, rank in zip(order, ranks, strict=True)}
    out: list[tuple[Ranked, list[str]]] = []
    for r, collapsed in head:
        if r.id in new_rank:
            lanes = {**r.lanes, FULLTEXT: new_rank[r.id]}
            r = Ranked(
                id=r.id,
                parent_id=r.parent_id,
                type=r.type,
                lanes=lanes,
                text_rank=r.text_rank,
                score=rrf_score(lanes),
                span_rank=best_span.get(r.memory_id),
            )
        out.append((r, collapsed))
    out += folded[k:]
    out.sort(key=lambda e: fused_order(e[0]))
    return out


def promote(
    folded: list[tuple[Ranked, list[str]]], neighbor: search_repo.Neighbor
) -> list[tuple[Ranked, list[str]]]:
    """``folded`` (not empty) with ``neighbor`` (one strong hop from the first entry's memory,
    :func:`promotion_of`) listed second: taken from where it was (its collapsed hits kept), or
    added when no lane found it, with the first entry's score (a tie the order breaks: it
    follows its source) and ``promoted_by`` set. Why: in a graph of decisions, what the best
    match depends on or was superseded by is the next thing a reader needs, and its own words
    often match the query only weakly (issue 12: "What replaced X, and ...?", "X requires which
    PEP?")."""
    first = folded[0][0]
    rest = [e for e in folded[1:] if e[0].memory_id != neighbor.id]
    found = [e for e in folded[1:] if e[0].memory_id == neighbor.id]
    base, collapsed = (
        found[0]
        if found
        else (
            Ranked(
                id=neighbor.id,
                parent_id=None,
                type=neighbor.type,
                lanes={},
                text_rank=None,
                score=0.0,
            ),
            [],
        )
    )
    by = Promotion(
        id=first.memory_id,
        relationship=neighbor.relationship,
        direction="outgoing" if neighbor.outgoing else "incoming",
    )
    moved = dataclasses.replace(base, score=first.score, promoted_by=by)
    return [folded[0], (moved, collapsed), *rest]


def promotion_arms() -> list[tuple[str, float, bool]]:
    """The hops :func:`promotion_of` takes, strongest first: ``(relationship, §4 weight,
    outgoing?)`` for every stored relationship of weight ≥
    :data:`~app.domain.policy.SEARCH_PROMOTE_MIN_WEIGHT` (0.90: DECIDES, DEPENDS_ON, REQUIRES,
    BLOCKS, SUPERSEDES, SUPPORTS, VALIDATED_BY, USES_PROCEDURE, IMPLEMENTED), one direction each:
    outgoing, as edges run from the dependent to what it rests on (§1: what the best match
    depends on, requires, decides, supports), except where a default walk never follows a
    relationship outgoing (SUPERSEDES, which runs from newer to older): incoming, its successor.
    A memory's dependents (DEPENDS_ON incoming) are one expand away, not promoted: a new-user
    trial found them the wrong next read in 3 of 5 promotions."""
    rules = policy.hop_rules(None)
    arms = [
        (rel, p.weight, rules.allows(rel, outgoing=True))
        for rel, p in policy.RELATIONSHIPS.items()
        if p.weight >= policy.SEARCH_PROMOTE_MIN_WEIGHT
        and rel not in (policy.MENTIONS, policy.SHARES_COMMUNITY)
    ]
    return sorted(arms, key=lambda a: (-a[1], a[0]))


PROMOTION_ARMS = promotion_arms()


async def promotion_of(
    conn: AsyncConnection,
    reader: Reader,
    memory_id: str,
    *,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    skip: list[str] | None = None,
) -> search_repo.Neighbor | None:
    """The neighbour of ``memory_id`` that :func:`promote` lists after it: its first one-hop
    neighbour over :data:`PROMOTION_ARMS` by weight, then active before superseded (of two
    successors, the one not itself replaced), then id, that passes the request's filters
    (lifecycle, types, project), one statement
    (``sibyl:search.promote``). Only memories ``reader`` may read are walked to, through the
    one read rule, so a hidden neighbour is passed over exactly as an absent one is. ``skip``:
    memories not to promote (listed above already). None when there is none."""
    return await search_repo.promoted(
        conn,
        reader_params=reader.params(),
        memory=memory_id,
        arms=PROMOTION_ARMS,
        lifecycles=lifecycles,
        types=types,
        project=project,
        skip=skip,
    )


async def promote_first(
    conn: AsyncConnection,
    reader: Reader,
    folded: list[tuple[Ranked, list[str]]],
    *,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
) -> list[tuple[Ranked, list[str]]]:
    """``folded`` (re-ranked, best first) with one neighbour promoted (:func:`promote`): the
    first result's (:func:`promotion_of`), listed second; when the first result has none, the
    second result's strongest other than the first result, listed third, right after it. At
    most one row moves, and only onto the first three. Why the second: a question that describes a
    memory by words another memory also holds (PEP 684's "subinterpreter ... GIL" question
    matched PEP 499 first) still gets what the memory it describes depends on (2026-12-03,
    ``docs/search.md``). One or two ``sibyl:search.promote`` statements."""
    if not folded:
        return folded
    first = await promotion_of(
        conn, reader, folded[0][0].memory_id, types=types, lifecycles=lifecycles, project=project
    )
    if first is not None:
        return promote(folded, first)
    if len(folded) < 2:
        return folded
    second = await promotion_of(
        conn,
        reader,
        folded[1][0].memory_id,
        types=types,
        lifecycles=lifecycles,
        project=project,
        skip=[folded[0][0].memory_id],  # listed first already: its next neighbour instead
    )
    if second is None:
        return folded
    return [folded[0], *promote(folded[1:], second)]


async def score_spans(
    conn: AsyncConnection,
    reader: Reader,
    memories: list[str],
    weighted: list[tuple[str, float]],
    scoring: search_repo.Scoring,
    *,
    per_memory: int = MAX_SPANS,
) -> dict[str, search_repo.Focus]:
    """``sibyl:search.focus`` for ``memories`` with the weighted words ``weighted`` (as
    :func:`weigh` gives them): each memory's spans holding a word, best BM25 first, at most
    ``per_memory`` (default: all), by memory id; a memory holding none is absent."""
    return await search_repo.focus(
        conn,
        reader_params=reader.params(),
        memories=memories,
        words=[w for w, _ in weighted],
        idfs=[idf for _, idf in weighted],
        per_memory=per_memory,
        scoring=scoring,
    )


async def focus_by_ask(
    conn: AsyncConnection,
    reader: Reader,
    memories: list[str],
    ask_weighted: list[tuple[str, float]],
    scoring: search_repo.Scoring,
) -> dict[str, search_repo.Focus]:
    """The focus of ``memories`` (the promoted rows' memories) chosen by the words of the
    question's ask only (:func:`app.domain.terms.asked`: the words after its last interrogative
    word, weighed as a query of their own, ``ask_weighted``, so a common ask word left out of
    the 12 the lane kept is back), spans in :func:`cover_order`. Empty when the query has no
    ask; a memory none of whose spans holds an ask word is absent (it keeps the focus of the
    whole query).

    Why: a promoted row is listed for its edge to the row above it, and the lead-in of a hop
    question ("The proposal that X builds on an earlier PEP; in that design, what does it mean
    when ...?") describes that row, not this one: scored with every word, its best spans were
    those repeating the lead-in (2026-12-03, ``docs/search.md``). Reads only the memories' own
    spans and the reader's statistics (§2)."""
    if not memories or not ask_weighted:
        return {}
    scored = await score_spans(conn, reader, memories, ask_weighted, scoring)
    return {
        m: dataclasses.replace(f, spans=cover_order(f.spans, policy.SEARCH_FOCUS_SPANS))
        for m, f in scored.items()
    }


def fold(ranked: list[Ranked]) -> list[tuple[Ranked, list[str]]]:
    """One entry per memory: its best-ranked hit (the memory or one of its passages), with the
    ids of its other hits, best first. Order is the order of each memory's best hit."""
    best: dict[str, tuple[Ranked, list[str]]] = {}
    for r in ranked:
        entry = best.get(r.memory_id)
        if entry is None:
            best[r.memory_id] = (r, [])
        else:
            entry[1].append(r.id)
    return list(best.values())


async def weigh(
    conn: AsyncConnection, reader: Reader, text: str
) -> tuple[list[tuple[str, float]], search_repo.Scoring]:
    """The full-text lane's words of ``text`` with their weights (:func:`app.domain.terms.words`)
    and the scoring constants, from the statistics of the audiences ``reader`` reads (one
    statement, ``sibyl:search.weights``); the fallback weights and the default constants when
    it has none to use (never counted, or an audience stale)."""
    return (await weigh_all(conn, reader, [text]))[0]


async def weigh_all(
    conn: AsyncConnection, reader: Reader, texts: list[str]
) -> list[tuple[list[tuple[str, float]], search_repo.Scoring]]:
    """:func:`weigh` of each of ``texts``, with ONE look-up of the statistics over all their
    words (``context`` weighs its goal twice, as written and as its words)."""
    tokens = list(dict.fromkeys(t for text in texts for t in terms.tokens(text)))
    stats = (
        await term_stats.lookup(conn, reader_params=reader.params(), words=tokens)
        if tokens
        else None
    )
    if stats is None:
        # the fallback table weighs a word it does not know (an identifier, or a typo) as the
        # rarest: one no readable row holds goes last, or the scans would look for it alone
        unknown = [t for t in tokens if terms.unknown(t)]
        unheld = await search_repo.unheld_words(conn, reader_params=reader.params(), words=unknown)
        return [(terms.words(text, unheld=unheld), search_repo.Scoring()) for text in texts]
    scoring = search_repo.Scoring(avg_length=stats.avg_length, counted=True)
    return [(terms.words(text, stats), scoring) for text in texts]


async def find_candidates(
    conn: AsyncConnection,
    reader: Reader,
    *,
    query: str,
    words: str | None = None,
    weighted: tuple[list[tuple[str, float]], search_repo.Scoring] | None = None,
    types: list[str] | None,
    lifecycles: list[str],
    project: str | None,
    cap: int,
) -> tuple[list[search_repo.Candidate], bool]:
    """Every readable candidate of the two lanes (see the module docstring) with its lane ranks,
    and whether a lane hit its cap. ``query`` feeds the exact lane; ``words`` (default:
    ``query``) the full-text lane, as free text (weighed by :func:`weigh`, unless ``weighted``
    gives its result already). Shared by ``search`` and ``context``."""
    found, scoring = weighted or await weigh(conn, reader, query if words is None else words)
    params = search_repo.candidate_params(
        reader.params(),
        query=query,
        words=[w for w, _ in found],
        idfs=[idf for _, idf in found],
        types=types,
        lifecycles=lifecycles,
        project=project,
        cap=cap,
        term_cap=cap,
        scan=SCAN,
        scoring=scoring,
    )
    return await search_repo.candidates(conn, params=params)


def hit_fields(hit: search_repo.Hit, preview_chars: int) -> dict[str, Any]:
    """The presentation fields every surface shows of one hit: id, type, name, content preview,
    project, lifecycle, metadata (with ``content_truncated``) and, for a passage,
    ``passage_index``, ``parent_entity_id`` and ``widen_with``."""
    content, cut = preview_prefix(hit.content_prefix, hit.content_length, preview_chars)
    is_passage = hit.parent_id is not None
    metadata: dict[str, Any]
    if is_passage:
        metadata = {
            "breadcrumb": hit.breadcrumb,
            "passage_total": hit.passage_total,
            "parent_type": hit.memory_type,
        }
    else:
        metadata = dict(hit.metadata)
    metadata["content_truncated"] = cut
    return {
        "id": hit.id,
        "type": "passage" if is_passage else hit.memory_type,
        "name": (
            passage_name(hit.name, hit.passage_index or 0, hit.passage_total, hit.breadcrumb)
            if is_passage
            else hit.name
        ),
        "content": content,
        "project_id": hit.project_id,
        "lifecycle": hit.lifecycle,
        "metadata": metadata,
        "passage_index": hit.passage_index,
        "parent_entity_id": hit.parent_id,
        "widen_with": "fetch_slice" if is_passage else None,
    }


def match_metadata(ranked: Ranked, lanes: tuple[str, ...]) -> dict[str, Any]:
    """``metadata.match``: the hit's rank in each of ``lanes`` (null: not in it), its text rank
    (its BM25 score; null: no full-text match) and ``span_rank``, the BM25 score of its memory's
    best span when :func:`rerank` scored the memory's spans (null otherwise)."""
    out: dict[str, Any] = {f"{lane}_rank": ranked.lanes.get(lane) for lane in lanes}
    out["text_rank"] = None if ranked.text_rank is None else round(ranked.text_rank, 6)
    out["span_rank"] = None if ranked.span_rank is None else round(ranked.span_rank, 6)
    if ranked.promoted_by is not None:
        out["promoted_by"] = dataclasses.asdict(ranked.promoted_by)
    return out


def cover_order(
    spans: Sequence[search_repo.Span],
    take: int,
    covered: float = policy.SEARCH_FOCUS_COVERED,
    asked: Mapping[int, float] | None = None,
) -> list[search_repo.Span]:
    """At most ``take`` (≥ 1) of ``spans`` (one memory's, best BM25 first) in the order
    ``metadata.focus`` names them: the best by BM25 first, then each next one the span whose
    query words add the most, a word's share of a span's score counting ``covered`` (0..1)
    times less for each span already chosen that holds it (ties: the better BM25 rank), and
    ``asked[w]`` times more for a word ``w`` (its 1-based position in the query's words) of the
    question's last interrogative clause (:func:`app.domain.terms.asked`, weighed
    :data:`~app.domain.policy.SEARCH_FOCUS_ASKED`; a word not in ``asked`` counts once).

    The best spans of a memory often repeat the words of its topic (``wheel`` in every span
    of the wheel PEP) while the question's other words sit in one span further down; this
    diversification (in the spirit of xQuAD's coverage of query aspects) lets that span into
    ``next``. Measured (``docs/eval.md``, 2026-12-02): the evaluation's loop exposed 206 → 211
    of the 232 development questions and 52 → 53 of the clean held-out set's 60; plain
    coverage (``covered`` 0) exposed fewer than BM25 order (199). The asked clause's weight
    (2026-12-03): 211 → 214 of 232 (docs/eval.md). Reads only the spans' own scores and the
    query, so nothing another reader holds enters (§2)."""
    boost = asked or {}
    pool = list(spans)
    if not pool:
        return []
    chosen = [pool.pop(0)]
    seen: dict[int, int] = {}
    for word, _ in chosen[0].words:
        seen[word] = seen.get(word, 0) + 1
    while pool and len(chosen) < max(1, take):
        gains = [
            sum(share * boost.get(w, 1.0) * covered ** seen.get(w, 0) for w, share in sp.words)
            for sp in pool
        ]
        best = max(range(len(pool)), key=lambda i: (gains[i], -i))
        span = pool.pop(best)
        chosen.append(span)
        for word, _ in span.words:
            seen[word] = seen.get(word, 0) + 1
    return chosen


def focus_metadata(
    best: search_repo.Focus, weighted: list[tuple[str, float]], preview_chars: int
) -> dict[str, Any]:
    """``metadata.focus``: the memory's span that best matches the query (``id``: a passage id
    to widen with ``fetch_slice``, or the memory's own id when it was never cut;
    ``passage_index``: null then), ``excerpt``, the query-focused stretch of that span's text
    (:func:`app.domain.excerpt.excerpt`, at most ``content_max_chars`` characters), and
    ``next``: the ids of the memory's next spans (at most
    :data:`~app.domain.policy.SEARCH_FOCUS_SPANS` − 1) in :func:`cover_order`."""
    first = best.spans[0]
    return {
        "id": first.id,
        "passage_index": first.passage_index,
        "excerpt": excerpt(best.content, weighted, preview_chars),
        "next": [s.id for s in best.spans[1:]],
    }


def _holds(content: str, excerpt: str) -> bool:
    """Whether ``content`` (a preview) already holds the text of ``excerpt`` (its ``...``
    markers aside), so sending both would say the same words twice (a trial: 8 of 10 rows)."""
    core = excerpt.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS).strip()
    return not core or core in content


async def search(
    conn: AsyncConnection,
    reader: Reader,
    request: SearchRequest,
    *,
    settings: Settings | None = None,
) -> SearchResponse:
    """One page of the memories and passages matching ``request.query`` that ``reader`` may read.

    Bounds are clamped and echoed: limit 1..50 (default 10), offset 0..10000 (default 0),
    content_max_chars 0..50000 (default 500); ``lifecycle`` defaults to active + superseded
    (retired never). ``total`` is the number of results on this page, ``has_more`` whether a
    next page exists. Each result's ``metadata.match`` gives its lane ranks and
    ``metadata.collapsed`` (when present) the ids of the same memory's lower-ranked hits, and
    ``metadata.focus`` (when the memory holds a query word) its best-matching span over all its
    current spans with a query-focused excerpt (:func:`focus_metadata`; for a row promoted for
    its edge, :func:`promote_first`, chosen by the words of the question's ask:
    :func:`focus_by_ask`); ``content`` stays the preview (the hit's opening), as the contract
    rules.
    Raises ``BadRequest`` (400) for a blank or too long query, an unknown lifecycle, a type or
    project name outside its alphabet. A named project the reader cannot read answers exactly as
    a project that does not exist: no results.
    """
    s = settings or get_settings()
    query = normalize_query(request.query, field="query")
    types = normalize_names(request.types, field="types", upper=False)
    project = normalize_project(request.project)
    lifecycles = normalize_lifecycles(request.lifecycle)
    limit = policy.SEARCH_LIMIT.clamp(request.limit)
    offset = policy.SEARCH_OFFSET.clamp(request.offset)
    preview_chars = policy.PREVIEW_CHARS.clamp(request.content_max_chars)

    # the words of the question's ask ("..., and what return annotation does it use?"): a
    # subset of the query's words, weighed with them in ONE look-up of the statistics
    ask = terms.asked(query)
    ask_text = " ".join(w for w in terms.tokens(query) if terms.lowered(w) in ask)
    (weighted, scoring), (ask_weighted, ask_scoring) = await weigh_all(
        conn, reader, [query, ask_text]
    )
    found, capped = await find_candidates(
        conn,
        reader,
        query=query,
        weighted=(weighted, scoring),
        types=types,
        lifecycles=lifecycles,
        project=project,
        cap=s.search_candidate_cap,
    )
    folded = fold(fuse([(FULLTEXT, found)]))

    async def focus_of(memories: list[str]) -> dict[str, search_repo.Focus]:
        # every matching span: cover_order chooses among them all
        scored = await score_spans(conn, reader, memories, weighted, scoring)
        return {
            m: dataclasses.replace(
                f, spans=cover_order(f.spans, policy.SEARCH_FOCUS_SPANS, asked=asked)
            )
            for m, f in scored.items()
        }

    # the ask's words by their position in the query's words: focus.next weighs them more
    # (cover_order)
    asked = {
        n: policy.SEARCH_FOCUS_ASKED
        for n, (w, _) in enumerate(weighted, start=1)
        if terms.lowered(w) in ask
    }

    # every span of the best memories scored once: it re-ranks them and gives their focus
    focused = await focus_of([r.memory_id for r, _ in folded[: policy.SEARCH_RERANK]])
    folded = rerank(
        folded, {m: f.spans[0].text_rank for m, f in focused.items()}, policy.SEARCH_RERANK
    )
    # the best result's strongest typed neighbour goes right after it (else the second's)
    folded = await promote_first(
        conn, reader, folded, types=types, lifecycles=lifecycles, project=project
    )
    page = folded[offset : offset + limit]
    rows = await search_repo.hits(
        conn,
        reader_params=reader.params(),
        ids=[r.id for r, _ in page],
        preview_chars=preview_chars,
    )
    unfocused = [r.memory_id for r, _ in page if r.memory_id not in focused]
    if unfocused:  # a page past the re-ranked memories
        focused = {**focused, **await focus_of(unfocused)}
    # a promoted row is listed for its edge: its focus follows the question's ask
    promoted = [r.memory_id for r, _ in page if r.promoted_by is not None]
    by_ask = await focus_by_ask(conn, reader, promoted, ask_weighted, ask_scoring)
    focused = {**focused, **by_ask}
    results: list[SearchResult] = []
    for r, collapsed in page:
        hit = rows.get(r.id)
        if hit is None:  # pragma: no cover - one snapshot: a candidate's row is still there
            continue
        fields = hit_fields(hit, preview_chars)
        fields["metadata"]["match"] = match_metadata(r, (FULLTEXT, EXACT))
        if collapsed:
            fields["metadata"]["collapsed"] = collapsed
        best = focused.get(r.memory_id)
        if best is not None:
            focus = focus_metadata(
                best, ask_weighted if r.memory_id in by_ask else weighted, preview_chars
            )
            if focus["id"] == r.id and _holds(fields["content"], focus["excerpt"]):
                focus["excerpt"] = ""  # the row is that span and its preview already says it
            fields["metadata"]["focus"] = focus
        results.append(SearchResult(score=round(r.score, 6), **fields))

    filters: dict[str, Any] = {
        "query": query,
        "types": types,
        "project": project,
        "lifecycle": lifecycles,
        "limit": limit,
        "offset": offset,
        "content_max_chars": preview_chars,
        "rrf_k": policy.RRF_K,
        "candidate_cap": s.search_candidate_cap,
        "candidates_capped": capped,
        # which weights the words had: the reader's audience counts, or the fixed English
        # frequencies (never counted, or an audience stale since a write: docs/search.md)
        "word_weights": "counts" if scoring.counted else "fallback",
        # the words the full-text lane used, rarest first (stemmed and stop words dropped by
        # the database); empty: the query had none (only stop words), so only the exact lane ran
        "words": list(dict.fromkeys(terms.lowered(w) for w, _ in weighted)),
        "scan_words": {
            "names": SCAN.names,
            "breadcrumbs": SCAN.breadcrumbs,
            "bodies": SCAN.bodies,
        },
        "round_budget": policy.ROUND_BUDGET,
    }
    return SearchResponse(
        results=results,
        total=len(results),
        limit=limit,
        offset=offset,
        has_more=len(folded) > offset + limit,
        filters=filters,
    )
