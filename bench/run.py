"""``sibyl-pg bench run`` / ``make bench``: measure the read verbs at scale (docs/benchmark.md).

One run, in this order, on the graph of :mod:`bench.generate` (generated first when its
database does not hold it):

1. **expand_neighbors** at depth 1, 2 and 3, from *random* seeds (8 random memories the reader
   may read) and from *hub* seeds (4 of the hubs and 4 random memories), limit 24, incoming on,
   as bench reader 1 (who may read about half of the graph). Each call runs the real domain
   function in a read transaction (its wall time, ``wall``), and every statement it sent is
   then re-run under ``EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON)`` with the same
   values: planning + execution time (``db``, the time "measured at the database") and shared
   buffers hit + read per call.
2. **fetch_slice** of random cut memories and of random passages (window 3), the same way.
3. **search** (when :mod:`app.domain.search` exists) for a word in about 100,000 × scale
   passages (``kestrel``), a rare one (``ocelot``) and a 6-word natural-language question
   holding the common word (:data:`SEARCH_QUESTION`), the same way.
4. The **baseline walk** (:mod:`bench.baseline`) on the first seed sets of each expand case,
   under ``EXPLAIN ANALYZE`` with a statement timeout (default 10 s); a timed-out call counts
   as the timeout (so its figures are lower bounds, marked ``≥``), and a case stops after two
   timeouts in a row. Where the service walk was not capped, the two answers are compared.
5. **REST end to end**: ``sibyl-pg serve`` started as a subprocess on a free loopback port, 16
   concurrent clients (one keep-alive HTTP/1.1 connection each, :class:`KeepAliveClient`)
   posting expand depth 2 from random seeds for 30 s after a 2 s warm-up (one client for 10 s
   first): throughput, p50/p95/p99, errors, the server's peak resident memory (``VmHWM`` of
   ``/proc/<pid>/status``), the load average, and the CPU split (server, its database backends,
   the load generator), in seconds and in ms a request. ``--rest-only`` runs only this part.

Results go to ``<out>/results.json`` and ``<out>/latency.png`` (matplotlib, from the ``bench``
extra), and a table is printed. The benchmark's targets are evaluated in the JSON; they are
stated for 1M memories / 8M edges, so on a smaller graph they are indicative only.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import platform
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import make_engine, one_statement, read_tx, statement_engine
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.domain.schemas import ExpandRequest, SliceRequest
from app.domain.slice import fetch_slice
from app.repo.explain import (
    CapturedStatement,
    capture,
    explain_statement,
    planning_ms,
    rolled_back_read,
)
from app.repo.readers import reader_by_user
from app.repo.readrule import readable
from app.service.expand import expand_for_key, expand_neighbors, walk_params
from bench import database as benchdb
from bench.baseline import BASELINE_SQL
from bench.exact import ExactWalker, same_answer
from bench.generate import (
    COMMON_TERM,
    RARE_TERM,
    GenerateSummary,
    GraphSpec,
    ensure_term_stats,
    generate,
)

Log = Callable[[str], None]
Verb = Callable[[AsyncConnection], Awaitable[Any]]

DEPTHS = (1, 2, 3)
SEED_KINDS = ("random", "hub")
LIMIT = 24
SEEDS_PER_CALL = 8
HUB_SEEDS_PER_CALL = 4
WARMUP_CALLS = 2
MIN_SAMPLES = 10  # a case stopped by its time budget still has this many calls
_EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) "

SEARCH_QUESTION = f"which {COMMON_TERM} endpoint handles payment latency spikes"
"""The natural-language question of docs/eval.md: six words (``which`` is a stop word), the common
term among them, the rest from the generator's vocabulary."""


@dataclass(frozen=True)
class RunOptions:
    """How much to measure, and where."""

    database: str
    regenerate: bool = False
    samples: int = 60
    baseline_samples: int = 5
    baseline_timeout_s: float = 10.0
    clients: int = 16
    load_seconds: float = 30.0
    rest: bool = True
    out: Path = Path("bench-results")
    case_seconds: float | None = 20.0  # time budget of one service case (≥ 10 calls)
    baseline_case_seconds: float | None = 20.0  # time budget of one baseline case (≥ 2 calls)
    quick: bool = False
    rest_only: bool = False  # only the REST cases (one client, then ``clients`` clients)
    graph: str = "synthetic"  # or "debian": the Debian package index (bench/debian.py)
    rest_case_seconds: float = 5.0  # one client, each expand case (depth x seeds)


@dataclass
class Sample:
    """One measured call: wall time of the verb and, from EXPLAIN, its cost at the database."""

    wall_ms: float | None
    db_ms: float | None  # planning + execution (JIT included)
    exec_ms: float | None
    buffers: int | None
    timed_out: bool = False
    jit: bool | None = None  # a statement of the call was JIT-compiled
    capped: bool | None = None
    ids: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Statistics


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, linearly interpolated; None when empty."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def summarize(samples: list[Sample], timeout_ms: int | None = None) -> dict[str, Any]:
    """p50/p95/p99 of wall and database time, buffers, timeouts and capped share.

    A timed-out call counts as ``timeout_ms`` (so a percentile at that value is a lower bound).
    """
    wall = [s.wall_ms for s in samples if s.wall_ms is not None]
    db = [s.db_ms for s in samples if s.db_ms is not None]
    buffers = [float(s.buffers) for s in samples if s.buffers is not None]
    capped = [s.capped for s in samples if s.capped is not None]
    jit = [s.jit for s in samples if s.jit is not None]
    return {
        "n": len(samples),
        "timeouts": sum(s.timed_out for s in samples),
        "timeout_ms": timeout_ms,
        "wall_ms": {f"p{q}": _r(percentile(wall, q / 100)) for q in (50, 95, 99)},
        "db_ms": {f"p{q}": _r(percentile(db, q / 100)) for q in (50, 95, 99)},
        "jit_share": round(sum(jit) / len(jit), 3) if jit else None,
        "buffers": {
            "p50": _r(percentile(buffers, 0.5), 0),
            "p95": _r(percentile(buffers, 0.95), 0),
            "max": max(buffers) if buffers else None,
        },
        "capped_share": round(sum(capped) / len(capped), 3) if capped else None,
    }


# ---------------------------------------------------------------------------------------------
# The graph


def ensure_graph(spec: GraphSpec, name: str, *, force: bool, log: Log) -> GenerateSummary:
    """The summary of ``spec``'s graph in benchmark database ``name``, generating it (into a
    freshly created database) unless the database's manifest already records this very spec."""
    from app.core.migrations import upgrade

    url = benchdb.bench_url(name)
    if not force and asyncio.run(benchdb.exists(name)):
        found = asyncio.run(benchdb.read_manifest(url, spec.org))
        if found is not None and found[0] == spec.as_dict():
            log(f"graph found in database {name} (generated before; --regenerate to redo)")
            upgrade(url)  # a graph kept across releases: its schema brought to head
            if asyncio.run(ensure_term_stats(url, spec.org)):
                log("search word statistics counted (the graph predates them)")
            return GenerateSummary(**found[1])
    log(f"generating {spec.entities:,} memories / {spec.edges:,} edges into database {name}")
    asyncio.run(benchdb.recreate(name))
    upgrade(url)
    summary = asyncio.run(generate(url, spec, fresh=True, log=log))
    asyncio.run(benchdb.write_manifest(url, spec.org, spec.as_dict(), summary.as_dict()))
    log(summary.render())
    return summary


# ---------------------------------------------------------------------------------------------
# Measuring one call


@dataclass
class PlanCost:
    """What EXPLAIN ANALYZE reports of one or more statements (summed)."""

    planning_ms: float = 0.0
    execution_ms: float = 0.0
    jit_functions: int = 0
    buffers: int = 0

    def add(self, document: Any) -> None:
        """Add one ``EXPLAIN (..., FORMAT JSON)`` document."""
        doc = json.loads(document) if isinstance(document, str) else document
        top = doc[0]
        plan = top["Plan"]
        self.buffers += int(plan.get("Shared Hit Blocks", 0)) + int(
            plan.get("Shared Read Blocks", 0)
        )
        self.planning_ms += float(top.get("Planning Time", 0.0))
        self.execution_ms += float(top.get("Execution Time", 0.0))
        self.jit_functions += int(top.get("JIT", {}).get("Functions", 0))

    def sample(self, wall_ms: float | None) -> Sample:
        """A sample of these costs and ``wall_ms``."""
        return Sample(
            wall_ms=wall_ms,
            db_ms=self.planning_ms + self.execution_ms,
            exec_ms=self.execution_ms,
            buffers=self.buffers,
            jit=self.jit_functions > 0,
        )


