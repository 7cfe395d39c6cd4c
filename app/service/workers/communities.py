"""The automatic rebuild of communities retired by writes (rule: communities-follow-readability):
without it, one small write would remove the ``SHARES_COMMUNITY`` neighbours of every reader of
the org until an operator ran ``sibyl-pg communities rebuild``.

A write that retires (or may change) an org's communities records it in its transaction
(``community_retirements``, :func:`app.repo.communities.mark`). Every serving process (``make
run``: REST and MCP over HTTP; ``sibyl-pg mcp``) runs a :class:`CommunityRefresher`: every
``SIBYL_COMMUNITIES_REFRESH_S`` seconds (default 120; 0 turns it off) it rebuilds the orgs with
such records (:func:`app.domain.communities.rebuild`, which replaces nothing when a write
changed the org while it read, so nothing stale is stored; the org stays due and is tried at
the next look), then vacuums the community tables (autovacuum may be off: the walk reads them
by index-only scans).

Bounds: one process rebuilds at a time (a session advisory lock of its own key space); an org is
rebuilt at most once per max(interval, :data:`GAP_FACTOR` × its last rebuild's duration);
detection (Louvain, in Python) runs in a worker thread, and an org with more than
``SIBYL_COMMUNITIES_AUTO_MAX_LINKS`` links (default 200,000) is left to the operator's
``sibyl-pg communities rebuild`` (logged once per process), since its detection would take the
serving process's CPU for minutes; a failed look (database down) is retried after 2, 4, ... 32
intervals. Rebuilding changes when communities exist, never who may read them: detection runs
per audience and the walk applies the read rule to every member (docs/communities.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import cancelling
from app.domain.communities import CommunitiesChanged, rebuild
from app.repo import communities as repo
from app.service.workers import tick

log = logging.getLogger("sibyl_pg.communities")

GAP_FACTOR = 10.0
"""An org is rebuilt at most once per this many times its last rebuild's duration."""
OVERTAKEN_LIMIT = 3
"""After this many rebuilds of an org in a row overtaken by writes (in this process), the next
one holds the writes that would retire communities back while it runs (when it is quick)."""
HOLD_AFTER_INTERVALS = 3
"""The same once the org's oldest retirement record has waited this many intervals, whichever
process tried before (a breaker: two servers taking turns were overtaken 5-6 times in a row)."""
HOLD_WRITES_MAX_S = 1.0
"""The longest this process saw the org's last rebuild take for a rebuild to hold writes back:
they wait for it (the service's statement timeout is 2 s by default)."""
HOLD_WRITES_MAX_LINKS = 20_000
"""Without such a measure, the largest org (edges + mentions) a rebuild holds writes back for
(the PEP corpus: 1,713 links, about 0.5 s)."""

TICK_LOCK = "communities.refresher"
"""The refresher's tick lock (:func:`app.repo.workers.tick_lock`)."""


@dataclass(frozen=True)
class Outcome:
    """What one look did to one due org: ``rebuilt`` (with its community count and seconds),
    ``changed`` (a write during the rebuild: nothing replaced, tried again later), ``too_big``
    (over the link bound: the operator's job) or ``failed`` (``error`` says why)."""

    status: str
    communities: int = 0
    seconds: float = 0.0
    error: str | None = None


