"""The automatic refresh of the search word statistics (rule: word-stats-per-audience;
docs/search.md).

The full-text lane weighs words from per-audience document counts (:mod:`app.domain.terms`).
A write that changes or removes a counted memory retires its audience, and until a recount every
reader of that audience gets the fixed English fallback weights; a memory created since the
count is in none of it (its words weigh as if no document held them). Without a recount a live
service would fall back after its first edit. So every serving process (``make run``: REST and
MCP over HTTP; ``sibyl-pg mcp``) runs a :class:`Refresher`: every ``SIBYL_STATS_REFRESH_S``
seconds (default 60; 0 turns it off) it asks which orgs are due
(:func:`app.repo.term_stats.due_orgs`: a retired audience, an audience never counted, or a
memory created since its audience's count, a memory moved into an audience) and recounts each
(:func:`app.repo.term_stats.recount`: writes are never held back, and a write during the
count leaves its audience retired, so nothing stale is stamped fresh).

Bounds: one process refreshes at a time (a session advisory lock in a key space of its own;
the others skip their turn); the refresher uses an engine of its own (the service's pool is
never short of a connection); an org is recounted at most once per max(interval,
:data:`GAP_FACTOR` × its last recount's duration), so a large org's recount takes at most about
a tenth of a core; an org whose recount fails (its writes left no gap for :data:`ARM_WAIT_S`,
it was deleted) is logged and tried again after the interval, without holding the other orgs
back; a failed tick (database down) is logged and retried after 2, 4, ... 32 intervals;
cancelling the task (shutdown) ends it at once, mid-recount included (a recount cut short
stamps nothing).
Statistics are read only from audiences a reader may read: the refresher changes when counts
are current, never whose rows they count.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from app.repo import term_stats
from app.service.workers.tick import OwnEngine, background, run_every, session_lock

log = logging.getLogger("sibyl_pg.refresher")

GAP_FACTOR = 10.0
"""An org is recounted at most once per this many times its last recount's duration."""
ARM_WAIT_S = 5.0
"""How long the refresher's arming waits for an org's writes to leave a gap before it gives up
on that org until its next turn (``sibyl-pg stats refresh`` waits two minutes)."""

TICK_LOCK = "term_stats.refresher"
"""The refresher's tick lock (:func:`app.repo.workers.tick_lock`)."""


class Refresher(OwnEngine):
    """Recounts the search statistics of the orgs that are due, at most every ``interval_s``
    seconds (see the module docstring), on an engine of its own (:class:`OwnEngine`).
    ``orgs``: only these (None: every org of the database); ``clock``: seconds, monotonic."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        interval_s: float,
        orgs: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(engine)
        self.interval_s = interval_s
        self.orgs = orgs
        self.clock = clock
        self._next_allowed: dict[str, float] = {}

    async def tick(self) -> dict[str, term_stats.Recount]:
        """One look: recount every due org whose gap has passed (by id): what each recount
        did, a failed one included (:class:`~app.repo.term_stats.Recount`). Empty when another
        process holds the refresher's lock, or when nothing is due. An org is next recounted
        after max(interval, :data:`GAP_FACTOR` × this recount's time), or after the interval
        when this one failed."""
        engine = self._own_engine()
        async with (
            engine.connect() as conn,
            session_lock(conn, TICK_LOCK) as held,
        ):
            if not held:
                return {}
            due = await term_stats.due_orgs(conn, self.orgs)
            await conn.commit()
            now = self.clock()
            ready = [o for o in due if self._next_allowed.get(o, now) <= now]
            done = await term_stats.recount(engine, ready, arm_wait_s=ARM_WAIT_S, clock=self.clock)
            for org_id, r in done.items():
                gap = self.interval_s if r.error else max(self.interval_s, GAP_FACTOR * r.seconds)
                self._next_allowed[org_id] = self.clock() + gap
            return done

    async def run(self) -> None:
        """Tick every ``interval_s`` seconds until cancelled (:func:`run_every`), logging what
        each recount did; its own engine is disposed on the way out."""
        try:
            await run_every(self.interval_s, self.tick, self._report, "search statistics refresh")
        finally:
            await self.close()

    @staticmethod
    def _report(done: dict[str, term_stats.Recount]) -> None:
        for org_id, r in done.items():
            if r.error:
                log.warning("search statistics of %s not recounted: %s", org_id, r.error)
            elif not r.audiences:  # writes (or another refresh) took them over
                log.info(
                    "search statistics of %s counted, none stamped: writes during the"
                    " count keep them stale until the next look",
                    org_id,
                )
            else:
                log.info(
                    "search statistics of %s recounted: %d documents in %d audiences",
                    org_id,
                    r.documents,
                    r.audiences,
                )


def lifespan(
    engine: AsyncEngine, interval_s: float
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs a :class:`Refresher` of ``engine`` in the background while it is
    entered (nothing when ``interval_s`` is 0) and cancels it on exit."""
    return background(interval_s, lambda: Refresher(engine, interval_s=interval_s).run())