async def _explain_captured(engine: AsyncEngine, statements: list[CapturedStatement]) -> PlanCost:
    """Fallback without ``auto_explain``: re-run each captured statement under EXPLAIN ANALYZE
    with its **generic** plan (what the driver's prepared statements settle on after their
    first five executions; :func:`app.repo.explain.explain_statement`), summed."""
    cost = PlanCost()
    async with rolled_back_read(engine) as conn:
        for st in statements:
            plan = await explain_statement(conn, st, fmt="json", mode="generic")
            cost.add(plan.plan)
    return cost


_AUTO_EXPLAIN_SETTINGS = (
    "SET LOCAL auto_explain.log_min_duration = 0",
    "SET LOCAL auto_explain.log_analyze = on",
    "SET LOCAL auto_explain.log_buffers = on",
    "SET LOCAL auto_explain.log_timing = off",
    "SET LOCAL auto_explain.log_format = json",
    "SET LOCAL auto_explain.log_nested_statements = off",
    "SET LOCAL client_min_messages = log",
)
_DURATION = re.compile(r"duration: ([0-9.]+) ms")


def enable_auto_explain(engine: AsyncEngine, *, session: bool = False) -> None:
    """Load ``auto_explain`` into every new connection of ``engine`` (needs a superuser and
    the module, which the PostgreSQL packages ship; probe with :func:`auto_explain_available`).
    ``session``: also turn it on for the whole session (a connection of
    :func:`app.core.db.statement_engine` runs each statement on its own, with no transaction
    for :func:`explained` to set it in)."""
    settings = [s.replace("SET LOCAL", "SET") for s in _AUTO_EXPLAIN_SETTINGS] if session else []

    @event.listens_for(engine.sync_engine, "connect")
    def _load(dbapi_connection: Any, _record: Any) -> None:
        async def load(c: Any) -> None:
            await c.execute("LOAD 'auto_explain'")
            for sql in settings:
                await c.execute(sql)

        dbapi_connection.run_async(load)


async def auto_explain_available(url: str) -> bool:
    """True iff this server lets us ``LOAD 'auto_explain'``."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("LOAD 'auto_explain'")
        return True
    except asyncpg.PostgresError:
        return False
    finally:
        await conn.close()


@asynccontextmanager
async def explained(conn: AsyncConnection, *, session: bool = False) -> AsyncIterator[PlanCost]:
    """Within a transaction of an ``auto_explain``-enabled engine: every statement run in the
    block is instrumented (ANALYZE, BUFFERS, TIMING OFF) as it really executes, with the plan
    the driver's prepared statement uses, and its cost is added to the yielded ``PlanCost``
    (the logged duration as ``execution_ms``; planning is not in the log)."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    cost = PlanCost()
    messages: list[str] = []

    def listener(_conn: Any, message: Any) -> None:
        messages.append(str(getattr(message, "message", "")))

    if not session:  # else set for the session (enable_auto_explain)
        for sql in _AUTO_EXPLAIN_SETTINGS:
            await conn.exec_driver_sql(sql)
    driver.add_log_listener(listener)
    try:
        yield cost
        # A statement's plan is logged when its portal closes, at the next round trip: make one.
        await conn.exec_driver_sql("SELECT 1")
        await asyncio.sleep(0)  # let the log messages be dispatched
    finally:
        driver.remove_log_listener(listener)
    for message in messages:
        found = _DURATION.search(message)
        start = message.find("{")
        if found is None or start < 0:
            continue
        doc = json.loads(message[start:])
        if not str(doc.get("Query Text", "")).lstrip().startswith("/* sibyl:"):
            continue  # the driver's own queries (type introspection), the flush above
        cost.add([doc])
        cost.execution_ms += float(found.group(1))


async def measure_verb(
    engine: AsyncEngine,
    verb: Verb,
    *,
    timeout_ms: int,
    auto_explain: bool,
) -> tuple[Sample, Any]:
    """Run ``verb`` as the service does (one read transaction, ``wall``), then measure its cost
    at the database: with ``auto_explain``, the verb runs once more, instrumented as it
    executes; without, what it sent is re-run under EXPLAIN ANALYZE (generic plans).

    A call stopped by the statement timeout (``timeout_ms``, the engine's) gives a sample
    marked ``timed_out`` whose times are the timeout (a lower bound) and a None result; a
    measurement stopped by it gives the timeout as database time and no buffer count.
    """
    started = time.perf_counter()
    try:
        async with read_tx(engine) as conn, capture(conn) as captured:
            result = await verb(conn)
            wall = (time.perf_counter() - started) * 1000
    except Exception as error:
        if not _timed_out(error):
            raise
        return Sample(float(timeout_ms), float(timeout_ms), None, None, timed_out=True), None
    try:
        if auto_explain:
            async with read_tx(engine) as conn, explained(conn) as cost:
                await verb(conn)
        else:
            cost = await _explain_captured(engine, captured)
    except Exception as error:
        if not _timed_out(error):
            raise
        return Sample(wall, float(timeout_ms), None, None), result
    return cost.sample(wall), result


@dataclass
class KeyedEngines:
    """The engines whose one-statement connections (:func:`app.core.db.one_statement`) the
    benchmark sends the served expand statement on: one plain (wall time), one instrumented by
    ``auto_explain`` (cost at the database)."""

    plain: AsyncEngine
    instrumented: AsyncEngine
    auto_explain: bool


async def measure_keyed(
    engines: KeyedEngines, verb: Verb, *, timeout_ms: int
) -> tuple[Sample, Any]:
    """:func:`measure_verb` for a verb that sends ONE statement on its own (no transaction):
    REST and MCP expand (:func:`app.service.expand.expand_for_key`), as they send it, on
    connections of :func:`app.core.db.statement_engine` (generic plans)."""
    started = time.perf_counter()
    try:
        async with one_statement(engines.plain) as conn, capture(conn) as captured:
            result = await verb(conn)
            wall = (time.perf_counter() - started) * 1000
    except Exception as error:
        if not _timed_out(error):
            raise
        return Sample(float(timeout_ms), float(timeout_ms), None, None, timed_out=True), None
    try:
        if engines.auto_explain:
            async with (
                one_statement(engines.instrumented) as conn,
                explained(conn, session=True) as cost,
            ):
                await verb(conn)
        else:
            cost = await _explain_captured(engines.plain, captured)
    except Exception as error:
        if not _timed_out(error):
            raise
        return Sample(wall, float(timeout_ms), None, None), result
    return cost.sample(wall), result


async def measure_calls(
    engine: AsyncEngine,
    verbs: list[Verb],
    *,
    timeout_ms: int,
    auto_explain: bool,
    on_result: Callable[[Sample, Any], Awaitable[None]] | None = None,
    stop_after_timeouts: int = 3,
    budget_s: float | None = None,
    keyed: KeyedEngines | None = None,
) -> list[Sample]:
    """Measure each call (the first :data:`WARMUP_CALLS` are warm-up, not returned); stop
    early after ``stop_after_timeouts`` timed-out calls in a row (once that many calls were
    measured), or once ``budget_s`` seconds have passed and at least :data:`MIN_SAMPLES` calls
    were measured."""
    out: list[Sample] = []
    streak = 0
    deadline = time.monotonic() + budget_s if budget_s else None
    for k, verb in enumerate(verbs):
        if deadline is not None and time.monotonic() > deadline and len(out) >= MIN_SAMPLES:
            break
        if keyed is not None:
            sample, result = await measure_keyed(keyed, verb, timeout_ms=timeout_ms)
        else:
            sample, result = await measure_verb(
                engine, verb, timeout_ms=timeout_ms, auto_explain=auto_explain
            )
        if on_result is not None and result is not None:
            await on_result(sample, result)
        if k >= WARMUP_CALLS:
            out.append(sample)
        streak = streak + 1 if sample.timed_out else 0
        if streak >= stop_after_timeouts and len(out) >= stop_after_timeouts:
            break
    return out


