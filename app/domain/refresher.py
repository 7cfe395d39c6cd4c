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

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import cancelling
from app.repo import term_stats

log = logging.getLogger("sibyl_pg.refresher")
T = TypeVar("T")

MAX_BACKOFF = 32
"""After consecutive failed ticks the refresher waits 2, 4, ... up to this many intervals."""
GAP_FACTOR = 10.0
"""An org is recounted at most once per this many times its last recount's duration."""
ARM_WAIT_S = 5.0
"""How long the refresher's arming waits for an org's writes to leave a gap before it gives up
on that org until its next turn (``sibyl-pg stats refresh`` waits two minutes)."""

# The refresher's lock: the two-key form, a key space of its own (a one-key lock, such as an
# org's statistics lock, can never collide with it; an adversarial review found that the one-key
# hash of this name was the statistics lock of an org named `refresher`).
TICK_LOCK_SQL = text(
    """/* sibyl:term_stats.refresher_lock */
SELECT pg_try_advisory_lock(hashtext('sibyl-pg'), hashtext('term_stats.refresher')) AS held"""
)
TICK_UNLOCK_SQL = text(
    """/* sibyl:term_stats.refresher_unlock */
SELECT pg_advisory_unlock(hashtext('sibyl-pg'), hashtext('term_stats.refresher'))"""
)


def exc_line(exc: BaseException) -> str:
    """One line for a log: the exception's class and the first line of its message."""
    first = str(exc).strip().splitlines()[:1]
    return f"{type(exc).__name__}: {first[0][:200]}" if first else type(exc).__name__


class OwnEngine:
    """A background job's engine of its own to ``engine``'s database, made on first use: no
    connection of the service's pool, no statement timeout (a whole org is read)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.url = engine.url.render_as_string(hide_password=False)
        self._engine: AsyncEngine | None = None

    def _own_engine(self) -> AsyncEngine:
        if self._engine is None:
            from app.core.db import make_engine

            self._engine = make_engine(self.url)
        return self._engine

    async def close(self) -> None:
        """Dispose of the job's own engine (a later tick makes a new one)."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None


@contextlib.asynccontextmanager
async def session_lock(
    conn: AsyncConnection, lock: TextClause, unlock: TextClause
) -> AsyncIterator[bool]:
    """Try a job's session advisory lock on ``conn`` (``lock`` answers ``held``); yield whether
    it is held, and release it on the way out. When the body failed or was cancelled mid-way,
    the session is ended instead (its lock with it) and that error stands."""
    held = bool((await conn.execute(lock)).scalar())
    await conn.commit()
    if not held:
        yield False
        return
    try:
        yield True
    finally:
        try:
            await conn.execute(unlock)
            await conn.commit()
        except asyncio.CancelledError:
            await conn.invalidate()  # the session ends, and its lock with it
            raise
        except Exception:  # a statement above failed or was cancelled mid-way: the
            await conn.invalidate()  # session ends (its lock too); that error stands


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
            session_lock(conn, TICK_LOCK_SQL, TICK_UNLOCK_SQL) as held,
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


async def run_every(
    interval_s: float,
    tick: Callable[[], Awaitable[T]],
    report: Callable[[T], None],
    what: str,
) -> None:
    """Call ``tick`` every ``interval_s`` seconds until cancelled and hand its answer to
    ``report``; a failed tick (the database down or gone) is logged as ``what`` and the next
    one tried after 2, 4, ... up to :data:`MAX_BACKOFF` intervals. A cancel ends it at once."""
    delay = interval_s
    while True:
        await asyncio.sleep(delay)
        try:
            done = await tick()
        except Exception as exc:  # a failed tick must not stop the next one...
            if cancelling():
                raise  # ... but a cancelled one ends the loop
            delay = min(2 * delay, MAX_BACKOFF * interval_s)
            log.warning("%s failed (next try in %.0f s): %s", what, delay, exc_line(exc))
            continue
        delay = interval_s
        if cancelling():  # a cancel swallowed below (a statement cut mid-way) ends it
            raise asyncio.CancelledError
        report(done)


def background(
    interval_s: float, run: Callable[[], Coroutine[Any, Any, None]]
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs ``run()`` as a background task while it is entered (nothing when
    ``interval_s`` is 0) and cancels it on exit."""

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        if interval_s <= 0:
            yield
            return
        task = asyncio.create_task(run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running()


def lifespan(
    engine: AsyncEngine, interval_s: float
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs a :class:`Refresher` of ``engine`` in the background while it is
    entered (nothing when ``interval_s`` is 0) and cancels it on exit."""
    return background(interval_s, lambda: Refresher(engine, interval_s=interval_s).run())
