"""What every background worker shares: an engine of its own, one tick lock per worker, the
tick loop with its back-off, and the background task a serving process runs it in.

The workers: :mod:`app.service.workers.search_stats` (the search word statistics),
:mod:`app.service.workers.communities` (the communities) and
:mod:`app.service.workers.embeddings` (the semantic lane's vectors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import cancelling
from app.repo import workers as repo

log = logging.getLogger("sibyl_pg.refresher")
T = TypeVar("T")

MAX_BACKOFF = 32
"""After consecutive failed ticks a worker waits 2, 4, ... up to this many intervals."""


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
async def session_lock(conn: AsyncConnection, worker: str) -> AsyncIterator[bool]:
    """Try ``worker``'s tick lock (a session advisory lock) on ``conn``; yield whether it is
    held, and release it on the way out. When the body failed or was cancelled mid-way,
    the session is ended instead (its lock with it) and that error stands."""
    held = bool((await conn.execute(repo.tick_lock(worker))).scalar())
    await conn.commit()
    if not held:
        yield False
        return
    try:
        yield True
    finally:
        try:
            await conn.execute(repo.tick_unlock(worker))
            await conn.commit()
        except asyncio.CancelledError:
            await conn.invalidate()  # the session ends, and its lock with it
            raise
        except Exception:  # a statement above failed or was cancelled mid-way: the
            await conn.invalidate()  # session ends (its lock too); that error stands


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