def _timed_out(error: BaseException) -> bool:
    orig = getattr(error, "orig", None)
    codes = {getattr(e, "sqlstate", None) for e in (orig, getattr(orig, "__cause__", None))}
    return "57014" in codes or "statement timeout" in str(error)


async def measure_baseline(
    engine: AsyncEngine, params: dict[str, Any], *, timeout_s: float, auto_explain: bool
) -> Sample:
    """One baseline walk with a statement timeout, instrumented (``auto_explain``, its answer
    kept in ``Sample.ids``) or under EXPLAIN ANALYZE (then without its answer)."""
    timeout_ms = int(timeout_s * 1000)
    started = time.perf_counter()
    ids: list[str] = []
    try:
        async with read_tx(engine) as conn:
            await conn.exec_driver_sql(f"SET LOCAL statement_timeout = {timeout_ms}")
            if auto_explain:
                async with explained(conn) as cost:
                    rows = (await conn.execute(BASELINE_SQL, params)).all()
                ids = [r.id for r in rows][:LIMIT]
            else:
                cost = PlanCost()
                cost.add((await conn.execute(text(_EXPLAIN + BASELINE_SQL.text), params)).scalar())
            wall = (time.perf_counter() - started) * 1000
    except Exception as error:
        if not _timed_out(error):
            raise
        return Sample(None, float(timeout_ms), float(timeout_ms), None, timed_out=True)
    sample = cost.sample(wall)
    sample.ids = ids
    return sample


# ---------------------------------------------------------------------------------------------
# The measurements


READABLE_IDS_SQL = text(
    f"""/* sibyl:bench.readable_ids */
SELECT t.id, t.passage_total FROM entities t
WHERE t.org_id = :r_org AND t.lifecycle <> 'retired' AND {readable("t")}
ORDER BY t.id"""
)
PASSAGES_OF_SQL = text(
    """/* sibyl:bench.passages_of */
SELECT p.id FROM passages p
WHERE p.org_id = :org AND p.parent_id = ANY(CAST(:ids AS text[]))
ORDER BY p.parent_id, p.passage_index"""
)


@dataclass
class Workload:
    """The deterministic inputs of one run: the reader, seed sets, slice targets."""

    reader: Reader
    seed_sets: dict[str, list[list[str]]]
    slice_targets: list[str]
    readable_hubs: list[str]


async def make_workload(
    engine: AsyncEngine, spec: GraphSpec, summary: GenerateSummary, samples: int
) -> Workload:
    """Pick seed sets and slice targets (from the run's seed) for bench reader 1."""
    rng = random.Random(f"sibyl-bench-run:{spec.seed}")
    async with engine.begin() as conn:
        # reads every readable id of the org: longer than the service's timeout at 1M memories
        await conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        reader = await reader_by_user(conn, user_id=summary.readers[0])
        if reader is None:
            raise RuntimeError(f"bench reader {summary.readers[0]} not found")
        rows = (await conn.execute(READABLE_IDS_SQL, reader.params())).all()
        hubs = set(summary.hubs)
        pool = [r.id for r in rows if r.id not in hubs]
        cut = [r.id for r in rows if r.passage_total > 0]
        readable_hubs = [r.id for r in rows if r.id in hubs]
        n = samples + WARMUP_CALLS
        random_sets = [rng.sample(pool, SEEDS_PER_CALL) for _ in range(n)]
        hub_sets = [
            rng.sample(readable_hubs, min(HUB_SEEDS_PER_CALL, len(readable_hubs)))
            + rng.sample(pool, SEEDS_PER_CALL - min(HUB_SEEDS_PER_CALL, len(readable_hubs)))
            for _ in range(n)
        ]
        parents = rng.sample(cut, min(len(cut), n))
        spans = list(
            (await conn.execute(PASSAGES_OF_SQL, {"org": spec.org, "ids": parents[1::2]}))
            .scalars()
            .all()
        )
        targets: list[str] = []
        for k, parent in enumerate(parents):
            if k % 2 == 0 or not spans:
                targets.append(parent)
            else:
                targets.append(rng.choice(spans))
    return Workload(
        reader=reader,
        seed_sets={"random": random_sets, "hub": hub_sets},
        slice_targets=targets,
        readable_hubs=readable_hubs,
    )


def _case_params(
    reader: Reader, origins: list[str], depth: int, *, preview_chars: int, settings: Settings
) -> dict[str, object]:
    """The walk's bound parameters for a benchmark case: ``depth`` from ``origins``, limit
    :data:`LIMIT`, incoming hops, no filters (what :func:`_expand_request` asks)."""
    return walk_params(
        reader,
        origins=origins,
        depth=depth,
        limit=LIMIT,
        preview_chars=preview_chars,
        include_incoming=True,
        relationship_types=None,
        types=None,
        project=None,
        settings=settings,
    )


def _expand_request(seeds: list[str], depth: int) -> ExpandRequest:
    return ExpandRequest(entity_ids=seeds, depth=depth, limit=LIMIT, include_incoming=True)