class CommunityRefresher(tick.OwnEngine):
    """Rebuilds the communities of due orgs every ``interval_s`` seconds (module docstring), on
    an engine of its own (:class:`app.service.workers.tick.OwnEngine`). ``max_links``: the largest
    org (edges + mentions) rebuilt here; ``orgs``: only these (None: every org of the
    database); ``clock``: seconds."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        interval_s: float,
        max_links: int,
        orgs: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(engine)
        self.interval_s = interval_s
        self.max_links = max_links
        self.orgs = None if orgs is None else set(orgs)
        self.clock = clock
        self._next_allowed: dict[str, float] = {}
        self._overtaken: dict[str, int] = {}
        self._last_seconds: dict[str, float] = {}
        self._told_too_big: set[str] = set()

    async def tick(self) -> dict[str, Outcome]:
        """One look: rebuild every due org whose gap has passed (by id) and say what happened
        to each; empty when another process holds the refresher's lock or nothing is due."""
        engine = self._own_engine()
        done: dict[str, Outcome] = {}
        async with engine.connect() as conn, tick.session_lock(conn, TICK_LOCK) as held:
            if not held:
                return {}
            due = await repo.due_orgs(conn)
            now = self.clock()
            for org_id, waited_s in due.items():
                if self.orgs is not None and org_id not in self.orgs:
                    continue
                if self._next_allowed.get(org_id, now) > now:
                    continue
                links = await repo.link_count(conn, org_id=org_id)
                await conn.commit()
                if links > self.max_links:
                    done[org_id] = Outcome("too_big")
                    continue
                done[org_id] = await self._rebuild(
                    engine, org_id, self._holds(org_id, waited_s, links)
                )
            return done

    def _holds(self, org_id: str, waited_s: float, links: int) -> bool:
        """Whether the next rebuild of ``org_id`` holds its retiring writes back: it was
        overtaken :data:`OVERTAKEN_LIMIT` times in a row here, or its oldest retirement record
        has waited :data:`HOLD_AFTER_INTERVALS` intervals; and it is quick (its last rebuild
        here took at most :data:`HOLD_WRITES_MAX_S`, or, never measured here, it has at most
        :data:`HOLD_WRITES_MAX_LINKS` links)."""
        starved = (
            self._overtaken.get(org_id, 0) >= OVERTAKEN_LIMIT
            or waited_s >= HOLD_AFTER_INTERVALS * self.interval_s
        )
        last = self._last_seconds.get(org_id)
        quick = last <= HOLD_WRITES_MAX_S if last is not None else links <= HOLD_WRITES_MAX_LINKS
        return starved and quick

    async def _rebuild(self, engine: AsyncEngine, org_id: str, hold: bool) -> Outcome:
        """Rebuild ``org_id``, holding its retiring writes back when ``hold`` (:meth:`_holds`;
        a breaker: under 20 writes a second every rebuild was overtaken, for as long as they
        ran)."""
        started = self.clock()
        try:
            async with engine.connect() as conn:
                async with conn.begin():
                    summary = await rebuild(conn, org_id=org_id, hold_writes=hold)
                await _analyze(conn)
        except CommunitiesChanged:
            self._overtaken[org_id] = self._overtaken.get(org_id, 0) + 1
            outcome = Outcome("changed", seconds=self.clock() - started)
        except Exception as exc:  # one org's failure must not hold the others back
            if cancelling():
                raise
            outcome = Outcome("failed", error=tick.exc_line(exc))
        else:
            self._overtaken.pop(org_id, None)
            outcome = Outcome("rebuilt", communities=summary.count, seconds=summary.seconds)
        if outcome.status != "failed":
            self._last_seconds[org_id] = outcome.seconds
        gap = max(self.interval_s, GAP_FACTOR * outcome.seconds)
        self._next_allowed[org_id] = self.clock() + gap
        return outcome

    def _report(self, done: dict[str, Outcome]) -> None:
        for org_id, o in done.items():
            if o.status == "rebuilt":
                log.info(
                    "communities of %s rebuilt: %d in %.1f s", org_id, o.communities, o.seconds
                )
            elif o.status == "changed":
                log.info("communities of %s changed by a write while rebuilt: next look", org_id)
            elif o.status == "failed":
                log.warning("communities of %s not rebuilt: %s", org_id, o.error)
            elif org_id not in self._told_too_big:
                self._told_too_big.add(org_id)
                log.warning(
                    "communities of %s are stale: it has more than %d links"
                    " (SIBYL_COMMUNITIES_AUTO_MAX_LINKS); run `sibyl-pg communities rebuild"
                    " --org %s` (cron)",
                    org_id,
                    self.max_links,
                    org_id,
                )

    async def run(self) -> None:
        """Tick every ``interval_s`` seconds until cancelled, logging each outcome; its own
        engine is disposed on the way out."""
        try:
            await tick.run_every(self.interval_s, self.tick, self._report, "community rebuild")
        finally:
            await self.close()


def lifespan(
    engine: AsyncEngine, interval_s: float, max_links: int
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs a :class:`CommunityRefresher` of ``engine`` in the background while
    it is entered (nothing when ``interval_s`` is 0) and cancels it on exit."""
    return tick.background(
        interval_s,
        lambda: CommunityRefresher(engine, interval_s=interval_s, max_links=max_links).run(),
    )


async def _analyze(conn: AsyncConnection) -> None:
    """``VACUUM (ANALYZE)`` the community tables on ``conn``, the connection that just wrote
    them (its row counts flushed first): analyzed on another connection, the doctor would find
    ``community_members`` changed since its ANALYZE once the writer's counts came in. Statistics
    only: a failure here leaves the rebuild as it is."""
    try:
        await repo.vacuum(await conn.execution_options(isolation_level="AUTOCOMMIT"))
    except Exception as exc:
        if cancelling():
            raise
        log.warning("community tables not analyzed after a rebuild: %s", tick.exc_line(exc))
