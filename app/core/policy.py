"""Relationship policy and request bounds: the anchors of docs/design.md.

Every number a caller can observe lives here, once: the relationship weights and followed
directions, the score decay, and the clamp ranges of each budget. The walk SQL receives them as
bound parameters; tool docstrings and tests read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

DECAY = 0.72
SCORE_MIN = 0.1
SCORE_MAX = 1.0
UNKNOWN_WEIGHT = 0.64
SHARES_COMMUNITY = "SHARES_COMMUNITY"
MENTIONS = "MENTIONS"
ROUND_BUDGET = 3


@dataclass(frozen=True)
class Bound:
    """An inclusive integer range with a default; out-of-range values are clamped, not rejected."""

    low: int
    high: int
    default: int

    def describe(self, what: str, tail: str = "") -> str:
        """A parameter description stating the range and default: ``"<what>, 1-3, default 1
        (clamped)."``; ``tail`` is added before the final period."""
        return f"{what}, {self.low}-{self.high}, default {self.default} (clamped){tail}."

    def clamp(self, value: int | None) -> int:
        """``value`` clamped to [low, high]; ``None`` gives the default."""
        if value is None:
            return self.default
        return max(self.low, min(self.high, value))


MAX_SEEDS = 8
MAX_NAMES = 256
"""Entries a ``relationship_types``, ``types`` or ``lifecycle`` filter may list (more: 400). The
contract names about 25 relationships; the bound keeps a filter's validation and its SQL array
small (a breaker's 25,000-name list held the event loop 11 s when duplicates were found by a
list scan)."""
LEVEL_CAP_FACTOR = 4  # default level cap: 4 × (limit + 1) nodes a level (rule: bounded-walk)
DEPTH = Bound(1, 3, 1)
LIMIT = Bound(1, 24, 8)
PREVIEW_CHARS = Bound(0, 50_000, 500)
WINDOW = Bound(1, 64, 3)
SLICE_CHARS = Bound(0, 50_000, 18_000)

# search and context (rules: search-lanes, context-budget-whole)
SEARCH_LIMIT = Bound(1, 50, 10)
SEARCH_OFFSET = Bound(0, 10_000, 0)
SEARCH_LIFECYCLES = ("active", "superseded")  # the default; `retired` is never searchable
MAX_QUERY_CHARS = 2000
CONTEXT_LIMIT = Bound(1, 50, 12)  # 24 once: 24 items left ~300 characters of text each
RELATED_LIMIT = Bound(0, 5, 3)
MARKDOWN_TOKENS = Bound(100, 32_000, 4000)
CHARS_PER_TOKEN = 4
NOTE_LANE = 3  # (anchor) reserved note slots of a context pack; never scales with `limit`
CONTEXT_PER_MEMORY = 3  # items one memory (itself + its spans) may hold in a pack
CONTEXT_PREVIEW_CHARS = 100  # an item's preview in the sections (its text is in the Markdown)
CONTEXT_TEXT_CHARS = (
    2000  # the most text of one passage (or one span of a memory) the Markdown shows
)
CONTEXT_MEMORY_SPANS = (
    2  # a memory item's text: its best-matching spans not in the pack, best first
)
CONTEXT_RESPONSE_FACTOR = 1.25  # the whole pack ≤ 1.25 × markdown_token_budget × 4 characters


@dataclass(frozen=True)
class RelPolicy:
    """Weight W of a relationship and which hop directions the walk follows."""

    weight: float
    outgoing: bool = True
    incoming: bool = True


# The relationship policy (rule: relationship-policy). SUPERSEDES outgoing is followed only when
# relationship_types names it.
RELATIONSHIPS: dict[str, RelPolicy] = {
    "DECIDES": RelPolicy(1.00, incoming=False),
    "DEPENDS_ON": RelPolicy(0.98),
    "REQUIRES": RelPolicy(0.98, incoming=False),
    "BLOCKS": RelPolicy(0.96),
    "SUPERSEDES": RelPolicy(0.95, outgoing=False),
    "SUPPORTS": RelPolicy(0.94, incoming=False),
    "VALIDATED_BY": RelPolicy(0.94),
    "USES_PROCEDURE": RelPolicy(0.92),
    "IMPLEMENTED": RelPolicy(0.90),
    "ENCOUNTERED": RelPolicy(0.86),
    "REFERENCES": RelPolicy(0.86),
    "PRODUCES": RelPolicy(0.82),
    "TOUCHES": RelPolicy(0.82),
    "ABOUT": RelPolicy(0.78),
    SHARES_COMMUNITY: RelPolicy(0.74),
    "BELONGS_TO": RelPolicy(0.72),
    "CONTAINS": RelPolicy(0.72),
    "DERIVED_FROM": RelPolicy(0.70),
    "DOCUMENTED_IN": RelPolicy(0.66),
    "CONTRADICTS": RelPolicy(0.64),
    "RELATED_TO": RelPolicy(0.64),
    "PART_OF": RelPolicy(0.64),
    MENTIONS: RelPolicy(0.58),
}