@dataclass
class Exactness:
    """The exactness check of one case: uncapped walks compared with the reference answer
    (:mod:`bench.exact`), and how many were equal."""

    compared: int = 0
    equal: int = 0
    differing: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The counts (and the first walks that differed, if any) as JSON-able values."""
        return {"compared": self.compared, "equal": self.equal, "differing": self.differing[:3]}


async def measure_expand(
    engine: AsyncEngine,
    work: Workload,
    *,
    depth: int,
    kind: str,
    samples: int,
    timeout_ms: int,
    auto_explain: bool,
    budget_s: float | None = None,
    keyed: KeyedEngines | None = None,
    key: str | None = None,
    walker: ExactWalker | None = None,
    exactness: Exactness | None = None,
) -> list[Sample]:
    """Service samples of one expand case (after warm-up): the statement REST and MCP send
    (with ``keyed`` engines and an API ``key`` of the reader), else the reader-bound verb. With
    a ``walker``, every answer the service did not flag as capped is compared with the reference
    answer (counted in ``exactness``)."""
    settings = get_settings()

    async def call(request: ExpandRequest, conn: AsyncConnection) -> Any:
        if keyed is not None and key is not None:
            return json.loads(await expand_for_key(conn, key, request, settings=settings))
        response = await expand_neighbors(conn, work.reader, request, settings=settings)
        return response.model_dump(mode="json")

    verbs: list[Verb] = [
        partial(call, _expand_request(seeds, depth))
        for seeds in work.seed_sets[kind][: samples + WARMUP_CALLS]
    ]

    async def note(sample: Sample, response: Any) -> None:
        sample.capped = bool(response["filters"]["frontier_capped"])
        sample.ids = [n["id"] for n in response["neighbors"]]
        if walker is None or exactness is None or sample.capped:
            return
        async with engine.connect() as conn:
            rows, truncated = await walker.walk(conn, response["origins"], depth=depth, limit=LIMIT)
        exactness.compared += 1
        got = [SimpleNamespace(**n) for n in response["neighbors"]]
        if same_answer(got, rows) and truncated == response["truncated"]:
            exactness.equal += 1
        else:
            exactness.differing.append({"origins": response["origins"], "depth": depth})

    return await measure_calls(
        engine,
        verbs,
        timeout_ms=timeout_ms,
        auto_explain=auto_explain,
        on_result=note,
        budget_s=budget_s,
        keyed=keyed,
    )


async def measure_slices(
    engine: AsyncEngine,
    work: Workload,
    samples: int,
    *,
    timeout_ms: int,
    auto_explain: bool,
    budget_s: float | None = None,
) -> list[Sample]:
    """fetch_slice samples (window 3) of cut memories and passages, after warm-up."""

    async def call(target: str, conn: AsyncConnection) -> Any:
        return await fetch_slice(conn, work.reader, SliceRequest(entity_id=target))

    verbs: list[Verb] = [
        partial(call, target) for target in work.slice_targets[: samples + WARMUP_CALLS]
    ]
    return await measure_calls(
        engine, verbs, timeout_ms=timeout_ms, auto_explain=auto_explain, budget_s=budget_s
    )


async def measure_search(
    engine: AsyncEngine,
    work: Workload,
    query: str,
    samples: int,
    *,
    timeout_ms: int,
    auto_explain: bool,
    budget_s: float | None = None,
) -> list[Sample] | None:
    """search samples for ``query`` (limit 10), after warm-up; None without a search verb."""
    try:
        from app.domain import search as search_domain
    except ImportError:  # the search verb is not built yet: leave its slot empty
        return None

    async def verb(conn: AsyncConnection) -> Any:
        request = search_domain.SearchRequest(query=query)
        return await search_domain.search(conn, work.reader, request)

    verbs: list[Verb] = [verb] * (samples + WARMUP_CALLS)
    return await measure_calls(
        engine, verbs, timeout_ms=timeout_ms, auto_explain=auto_explain, budget_s=budget_s
    )


async def measure_baseline_case(
    engine: AsyncEngine,
    work: Workload,
    service: list[Sample],
    *,
    depth: int,
    kind: str,
    samples: int,
    timeout_s: float,
    budget_s: float | None,
    auto_explain: bool,
    log: Log,
) -> tuple[list[Sample], dict[str, int]]:
    """Baseline samples on the first seed sets of a case; and how its answers compared with
    the service's where the service walk was not capped."""
    settings = get_settings()
    out: list[Sample] = []
    agree = {"compared": 0, "equal": 0}
    streak = 0
    async with engine.connect() as conn:
        from app.repo import walk as walk_repo

        origins_of = []
        for seeds in work.seed_sets[kind][WARMUP_CALLS : WARMUP_CALLS + samples]:
            origins_of.append(
                await walk_repo.resolve_seeds(
                    conn, reader_params=work.reader.params(), seeds=seeds, project=None
                )
            )
    deadline = time.monotonic() + budget_s if budget_s else None
    for k, origins in enumerate(origins_of):
        if deadline is not None and time.monotonic() > deadline and len(out) >= 2:
            break
        params = _case_params(work.reader, origins, depth, preview_chars=500, settings=settings)
        comparable = k < len(service) and service[k].capped is False
        sample = await measure_baseline(
            engine, params, timeout_s=timeout_s, auto_explain=auto_explain
        )
        out.append(sample)
        if comparable and auto_explain and not sample.timed_out:
            agree["compared"] += 1
            agree["equal"] += sample.ids == service[k].ids
        streak = streak + 1 if sample.timed_out else 0
        shown = "timeout" if sample.timed_out else f"{sample.db_ms:.0f} ms"
        log(f"  baseline depth {depth} {kind} #{k + 1}: {shown}")
        if streak >= 2:
            break
    return out, agree


QUALITY_SAMPLES = 10  # capped-walk quality: seed sets compared with an uncapped walk
PLANNING_SAMPLES = 10  # planning time: walks re-planned per case
UNCAPPED = Settings(walk_hop_cap=100_000, walk_level_cap=1_000_000, walk_hub_degree=100_000)
TIGHT = Settings(walk_hop_cap=8, walk_level_cap=16)  # caps far below the defaults: walks that cut


async def measure_planning(
    engine: AsyncEngine, work: Workload, *, depth: int, kind: str, samples: int
) -> dict[str, Any]:
    """Planning time of the walk statement for the case's first seed sets: planned with its
    values (custom) and the planning step of an execution on a cached generic plan (what the
    service pays; :func:`app.repo.explain.planning_ms`)."""
    custom: list[float] = []
    generic: list[float] = []
    for seeds in work.seed_sets[kind][WARMUP_CALLS : WARMUP_CALLS + samples]:
        async with read_tx(engine) as conn, capture(conn) as captured:
            await expand_neighbors(conn, work.reader, _expand_request(seeds, depth))
        walk = [st for st in captured if st.name == "sibyl:expand_neighbors"]
        if not walk:
            continue
        async with rolled_back_read(engine) as conn:
            c, g = await planning_ms(conn, walk[0])
        custom.append(c)
        generic.append(g)
    return {
        "n": len(custom),
        "custom_ms": {"p50": _r(percentile(custom, 0.5), 3), "max": _r(max(custom or [0]), 3)},
        "generic_reused_ms": {
            "p50": _r(percentile(generic, 0.5), 3),
            "max": _r(max(generic or [0]), 3),
        },
    }


def _answer_quality(rows: list[Any], exact: list[Any]) -> dict[str, int]:
    """How many of ``rows`` (a walk's top :data:`LIMIT`) belong to the exact top :data:`LIMIT`
    (``exact``, the uncapped walk's rows): ``in_exact`` by id; ``tied_in_exact`` counts a row
    whose (score, distance) ranks no lower than the exact answer's last row, i.e. one that is in
    *an* exact top 24 once ties on score and distance are broken otherwise than by id (the
    generated graph's weights come from 23 relationship weights, so many hops tie and the id
    decides which of them fill the last places)."""
    got = rows[:LIMIT]
    want = exact[:LIMIT]
    ids = {r.id for r in want}
    if len(want) < LIMIT:  # the exact answer is everything reachable: only its rows qualify
        tied = sum(1 for r in got if r.id in ids)
    else:
        last = want[-1]
        tied = sum(
            1
            for r in got
            if r.score > last.score or (r.score == last.score and r.distance <= last.distance)
        )
    return {
        "returned": len(got),
        "in_exact": sum(1 for r in got if r.id in ids),
        "tied_in_exact": tied,
        "equal": [r.id for r in got] == [r.id for r in want],
    }


async def measure_quality(
    url: str, work: Workload, *, depth: int, kind: str, samples: int
) -> dict[str, Any]:
    """Quality under caps (docs/benchmark.md): the case's first ``samples`` seed sets walked with
    the service's caps (the settings of the run), with forced tight caps (:data:`TIGHT`, below the
    limit) and with every cap opened (:data:`UNCAPPED`: exact by construction, nothing is cut and
    the early stop is exact). A *capped walk* is one whose caps dropped at least one hop or node
    (``caps_cut`` of :class:`app.repo.walk.WalkAnswer`), whether or not ``frontier_capped`` says
    the cut could matter. For each cap setting: walks, capped walks, walks flagged, and the share
    of the returned top :data:`LIMIT` in the exact top :data:`LIMIT` (by id, and ties counted),
    over all walks and over the capped ones."""
    from app.repo import walk as walk_repo

    engine = make_engine(url, statement_timeout_ms=120_000)
    settings = {"service": get_settings(), "tight": TIGHT}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    try:
        sets = work.seed_sets[kind][WARMUP_CALLS : WARMUP_CALLS + samples]
        for seeds in sets:
            async with read_tx(engine) as conn:
                origins = await walk_repo.resolve_seeds(
                    conn, reader_params=work.reader.params(), seeds=seeds, project=None
                )
                if not origins:
                    continue

                async def run(
                    s: Settings, conn: AsyncConnection = conn, origins: list[str] = origins
                ) -> Any:
                    params = _case_params(work.reader, origins, depth, preview_chars=0, settings=s)
                    return await walk_repo.walk(conn, params=params)

                exact = await run(UNCAPPED)
                for name, s in settings.items():
                    answer = await run(s)
                    rows[name].append(
                        {
                            "caps_cut": answer.caps_cut,
                            "flagged": answer.capped,
                            "exact_flagged": exact.capped or exact.caps_cut,
                            **_answer_quality(answer.rows, exact.rows),
                        }
                    )
    finally:
        await engine.dispose()

    def share(selected: list[dict[str, Any]], field: str) -> float | None:
        returned = sum(r["returned"] for r in selected)
        return round(100 * sum(r[field] for r in selected) / returned, 1) if returned else None

    def summary(name: str) -> dict[str, Any]:
        out = rows[name]
        cut = [r for r in out if r["caps_cut"]]
        unflagged = [r for r in out if not r["flagged"]]
        return {
            "walks": len(out),
            "caps_cut": len(cut),
            "flagged": sum(r["flagged"] for r in out),
            "in_exact_top_pct": share(out, "in_exact"),
            "tied_in_exact_top_pct": share(out, "tied_in_exact"),
            "capped_in_exact_top_pct": share(cut, "in_exact"),
            "capped_tied_in_exact_top_pct": share(cut, "tied_in_exact"),
            "identical_answers": sum(r["equal"] for r in out),
            "unflagged": len(unflagged),
            "unflagged_identical": sum(r["equal"] for r in unflagged),
            "exact_walks_cut": sum(r["exact_flagged"] for r in out),
        }

    service = summary("service")
    tight = summary("tight")
    return {
        **service,
        "hop_cap": settings["service"].walk_hop_cap or f"limit + 1 + seeds ({LIMIT} + 1 + seeds)",
        "level_cap": settings["service"].walk_level_cap or "4 × (limit + 1)",
        "tight_caps": {
            "hop_cap": TIGHT.walk_hop_cap,
            "level_cap": TIGHT.walk_level_cap,
            **tight,
        },
    }


