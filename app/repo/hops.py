"""One hop, written once: the arms every statement that steps from a node to its neighbours is
made of (the walk of ``expand_neighbors``, :mod:`app.repo.walk`; context's related items,
:mod:`app.repo.related`; search's promotion, :mod:`app.repo.search.promote`; the benchmark's
baseline walk).

A node ``f`` (a memory, or a passage) reaches a neighbour over one of seven links
(:data:`LINKS`): its edges out and in, its mentions out and in, its communities' other members
(the synthetic ``SHARES_COMMUNITY`` hop), a passage's parent and a memory's passages. For each,
:func:`hop_source` writes the index probe from ``f`` and the join of the entered node's
``entities`` row ``t`` (a passage's: its parent's), where the read rule, the lifecycle rule and
the project confinement are applied (:data:`ENTER`, :data:`ENTER_LVL`), and :func:`hop_arm` the
whole arm of the plain shape (the neighbour, the relationship, the direction, the weight, under
the relationship filter and the direction rules). The vocabulary of the arms (:data:`WEIGHT`,
:func:`allowed`, :data:`PASSAGE_REL`, :data:`SCORE`) lives here too, so every statement applies
exactly the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from app.core import policy
from app.repo.readrule import readable, readable_by

# The conditions every entered node satisfies: readable, not retired, inside `project` if named.
ENTER = f"""t.lifecycle <> 'retired'
          AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
          AND {readable("t")}"""
# The same conditions inside the walk, where the reader comes with every level's row (`lvl`:
# org_id, user_id, readable_projects, k_projects), so that the statement that computes the
# reader from an API key needs no sub-select of it at each place the rule is applied.
ENTER_LVL = f"""t.lifecycle <> 'retired'
          AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
          AND {readable_by("t", "lvl")}"""


def float8(value: float) -> str:
    """A float8 constant of exactly ``value`` (its shortest repr reads back to the same double)."""
    return f"CAST('{value!r}' AS float8)"


def text_array(values: list[str]) -> str:
    """A text[] constant of policy names (``[A-Z_]``, checked: no quoting needed)."""
    for v in values:
        if not re.fullmatch(r"[A-Za-z0-9_~]*", v):
            raise ValueError(f"not a policy name: {v!r}")
    return "CAST('{" + ",".join(f'"{v}"' for v in values) + "}' AS text[])"


# W(rel) (rule: relationship-policy): the policy table as constants of the statement (the same for
# every request, so they are not sent with each one), strongest first; any other name weighs the
# default.
WEIGHT = (
    "(CASE {rel} "
    + " ".join(
        f"WHEN '{rel}' THEN {float8(p.weight)}"
        for rel, p in sorted(policy.RELATIONSHIPS.items(), key=lambda kv: (-kv[1].weight, kv[0]))
        if p.weight != policy.UNKNOWN_WEIGHT
    )
    + f" ELSE {float8(policy.UNKNOWN_WEIGHT)} END)"
)

# score(rel, d) (rule: relationship-policy) for a weight and a distance, as every part of the walk
# computes it (the same float8 expression everywhere, so the comparisons of the early stop and of
# the flag are exact).
SCORE = (
    f"least(greatest(({{weight}}) * power({float8(policy.DECAY)}, ({{distance}}) - 1),"
    f" {float8(policy.SCORE_MIN)}), {float8(policy.SCORE_MAX)})"
)

PASSAGE_REL = "(CASE WHEN t.passage_kind = 'evidence' THEN 'DERIVED_FROM' ELSE 'PART_OF' END)"
"""A passage's relationship to its parent (the row ``t`` of the hop is the parent)."""


def allowed(rel: str, denied: str) -> str:
    """SQL: a hop over ``rel`` passes the relationship filter and is not in the ``denied`` list."""
    return (
        f"(CAST(:rel_filter AS text[]) IS NULL OR {rel} = ANY(CAST(:rel_filter AS text[])))\n"
        f"          AND NOT ({rel} = ANY(CAST(:{denied} AS text[])))"
    )