def weight(relationship: str) -> float:
    """W[relationship] from the policy (rule: relationship-policy); unknown relationships weigh
    0.64."""
    policy = RELATIONSHIPS.get(relationship)
    return policy.weight if policy else UNKNOWN_WEIGHT


def score(relationship: str, distance: int) -> float:
    """clamp(W[rel] × 0.72^(d−1), 0.1, 1.0) for hop distance ``distance`` ≥ 1 (rule:
    relationship-policy)."""
    return min(max(weight(relationship) * DECAY ** (distance - 1), SCORE_MIN), SCORE_MAX)


@dataclass(frozen=True)
class HopRules:
    """Which hops one request may take, as the walk's bound array parameters.

    ``rel_filter`` is None (every relationship) or the named ones; ``out_denied``/``in_denied``
    list relationships whose outgoing/incoming hops §4 does not follow for this request.
    """

    rel_filter: list[str] | None
    out_denied: list[str]
    in_denied: list[str]

    def allows(self, relationship: str, *, outgoing: bool) -> bool:
        """True iff a hop over ``relationship`` in that direction may be taken."""
        if self.rel_filter is not None and relationship not in self.rel_filter:
            return False
        denied = self.out_denied if outgoing else self.in_denied
        return relationship not in denied


def hop_rules(relationship_types: list[str] | None) -> HopRules:
    """The policy's direction rules for a request naming ``relationship_types`` (None: all)."""
    named = set(relationship_types or ())
    out_denied = sorted(
        rel for rel, p in RELATIONSHIPS.items() if not p.outgoing and rel not in named
    )
    in_denied = sorted(rel for rel, p in RELATIONSHIPS.items() if not p.incoming)
    return HopRules(
        rel_filter=list(relationship_types) if relationship_types is not None else None,
        out_denied=out_denied,
        in_denied=in_denied,
    )


NAME_ABOVE_ALL = "~"
"""A string above every relationship name in byte order (the ``C`` collation of the column):
a stored name is ``[A-Za-z0-9_]`` (:func:`app.domain.validation.stored_relationship`), every
character of which is below ``~``."""


@dataclass(frozen=True)
class HopOrder:
    """The order in which a hub's edges are read one way (rule: bounded-walk).

    ``tiers``: the relationships to read one index range each, strongest first (weight desc,
    then name), with ``None`` at the place of every relationship of the default weight (read
    together, in name order); ``exact``: the tiers after which no other allowed relationship of
    the same weight follows (a cut inside one drops only larger neighbour ids of that weight).
    """

    tiers: list[str | None]
    exact: list[str]

    def ranges(self) -> tuple[list[str], list[str]]:
        """The tiers as index ranges of relationship names, ``(lows, highs)``: a relationship
        alone (``low == high``), or for ``None`` every name from ``''`` to :data:`NAME_ABOVE_ALL`
        (the walk then skips the weighted ones)."""
        lows = ["" if t is None else t for t in self.tiers]
        highs = [NAME_ABOVE_ALL if t is None else t for t in self.tiers]
        return lows, highs


def hop_order(rules: HopRules, *, outgoing: bool) -> HopOrder:
    """The tiers of one direction for a request's ``rules`` (see :class:`HopOrder`)."""
    named = [
        (-p.weight, rel)
        for rel, p in RELATIONSHIPS.items()
        if p.weight != UNKNOWN_WEIGHT and rules.allows(rel, outgoing=outgoing)
    ]
    named.sort()
    tiers: list[str | None] = [rel for _, rel in named]
    default_allowed = rules.rel_filter is None or any(
        weight(rel) == UNKNOWN_WEIGHT and rules.allows(rel, outgoing=outgoing)
        for rel in rules.rel_filter
    )
    if default_allowed:
        at = sum(1 for w, _ in named if -w > UNKNOWN_WEIGHT)
        tiers.insert(at, None)
    exact = [rel for i, (w, rel) in enumerate(named) if i + 1 == len(named) or named[i + 1][0] != w]
    return HopOrder(tiers=tiers, exact=exact)


def weighted_relationships() -> list[str]:
    """Every policy relationship whose weight is not the default one (a hub reads each alone)."""
    return sorted(rel for rel, p in RELATIONSHIPS.items() if p.weight != UNKNOWN_WEIGHT)


def max_weight(relationship_types: list[str] | None) -> float:
    """The largest weight a hop may have under ``relationship_types`` (None: every one)."""
    if relationship_types is None:
        return max(p.weight for p in RELATIONSHIPS.values())
    return max((weight(rel) for rel in relationship_types), default=UNKNOWN_WEIGHT)


def weight_arrays() -> tuple[list[str], list[float]]:
    """The policy table as two parallel arrays (names, weights), bound into the walk SQL."""
    names = sorted(RELATIONSHIPS)
    return names, [RELATIONSHIPS[n].weight for n in names]