async def measure_all(
    url: str, spec: GraphSpec, summary: GenerateSummary, options: RunOptions, log: Log
) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """Every in-process measurement (expand, slice, search, baseline) as a JSON-able dict, and
    the seed sets (for the REST cases)."""
    settings = get_settings()
    timeout_ms = settings.statement_timeout_ms
    auto_explain = await auto_explain_available(url)
    log(
        "database cost: auto_explain (each call instrumented as it runs)"
        if auto_explain
        else "database cost: EXPLAIN ANALYZE of generic plans (auto_explain not available)"
    )
    engine = make_engine(url, statement_timeout_ms=timeout_ms)
    if auto_explain:
        enable_auto_explain(engine)
    keyed = KeyedEngines(
        plain=make_engine(url, statement_timeout_ms=timeout_ms),
        instrumented=make_engine(url, statement_timeout_ms=timeout_ms),
        auto_explain=auto_explain,
    )
    if auto_explain:
        enable_auto_explain(statement_engine(keyed.instrumented), session=True)
    key_id, key = await _mint_key_async(url, summary.readers[0])
    try:
        work = await make_workload(engine, spec, summary, options.samples)
        log(
            f"reader {work.reader.user_id}: {len(work.readable_hubs)} readable hubs;"
            f" {options.samples} calls per case"
        )
        async with engine.connect() as conn:
            walker = await ExactWalker.load(conn, work.reader)
        cases: list[dict[str, Any]] = []
        service: dict[tuple[int, str], list[Sample]] = {}
        exact: dict[tuple[int, str], Exactness] = {}
        for depth in DEPTHS:
            for kind in SEED_KINDS:
                exact[(depth, kind)] = Exactness()
                samples = await measure_expand(
                    engine,
                    work,
                    depth=depth,
                    kind=kind,
                    samples=options.samples,
                    timeout_ms=timeout_ms,
                    auto_explain=auto_explain,
                    budget_s=options.case_seconds,
                    keyed=keyed,
                    key=key,
                    walker=walker,
                    exactness=exact[(depth, kind)],
                )
                service[(depth, kind)] = samples
                s = summarize(samples, timeout_ms)
                e = exact[(depth, kind)]
                log(
                    f"expand depth {depth} {kind}: db p50 {s['db_ms']['p50']} ms,"
                    f" p99 {s['db_ms']['p99']} ms, buffers p50 {s['buffers']['p50']},"
                    f" timeouts {s['timeouts']}/{s['n']}; exact {e.equal}/{e.compared}"
                )
        planning: dict[str, Any] = {}
        quality: dict[str, Any] = {}
        for depth in DEPTHS:
            for kind in SEED_KINDS:
                key = f"d{depth}_{kind}"
                planning[key] = await measure_planning(
                    engine, work, depth=depth, kind=kind, samples=PLANNING_SAMPLES
                )
                log(
                    f"planning depth {depth} {kind}: custom p50"
                    f" {planning[key]['custom_ms']['p50']} ms, generic reused p50"
                    f" {planning[key]['generic_reused_ms']['p50']} ms"
                )
                if kind == "hub":
                    quality[key] = await measure_quality(
                        url,
                        work,
                        depth=depth,
                        kind=kind,
                        samples=QUALITY_SAMPLES,
                    )
                    log(f"quality depth {depth} {kind}: {quality[key]}")
        slices: list[Sample] = []
        if work.slice_targets:  # a graph of long memories (the Debian graph has none)
            slices = await measure_slices(
                engine,
                work,
                options.samples,
                timeout_ms=timeout_ms,
                auto_explain=auto_explain,
                budget_s=options.case_seconds,
            )
            log(f"fetch_slice: db p50 {summarize(slices, timeout_ms)['db_ms']['p50']} ms")
        searches: dict[str, Any] = {}
        queries = (
            (("common", COMMON_TERM), ("rare", RARE_TERM), ("question", SEARCH_QUESTION))
            if options.graph == "synthetic"  # the generated text holds these words
            else ()
        )
        for label, query in queries:
            found = await measure_search(
                engine,
                work,
                query,
                options.samples,
                timeout_ms=timeout_ms,
                auto_explain=auto_explain,
                budget_s=options.case_seconds,
            )
            if found is None:
                searches = {}
                log("search: not present (app.domain.search): slot left empty")
                break
            searches[label] = {
                "query": query,
                "matching_passages": summary.term_passages.get(query),
                **summarize(found, timeout_ms),
            }
            log(f"search {query!r}: db p50 {searches[label]['db_ms']['p50']} ms")
        baseline_engine = make_engine(url)
        if auto_explain:
            enable_auto_explain(baseline_engine)
        try:
            for depth in DEPTHS:
                for kind in SEED_KINDS:
                    base, agree = await measure_baseline_case(
                        baseline_engine,
                        work,
                        service[(depth, kind)],
                        depth=depth,
                        kind=kind,
                        samples=options.baseline_samples,
                        timeout_s=options.baseline_timeout_s,
                        budget_s=options.baseline_case_seconds,
                        auto_explain=auto_explain,
                        log=log,
                    )
                    svc = summarize(service[(depth, kind)], timeout_ms)
                    bas = summarize(base, int(options.baseline_timeout_s * 1000))
                    ratio = None  # undefined when the service's own p50 is a timeout
                    svc_p50, bas_p50 = svc["db_ms"]["p50"], bas["db_ms"]["p50"]
                    if svc_p50 and bas_p50 is not None and svc_p50 < timeout_ms:
                        ratio = round(bas_p50 / svc_p50, 1)
                    cases.append(
                        {
                            "verb": "expand_neighbors",
                            "statement": "sibyl:expand_neighbors.keyed",
                            "depth": depth,
                            "seeds": kind,
                            "service": svc,
                            "exact": exact[(depth, kind)].as_dict(),
                            "baseline": {
                                **bas,
                                "timeout_ms": int(options.baseline_timeout_s * 1000),
                                "lower_bound": bas["timeouts"] > 0,
                                "answers": agree,
                            },
                            "ratio_p50": ratio,
                            "ratio_is_lower_bound": bas["timeouts"] > 0,
                        }
                    )
        finally:
            await baseline_engine.dispose()
        measured = {
            "db_cost_source": "auto_explain" if auto_explain else "explain_generic",
            "reader": work.reader.user_id,
            "readable_hubs": len(work.readable_hubs),
            "expand": cases,
            "planning": planning,
            "quality": quality,
            "fetch_slice": summarize(slices, timeout_ms) if slices else None,
            "search": searches or None,
        }
        return measured, work.seed_sets
    finally:
        await _revoke_key_async(url, key_id)
        await engine.dispose()
        await keyed.plain.dispose()
        await keyed.instrumented.dispose()


# ---------------------------------------------------------------------------------------------
# REST end to end


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss_mb(pid: int) -> float | None:
    """Peak resident set size (VmHWM) of process ``pid``, in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _backend_cpu_seconds(url: str) -> float:
    """CPU seconds of the database backends serving the ``sibyl-pg`` server on this database
    (read from /proc: the server runs on this machine)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        pids = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'sibyl-pg' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return sum(_cpu_seconds(int(r["pid"])) for r in pids)