class Link(NamedTuple):
    """One way a node reaches a neighbour: the tables read (``source``: ``{org}`` and the joins
    up to the entered row ``t``), the column that must equal the node (``near``), the
    neighbour's id (``far``), the relationship (``rel``), the direction (``dir_rank``: 0 out,
    1 in) and the bound list of relationships denied that way (``denied``)."""

    source: str
    org: str
    near: str
    far: str
    rel: str
    dir_rank: int
    denied: str


_EDGE = "edges e\n{i}JOIN entities t ON t.org_id = e.org_id AND t.id = e.{far}"
_MENTION = "mentions m\n{i}JOIN entities t ON t.org_id = m.org_id AND t.id = m.{far}"
_COMMUNITY = (
    "community_members c1\n"
    "{i}JOIN community_members c2\n"
    "{i}  ON c2.org_id = c1.org_id AND c2.community_id = c1.community_id\n"
    "{i}JOIN entities t ON t.org_id = c2.org_id AND t.id = c2.entity_id"
)
_PASSAGE = "passages p\n{i}JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id"

LINKS = {
    "edges_out": Link(
        _EDGE.replace("{far}", "dst_id"),
        "e.org_id",
        "e.src_id",
        "e.dst_id",
        "e.relationship",
        0,
        "out_denied",
    ),
    "edges_in": Link(
        _EDGE.replace("{far}", "src_id"),
        "e.org_id",
        "e.dst_id",
        "e.src_id",
        "e.relationship",
        1,
        "in_denied",
    ),
    "mentions_out": Link(
        _MENTION.replace("{far}", "dst_id"),
        "m.org_id",
        "m.src_id",
        "m.dst_id",
        "'MENTIONS'",
        0,
        "out_denied",
    ),
    "mentions_in": Link(
        _MENTION.replace("{far}", "src_id"),
        "m.org_id",
        "m.dst_id",
        "m.src_id",
        "'MENTIONS'",
        1,
        "in_denied",
    ),
    "community": Link(
        _COMMUNITY,
        "c1.org_id",
        "c1.entity_id",
        "c2.entity_id",
        "'SHARES_COMMUNITY'",
        0,
        "out_denied",
    ),
    "parent": Link(_PASSAGE, "p.org_id", "p.id", "t.id", PASSAGE_REL, 0, "out_denied"),
    "passages": Link(_PASSAGE, "p.org_id", "p.parent_id", "p.id", PASSAGE_REL, 1, "in_denied"),
}
"""The seven links of a hop, by name."""


def hop_source(link: str, *, org: str, node: str, indent: str = "              ") -> str:
    """SQL: ``FROM`` the tables of ``link`` joined to the entered row ``t``, ``WHERE`` the near
    end is ``node`` in org ``org`` (an index probe per node); the caller appends its conditions
    with ``AND``. ``indent``: the indentation of the lines after the first."""
    spec = LINKS[link]
    source = spec.source.replace("{i}", indent)
    return f"FROM {source}\n{indent}WHERE {spec.org} = {org} AND {spec.near} = {node}"


def hop_arm(
    link: str,
    *,
    org: str,
    node: str,
    enter: str = ENTER,
    where: Iterable[str] = (),
    tail: Iterable[str] = (),
    indent: str = "              ",
) -> str:
    """SQL: one hop arm of the plain shape: per neighbour over ``link`` from ``node``, its id,
    relationship, direction and policy weight (columns ``id, relationship, dir_rank, weight``), the
    hop allowed by the relationship filter and the direction rules and the entered row passing
    ``enter``, plus the conditions ``where``; ``tail``: lines after it (``ORDER BY``, ``LIMIT``)."""
    spec = LINKS[link]
    conditions = [*where, allowed(spec.rel, spec.denied), enter]
    lines = [
        f"SELECT {spec.far} AS id, {spec.rel} AS relationship, {spec.dir_rank} AS dir_rank,",
        f"       {WEIGHT.format(rel=spec.rel)} AS weight",
        hop_source(link, org=org, node=node, indent=indent),
        *(f"  AND {c}" for c in conditions),
        *tail,
    ]
    return f"\n{indent}".join(lines)
