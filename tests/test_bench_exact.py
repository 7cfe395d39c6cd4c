"""The benchmark's exactness check (bench/exact.py) answers as the reference oracle does.

`make bench` compares every uncapped walk with :class:`bench.exact.ExactWalker`; that check
is worth something only if the walker is the reference semantics of §5. On random small graphs
(tests/oracle.py: scopes, grants, restricted keys, passages, communities, cycles, hubs) and the
benchmark's requests (no relationship, type or project filter; every depth; incoming on and
off), its answer equals the oracle's, row by row, and ``truncated`` too. And it can fail: a
walk whose first row is dropped is not the same answer.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

from app.repo.readers import reader_by_user
from bench.exact import ExactWalker, same_answer
from tests import oracle
from tests.builders import load_graph

GRAPHS = 12


def _own_users(g: oracle.Graph, readers: list[oracle.Reader], suffix: str) -> list[oracle.Reader]:
    def u(user_id: str) -> str:
        return f"{user_id}_{suffix}"

    g.users = {u(k): v for k, v in g.users.items()}
    g.members = {(p, u(k)): v for (p, k), v in g.members.items()}
    g.grants = {(e, u(k)) for e, k in g.grants}
    for ent in g.entities.values():
        ent.owner_id = None if ent.owner_id is None else u(ent.owner_id)
    return [oracle.Reader(user_id=u(r.user_id), key_projects=r.key_projects) for r in readers]


async def test_the_exact_walker_is_the_reference_oracle(engine):
    compared = nonempty = 0
    for graph_no in range(GRAPHS):
        rng = random.Random(31_000 + graph_no)
        g, readers = oracle.random_graph(rng, org_id=f"org_exact_{graph_no}")
        readers = _own_users(g, readers, f"x{graph_no}")
        await load_graph(engine, g)
        async with engine.connect() as conn:
            for r in readers:
                keys = list(r.key_projects) if r.key_projects is not None else None
                reader = await reader_by_user(conn, user_id=r.user_id, key_projects=keys)
                assert reader is not None
                walker = await ExactWalker.load(conn, reader)
                for depth in (1, 2, 3):
                    for incoming in (True, False):
                        req = oracle.random_request(rng, g, r)
                        limit = req.get("limit") or 8
                        want = oracle.expand(
                            g,
                            r,
                            req["entity_ids"],
                            depth=depth,
                            limit=limit,
                            include_incoming=incoming,
                        )
                        rows, truncated = await walker.walk(
                            conn,
                            want["origins"],
                            depth=depth,
                            limit=limit,
                            include_incoming=incoming,
                        )
                        where = f"graph {graph_no}, {r}, {req}, depth {depth}, in {incoming}"
                        theirs = [SimpleNamespace(**n) for n in want["neighbors"]]
                        assert same_answer(theirs, rows), where
                        assert truncated == want["truncated"], where
                        if rows:
                            assert not same_answer(theirs[1:], rows), where
                        compared += 1
                        nonempty += bool(rows)
    assert compared >= GRAPHS * 6
    assert nonempty >= compared // 3