def server_command(port: int) -> list[str]:
    """``sibyl-pg serve`` on ``port``, run as ``python -m app.cli`` by this interpreter: with
    :func:`server_env`, the server imports the very ``app`` package this benchmark imported."""
    return [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]


def server_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a served subprocess: this one, ``extra``, and ``PYTHONPATH`` led by
    the folder holding the ``app`` package this process imported. The project is installed
    editable, so the ``sibyl-pg`` script imports the checkout it was installed from: a benchmark
    run from another checkout (an older tree, for a before/after pair) would otherwise measure
    that one's server, not its own. A served benchmark writes no vectors
    (``SIBYL_EMBED_INTERVAL_S=0`` unless ``extra`` says otherwise): the embedding worker would
    compete for the CPU with what is measured."""
    import app

    root = str(Path(app.__file__).resolve().parents[1])
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    quiet = {"SIBYL_EMBED_INTERVAL_S": "0"}
    return {**os.environ, **quiet, **extra, "PYTHONPATH": os.pathsep.join(paths)}


def _mint_key(url: str, user: str) -> tuple[str, str]:
    """(key id, key) of a new read key of ``user``."""
    return asyncio.run(_mint_key_async(url, user))


def _revoke_key(url: str, key_id: str) -> None:
    asyncio.run(_revoke_key_async(url, key_id))


async def _mint_key_async(url: str, user: str) -> tuple[str, str]:
    from app.domain.keys import create_key

    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            return await create_key(conn, user_id=user, scopes=["read"], label="bench")
    finally:
        await engine.dispose()


async def _revoke_key_async(url: str, key_id: str) -> None:
    from app.domain.keys import revoke_key

    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await revoke_key(conn, key_id=key_id)
    finally:
        await engine.dispose()


class KeepAliveClient:
    """A lean HTTP/1.1 client over one keep-alive connection, for the load generator only.

    The load generator shares the machine's cores with the server and the database, so its own
    cost counts against the throughput it measures: httpx took ~1.3 ms of CPU a request (about a
    sixth of a request's whole cost on 2 cores). This sends ``POST`` with a JSON body and reads
    the status line, the headers and a ``Content-Length`` or chunked body: nothing else (no
    redirects, no TLS, no compression). A dropped connection is reopened on the next request.
    """

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, *, timeout_s: float = 30.0) -> tuple[int, bytes]:
        """``POST path`` with JSON ``body``; (status code, response body bytes). Raises
        ``OSError``, ``asyncio.IncompleteReadError`` or ``TimeoutError`` on a transport fault
        (the connection is then closed and reopened by the next call)."""
        try:
            return await asyncio.wait_for(self._post(path, body), timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            await self.close()
            raise

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.reader, self.writer
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
            + self.head
            + b"\r\n"
            + body
        )
        await writer.drain()
        status = int((await reader.readline()).split(b" ", 2)[1])
        length, chunked, close = 0, False, False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if chunked:
            parts = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                parts.append(await reader.readexactly(size + 2))
            await reader.readline()
            data = b"".join(p[:-2] for p in parts)
        else:
            data = await reader.readexactly(length)
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        """Close the connection (if open)."""
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _load(
    base: str,
    key: str,
    seed_sets: list[list[str]],
    *,
    clients: int,
    seconds: float,
    depth: int = 2,
    warmup_s: float = 2.0,
) -> dict[str, Any]:
    """``clients`` concurrent clients posting expand (``depth``) for ``seconds`` (after
    ``warmup_s`` of warm-up), each over one keep-alive connection (:class:`KeepAliveClient`);
    latency percentiles, throughput and errors (any answer but a 200, or a transport fault)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    start = time.monotonic()
    measure_from = start + warmup_s
    stop = measure_from + seconds

    async def client(k: int) -> None:
        rng = random.Random(f"sibyl-bench-rest:{k}")
        http = KeepAliveClient(host, int(port), headers)
        try:
            while True:
                now = time.monotonic()
                if now >= stop:
                    return
                body = {
                    "entity_ids": rng.choice(seed_sets),
                    "depth": depth,
                    "limit": LIMIT,
                    "include_incoming": True,
                }
                t0 = time.perf_counter()
                try:
                    code, _ = await http.post("/api/search/expand", json.dumps(body).encode())
                    status = str(code)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
                    status = type(error).__name__
                elapsed = (time.perf_counter() - t0) * 1000
                if now >= measure_from:
                    latencies.append(elapsed)
                    statuses[status] = statuses.get(status, 0) + 1
        finally:
            await http.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    total = sum(statuses.values())
    errors = total - statuses.get("200", 0)
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": total,
        "throughput_rps": round(total / seconds, 1),
        "latency_ms": {f"p{q}": _r(percentile(latencies, q / 100)) for q in (50, 95, 99)},
        "errors": errors,
        "statuses": statuses,
    }


def measure_rest(
    url: str,
    summary: GenerateSummary,
    seed_sets: dict[str, list[list[str]]],
    options: RunOptions,
    log: Log,
) -> dict[str, Any]:
    """Start ``sibyl-pg serve`` on a free loopback port, load it, stop it; REST figures."""
    options.out.mkdir(parents=True, exist_ok=True)
    key_id, key = _mint_key(url, summary.readers[0])
    try:
        with serving(url, options.out / "server.log") as (base, proc):
            rss_idle = _peak_rss_mb(proc.pid)
            work_sets = seed_sets["random"]
            load_one = os.getloadavg()
            cases: list[dict[str, Any]] = []
            for depth in DEPTHS:
                for kind in SEED_KINDS:
                    case = asyncio.run(
                        _load(
                            base,
                            key,
                            seed_sets[kind],
                            clients=1,
                            seconds=min(options.rest_case_seconds, options.load_seconds),
                            depth=depth,
                            warmup_s=1.0,
                        )
                    )
                    cases.append({"depth": depth, "seeds": kind, **case})
                    log(
                        f"REST one client, depth {depth} {kind}: p50"
                        f" {case['latency_ms']['p50']} ms, p95 {case['latency_ms']['p95']} ms,"
                        f" {case['throughput_rps']} req/s, errors {case['errors']}"
                    )
            one = next(c for c in cases if c["depth"] == 2 and c["seeds"] == "random")
            port = base.rsplit(":", 1)[1]
            log(f"REST: server pid {proc.pid} on port {port}; {options.clients} clients")
            load_before = os.getloadavg()
            before = _cpu_seconds(proc.pid), asyncio.run(_backend_cpu_seconds(url))
            load_cpu = time.process_time()
            wall = time.monotonic()
            result = asyncio.run(
                _load(
                    base,
                    key,
                    work_sets,
                    clients=options.clients,
                    seconds=options.load_seconds,
                )
            )
            wall = time.monotonic() - wall
            load_cpu = time.process_time() - load_cpu
            after = _cpu_seconds(proc.pid), asyncio.run(_backend_cpu_seconds(url))
            result["one_client"] = one
            result["one_client_cases"] = cases
            result["load_average_one_client"] = [round(x, 2) for x in load_one]
            result["load_average"] = {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in os.getloadavg()],
            }
            # CPU ms a request: the whole run's requests, warm-up included, at the same rate
            sent = max(1.0, result["throughput_rps"] * wall)
            result["cpu_ms_per_request"] = {
                "server": round((after[0] - before[0]) / sent * 1000, 2),
                "postgres_backends": round((after[1] - before[1]) / sent * 1000, 2),
                "load_generator": round(load_cpu / sent * 1000, 2),
            }
            result["cpu_seconds"] = {
                "wall": round(wall, 1),
                "server": round(after[0] - before[0], 1),
                "postgres_backends": round(after[1] - before[1], 1),
                "load_generator": round(load_cpu, 1),
                "machine_capacity": round(wall * (os.cpu_count() or 1), 1),
                "note": "the database backends of the server's pool only; other sessions "
                "on the machine take the rest",
            }
            result["server_peak_rss_mb"] = _peak_rss_mb(proc.pid)
            result["server_rss_after_start_mb"] = rss_idle
    finally:
        _revoke_key(url, key_id)
    log(
        f"REST: {result['throughput_rps']} req/s, p50 {result['latency_ms']['p50']} ms,"
        f" p99 {result['latency_ms']['p99']} ms, errors {result['errors']},"
        f" peak RSS {result['server_peak_rss_mb']} MB"
    )
    return result


