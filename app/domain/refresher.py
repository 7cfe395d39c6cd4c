"""The automatic refresh of the search word statistics (issue 12; docs/search.md).

The full-text lane weighs words from per-audience document counts (:mod:`app.domain.terms`).
A write that changes or removes a counted memory retires its audience, and until a recount every
reader of that audience gets the fixed English fallback weights; a memory created since the
count is in none of it (its words weigh as if no document held them). Without a recount a live
service would fall back after its first edit. So every serving process (``make run``: REST and
MCP over HTTP; ``sibyl-pg mcp``) runs a :class:`Refresher`: every ``SIBYL_STATS_REFRESH_S``
seconds (default 60; 0 turns it off) it asks which orgs are due
(:func:`app.repo.term_stats.due_orgs`: a retired audience, an audience never counted, or a
memory created since its audience's count) and recounts each
(:func:`app.repo.term_stats.refresh_orgs`: writes are never held back, and a write during the
count leaves its audience retired, so nothing stale is stamped fresh).

Bounds: one process refreshes at a time (a session advisory lock; the others skip their
turn); an org is recounted at most once per max(interval, :data:`GAP_FACTOR` × its last
recount's duration), so a large org's recount takes at most about a tenth of a core; an org
whose recount fails (its writes held its lock for two minutes, it was deleted) is logged and
tried again after its gap, without holding the other orgs back; a failed tick (database down)
is logged and retried at the next one.
Statistics are read only from audiences a reader may read: the refresher changes when counts
are current, never whose rows they count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.repo import term_stats

log = logging.getLogger("sibyl_pg.refresher")

GAP_FACTOR = 10.0
"""An org is recounted at most once per this many times its last recount's duration."""

_TICK_LOCK = "hashtext('sibyl:term_stats:refresher')"
TICK_LOCK_SQL = text(
    f"""/* sibyl:term_stats.refresher_lock */ SELECT pg_try_advisory_lock({_TICK_LOCK}) AS held"""
)
TICK_UNLOCK_SQL = text(
    f"""/* sibyl:term_stats.refresher_unlock */ SELECT pg_advisory_unlock({_TICK_LOCK})"""
)


class Refresher:
    """Recounts the search statistics of the orgs that are due, at most every ``interval_s``
    seconds (see the module docstring). ``orgs``: only these (None: every org of the database);
    ``clock``: seconds, monotonic."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        interval_s: float,
        orgs: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.orgs = orgs
        self.clock = clock
        self._next_allowed: dict[str, float] = {}

    async def tick(self) -> dict[str, tuple[int, int]]:
        """One look: recount every due org whose gap has passed (by id); returns what each
        recount stamped, ``(audiences, documents)``. Empty when another process holds the
        refresher's lock, or when nothing is due."""
        async with self.engine.connect() as conn:
            held = (await conn.execute(TICK_LOCK_SQL)).scalar()
            await conn.commit()
            if not held:
                return {}
            try:
                due = await term_stats.due_orgs(conn, self.orgs)
                await conn.commit()
                now = self.clock()
                out: dict[str, tuple[int, int]] = {}
                for org_id in due:
                    if self._next_allowed.get(org_id, now) > now:
                        continue
                    started = self.clock()
                    try:
                        out.update(await term_stats.refresh_orgs(self.engine, [org_id]))
                    except Exception as exc:  # one org's failure (busy, gone) spares the rest
                        log.warning(
                            "search statistics of %s not recounted: %s", org_id, type(exc).__name__
                        )
                    took = self.clock() - started
                    self._next_allowed[org_id] = self.clock() + max(
                        self.interval_s, GAP_FACTOR * took
                    )
                return out
            finally:
                await conn.execute(TICK_UNLOCK_SQL)
                await conn.commit()

    async def run(self) -> None:
        """Tick every ``interval_s`` seconds until cancelled; a failed tick is logged."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                done = await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed tick must not stop the next one
                log.warning("search statistics refresh failed: %s", type(exc).__name__)
                continue
            for org_id, (audiences, documents) in done.items():
                log.info(
                    "search statistics of %s recounted: %d documents in %d audiences",
                    org_id,
                    documents,
                    audiences,
                )


def lifespan(
    engine: AsyncEngine, interval_s: float
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs a :class:`Refresher` of ``engine`` in the background while it is
    entered (nothing when ``interval_s`` is 0) and cancels it on exit."""

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        if interval_s <= 0:
            yield
            return
        task = asyncio.create_task(Refresher(engine, interval_s=interval_s).run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running()