@contextlib.contextmanager
def serving(
    url: str, log_path: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``sibyl-pg serve`` on a free loopback port against the database ``url`` (with ``env``
    added to its environment), its output in ``log_path``: (its base URL, its process) once
    ``/readyz`` answers 200 (``RuntimeError`` after 60 s); stopped (SIGINT, then SIGKILL after
    15 s) on the way out."""
    port = _free_port()
    with log_path.open("w") as server_log:
        proc = subprocess.Popen(
            server_command(port),
            env=server_env({**(env or {}), "DATABASE_URL": url}),
            stdout=server_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base, proc, timeout_s=60.0)
            yield base, proc
        finally:
            _stop(proc)


def _wait_ready(base: str, proc: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} (see server.log)")
        try:
            if httpx.get(base + "/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become ready in time (see server.log)")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


# ---------------------------------------------------------------------------------------------
# Machine, targets, output


async def _server_facts(url: str) -> dict[str, Any]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        facts = {
            "version": await conn.fetchval("SELECT version()"),
            "shared_buffers": await conn.fetchval("SHOW shared_buffers"),
            "work_mem": await conn.fetchval("SHOW work_mem"),
            "jit": await conn.fetchval("SHOW jit"),
            "database_size": await conn.fetchval(
                "SELECT pg_size_pretty(pg_database_size(current_database()))"
            ),
        }
        return facts
    finally:
        await conn.close()


def machine_facts() -> dict[str, Any]:
    """CPU count and model, memory, Python and OS of this machine."""
    facts: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                facts["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return facts


def code_facts() -> dict[str, Any]:
    """Which code was measured: the git commit (and whether the tree had changes) and a hash
    of the walk's SQL, so figures can be tied to the walk they came from."""
    import hashlib

    from app.repo import walk as walk_repo

    facts: dict[str, Any] = {
        "walk_sql_sha256": hashlib.sha256(walk_repo.WALK_SQL.text.encode()).hexdigest()[:16]
    }
    state = git_state()
    if state is not None:
        facts["git_head"], facts["git_dirty"] = state
    return facts


def git_state() -> tuple[str, bool] | None:
    """(short HEAD, tracked files changed) of the project's checkout; None outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip(), bool(dirty.stdout.strip())


def _case(results: dict[str, Any], depth: int, kind: str) -> dict[str, Any] | None:
    for case in results.get("expand", []):
        if case["depth"] == depth and case["seeds"] == kind:
            return dict(case)
    return None


def evaluate_targets(results: dict[str, Any], spec: GraphSpec) -> list[dict[str, Any]]:
    """The benchmark's targets against what was measured (met: True/False/None = not measured)."""
    out: list[dict[str, Any]] = []

    def target(name: str, measured: float | None, limit: float, *, at_least: bool = False) -> None:
        met = None if measured is None else (measured >= limit if at_least else measured <= limit)
        out.append({"target": name, "measured": measured, "limit": limit, "met": met})

    hub3 = _case(results, 3, "hub")
    if hub3:
        target("expand depth 3 hubs: db p50 ms", hub3["service"]["db_ms"]["p50"], 10)
        target("expand depth 3 hubs: db p99 ms", hub3["service"]["db_ms"]["p99"], 30)
        target("expand depth 3 hubs: x faster than baseline", hub3["ratio_p50"], 100, at_least=True)
        target("expand depth 3 hubs: shared buffers p95", hub3["service"]["buffers"]["p95"], 5000)
    for depth in DEPTHS:
        case = _case(results, depth, "random")
        if case:
            target(
                f"expand depth {depth} random: shared buffers p95",
                case["service"]["buffers"]["p95"],
                5000,
            )
    planned = [p["generic_reused_ms"]["max"] for p in (results.get("planning") or {}).values()]
    if planned:
        target("walk planning per call (generic reused), max ms", max(planned), 1)
    for key, q in (results.get("quality") or {}).items():
        # capped walks: the service's caps dropped at least one hop or node (caps_cut)
        target(
            f"quality {key}: capped walks ({q['caps_cut']} of {q['walks']}), top 24 in exact"
            " top 24 %",
            q["capped_in_exact_top_pct"],
            95,
            at_least=True,
        )
        tight = q["tight_caps"]
        target(
            f"quality {key}, forced caps {tight['hop_cap']}/{tight['level_cap']}"
            f" ({tight['caps_cut']} of {tight['walks']} capped): top 24 in an exact top 24 %"
            f" (ties on score and distance counted; by id {tight['capped_in_exact_top_pct']} %)",
            tight["capped_tied_in_exact_top_pct"],
            95,
            at_least=True,
        )
    if results.get("fetch_slice"):  # not measured by a REST-only run, nor on the Debian graph
        target("fetch_slice: db p50 ms", results["fetch_slice"]["db_ms"]["p50"], 3)
    debian = results.get("graph", {}).get("kind") == "debian"
    for label, what in (("common", "~100k x scale passages"), ("question", "6-word question")):
        if debian:
            break  # the package index holds no generated text to search
        found = (results.get("search") or {}).get(label)
        target(f"search ({what}): db p50 ms", found and found["db_ms"]["p50"], 30)
        target(f"search ({what}): db p99 ms", found and found["db_ms"]["p99"], 100)
        target(f"search ({what}): shared buffers p95", found and found["buffers"]["p95"], 20_000)
    # the walk at index speed (db execution of the served statement, REST end to end)
    for case in results.get("expand", []):
        hub = case["seeds"] == "hub"
        name = f"expand depth {case['depth']} {case['seeds']}"
        if debian:
            target(
                f"{name}: db execution p50 ms", case["service"]["db_ms"]["p50"], 4 if hub else 1.5
            )
        exact = case.get("exact")
        if exact is not None:
            target(
                f"{name}: uncapped answers equal to the exact recomputation"
                f" ({exact['equal']} of {exact['compared']})",
                exact["compared"] - exact["equal"],
                0,
            )
    rest = results.get("rest")
    if rest:
        floor = 300 if debian else 600
        target(
            "REST expand depth 2, 16 clients: req/s", rest["throughput_rps"], floor, at_least=True
        )
        for one in rest.get("one_client_cases", []):
            if debian:
                target(
                    f"REST expand depth {one['depth']} {one['seeds']}, one client: p50 ms",
                    one["latency_ms"]["p50"],
                    6 if one["seeds"] == "hub" else 2.5,
                )
        one = rest.get("one_client")
        if one and not debian:
            target("REST expand depth 2, one client: p50 ms", one["latency_ms"]["p50"], 10)
        target("REST: errors", rest["errors"], 0)
        target("server peak RSS MB", rest["server_peak_rss_mb"], 400)
    for t in out:
        t["scale_note"] = (
            None
            if spec.entities >= 1_000_000 or debian
            else f"targets are set for 1M memories / 8M edges; this graph is {spec.entities:,}"
            f" / {spec.edges:,}"
        )
    return out


def write_chart(results: dict[str, Any], path: Path) -> bool:
    """Latency (db p50, p95 as error bar) by depth, service vs baseline, random vs hub seeds.

    Returns False (and writes nothing) when matplotlib is not installed (``pip install
    '.[bench]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {
        ("service", "random"): ("tab:blue", "o", "-"),
        ("service", "hub"): ("tab:blue", "s", "--"),
        ("baseline", "random"): ("tab:red", "o", "-"),
        ("baseline", "hub"): ("tab:red", "s", "--"),
    }
    timeout_ms = None
    for (who, kind), (color, marker, line) in styles.items():
        xs: list[int] = []
        p50: list[float] = []
        err: list[float] = []
        for depth in DEPTHS:
            case = _case(results, depth, kind)
            if case is None or case[who]["db_ms"]["p50"] is None:
                continue
            xs.append(depth)
            p50.append(case[who]["db_ms"]["p50"])
            err.append(max(0.0, (case[who]["db_ms"]["p95"] or 0) - case[who]["db_ms"]["p50"]))
            if who == "baseline":
                timeout_ms = case["baseline"]["timeout_ms"]
        if xs:
            ax.errorbar(
                xs,
                p50,
                yerr=[[0.0] * len(err), err],
                color=color,
                marker=marker,
                linestyle=line,
                capsize=4,
                label=f"{who}, {kind} seeds (p50, bar to p95)",
            )
    if timeout_ms:
        ax.axhline(timeout_ms, color="grey", linestyle=":", linewidth=1)
        ax.text(1, timeout_ms * 1.1, f"baseline timeout {timeout_ms / 1000:.0f} s", fontsize=8)
    service_timeout = results.get("settings", {}).get("statement_timeout_ms")
    if service_timeout:
        ax.axhline(service_timeout, color="tab:blue", linestyle=":", linewidth=1)
        ax.text(
            1, service_timeout * 1.1, f"service timeout {service_timeout / 1000:g} s", fontsize=8
        )
    ax.set_yscale("log")
    ax.set_xticks(list(DEPTHS))
    ax.set_xlabel("expand depth (8 seeds, limit 24, incoming on)")
    ax.set_ylabel("database time per call, ms (log)")
    graph = results.get("graph", {})
    ax.set_title(
        f"expand_neighbors vs baseline walk: {graph.get('entities', 0):,} memories,"
        f" {graph.get('edges', 0):,} edges",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _fmt(value: Any, lower: bool = False) -> str:
    if value is None:
        return "-"
    text_ = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
    return ("≥" + text_) if lower else text_


def _ms(summary: dict[str, Any], key: str, q: str) -> str:
    """A percentile, marked ``≥`` when it sits at the timeout (a timed-out call's value)."""
    value = summary[key][q]
    timeout = summary.get("timeout_ms")
    lower = bool(summary.get("timeouts")) and value is not None and timeout is not None
    return _fmt(value, lower and value >= timeout)


def render_table(results: dict[str, Any]) -> str:
    """The printed table: one row per measured case."""
    from rich.console import Console
    from rich.table import Table

    source = {
        "auto_explain": "db = execution as auto_explain logs it",
        "explain_generic": "db = planning + execution of generic plans (EXPLAIN ANALYZE)",
    }.get(str(results.get("db_cost_source")), "db = database time")
    table = Table(title=f"sibyl-pg benchmark (ms; wall = the verb in process; {source})")
    for column in (
        "case",
        "wall p50",
        "db p50",
        "db p95",
        "db p99",
        "jit",
        "buffers p50",
        "capped",
        "baseline p50",
        "baseline buffers",
        "ratio",
    ):
        table.add_column(column, justify="left" if column == "case" else "right")
    for case in results.get("expand", []):
        s, b = case["service"], case["baseline"]
        lower = bool(b["lower_bound"])
        table.add_row(
            f"expand d{case['depth']} {case['seeds']}",
            _ms(s, "wall_ms", "p50"),
            _ms(s, "db_ms", "p50"),
            _ms(s, "db_ms", "p95"),
            _ms(s, "db_ms", "p99"),
            _fmt(s["jit_share"]),
            _fmt(s["buffers"]["p50"]),
            _fmt(s["capped_share"]),
            _ms(b, "db_ms", "p50"),
            _fmt(b["buffers"]["p50"]),
            _fmt(case["ratio_p50"], lower),
        )
    rows: list[tuple[str, dict[str, Any]]] = (
        [("fetch_slice", results["fetch_slice"])] if results.get("fetch_slice") else []
    )
    for label, found in (results.get("search") or {}).items():
        rows.append((f"search {found['query']!r} ({label})", found))
    for name, s in rows:
        table.add_row(
            name,
            _ms(s, "wall_ms", "p50"),
            _ms(s, "db_ms", "p50"),
            _ms(s, "db_ms", "p95"),
            _ms(s, "db_ms", "p99"),
            _fmt(s["jit_share"]),
            _fmt(s["buffers"]["p50"]),
            "",
            "",
            "",
            "",
        )
    console = Console(file=io.StringIO(), record=True, width=140)
    console.print(table)
    rest = results.get("rest")
    if rest:
        console.print(
            f"REST expand depth 2, {rest['clients']} clients, {rest['seconds']:.0f} s:"
            f" {rest['throughput_rps']} req/s, p50 {rest['latency_ms']['p50']} ms,"
            f" p95 {rest['latency_ms']['p95']} ms, p99 {rest['latency_ms']['p99']} ms,"
            f" errors {rest['errors']}, server peak RSS {rest['server_peak_rss_mb']} MB"
        )
    for t in results.get("targets", []):
        mark = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        console.print(f"target {t['target']}: {_fmt(t['measured'])} (limit {t['limit']}): {mark}")
    return console.export_text()


async def _rest_seeds(
    url: str, spec: GraphSpec, summary: GenerateSummary, options: RunOptions
) -> dict[str, list[list[str]]]:
    """The seed sets of the run (the same :func:`make_workload` picks for the in-process
    cases), for a REST-only run."""
    engine = make_engine(url)
    try:
        work = await make_workload(engine, spec, summary, options.samples)
    finally:
        await engine.dispose()
    return work.seed_sets


def run_benchmark(spec: GraphSpec, options: RunOptions, *, log: Log) -> dict[str, Any]:
    """The whole run (see the module docstring); writes results.json and latency.png."""
    started = time.monotonic()
    if options.graph == "debian":
        from bench import debian

        summary = debian.ensure_debian_graph(options.database, force=options.regenerate, log=log)
        # the run's seed and the org; the sizes are the converted graph's
        spec = GraphSpec(
            entities=max(200, summary.counts.get("entity", 0)),
            edges=summary.counts.get("edge", 0),
            seed=spec.seed,
            org=summary.org,
        )
    else:
        summary = ensure_graph(spec, options.database, force=options.regenerate, log=log)
    url = benchdb.bench_url(options.database)
    settings = get_settings()
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "quick" if options.quick else "full",
        "graph": {
            **spec.as_dict(),
            "kind": options.graph,
            "database": options.database,
            **summary.as_dict(),
        },
        "machine": machine_facts(),
        "code": code_facts(),
        "postgres": asyncio.run(_server_facts(url)),
        "settings": {
            "walk_hop_cap": settings.walk_hop_cap,
            "walk_level_cap": settings.walk_level_cap,
            "walk_hub_degree": settings.walk_hub_degree,
            "statement_timeout_ms": settings.statement_timeout_ms,
            "samples": options.samples,
            "baseline_samples": options.baseline_samples,
            "baseline_timeout_s": options.baseline_timeout_s,
            "case_seconds": options.case_seconds,
            "baseline_case_seconds": options.baseline_case_seconds,
            "limit": LIMIT,
            "seeds_per_call": SEEDS_PER_CALL,
            "hub_seeds_per_call": HUB_SEEDS_PER_CALL,
        },
    }
    if options.rest_only:
        results["rest"] = measure_rest(
            url, summary, asyncio.run(_rest_seeds(url, spec, summary, options)), options, log
        )
        results["targets"] = evaluate_targets(results, spec)
        results["seconds"] = round(time.monotonic() - started, 1)
        options.out.mkdir(parents=True, exist_ok=True)
        (options.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        sys.stdout.write(json.dumps(results["rest"], indent=2) + "\n")
        log(f"results: {options.out / 'results.json'}")
        return results
    measured, seed_sets = asyncio.run(measure_all(url, spec, summary, options, log))
    results.update(measured)
    if options.rest:
        results["rest"] = measure_rest(url, summary, seed_sets, options, log)
    results["targets"] = evaluate_targets(results, spec)
    results["seconds"] = round(time.monotonic() - started, 1)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    charted = write_chart(results, options.out / "latency.png")
    sys.stdout.write(render_table(results) + "\n")
    log(f"results: {options.out / 'results.json'}")
    log(
        f"chart: {options.out / 'latency.png'}"
        if charted
        else "chart skipped: matplotlib is not installed (pip install '.[bench]')"
    )
    log(f"bench run took {results['seconds']:.0f}s")
    return results
