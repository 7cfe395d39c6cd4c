"""The embedding worker: vectors for the semantic lane, written after writes and imports, never
inside a read or a write's transaction.

What a memory's vectors are: one per chunk (:mod:`app.domain.chunks`) of each of its search
documents at its current revision: its own document (its name, and its body when it was never
cut) and each current passage. The worker (:func:`embed_due`) takes the due memories in batches
(:mod:`app.repo.embeddings`: missing, stale or by another model), embeds their chunks outside
any transaction (the model runs in a thread) and stores each batch in one short transaction,
keeping only memories still at the revision embedded.

Where it runs: a serving process runs :class:`EmbeddingWorker` every ``SIBYL_EMBED_INTERVAL_S``
seconds (one process at a time: a session advisory lock of its own; the model on one thread, so
requests keep the other cores) when the semantic lane can run there (the extra installed, the
tables present); ``sibyl-pg embed`` embeds everything due with a progress bar (an import that
should be searchable by meaning at once, the evaluation).

**One model's vectors per org.** The background worker leaves alone every org whose memories
(not retired) hold current vectors by another model: it logs a warning (once per change of what
it finds), ``doctor`` says it, and the other orgs are embedded as usual. A memory whose vectors
are by another model is due, so without this a process started with another ``SIBYL_EMBEDDER``
would rewrite them, and two such processes on one database would undo each other for ever;
``sibyl-pg embed --model NAME [--org ORG]`` replaces them, a deliberate act.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import embedder as models
from app.domain.chunks import chunks
from app.domain.search.semantic import unavailable
from app.repo import embeddings as repo
from app.repo.search import semantic as semantic_repo
from app.service.workers.tick import OwnEngine, background, run_every, session_lock

log = logging.getLogger("sibyl_pg.embeddings")

BATCH = 32
"""Memories embedded per batch (one store transaction)."""

TICK_LOCK = "embeddings.worker"
"""The worker's tick lock (:func:`app.repo.workers.tick_lock`)."""


def document_chunks(doc: repo.Document) -> list[str]:
    """The texts one document's vectors are made of: a memory's name first (its own
    document), then its body's chunks (empty for a memory cut into passages); a passage's
    chunks."""
    head = [doc.name] if doc.name else []
    return head + chunks(doc.body)


async def embed_due(
    engine: AsyncEngine,
    *,
    model_name: str,
    progress: Callable[[int, int], None] | None = None,
    batch: int = BATCH,
    threads: int | None = None,
    model: models.Embedder | None = None,
    orgs: list[str] | None = None,
    skip_orgs: Sequence[str] = (),
) -> int:
    """Embed every due memory of ``engine``'s database (of ``orgs`` only, when given; never of
    ``skip_orgs``); return how many were embedded. ``progress(done, due)`` is called after
    each batch; ``model``: the embedder to use (default: ``model_name``'s). Raises
    :class:`~app.core.embedder.EmbedderUnavailable` when the model cannot run here."""
    model = model or models.embedder(model_name, threads)
    async with engine.connect() as conn:
        if not await semantic_repo.tables_present(conn):
            raise models.EmbedderUnavailable(semantic_repo.NO_PGVECTOR)
        total, _ = await repo.due_count(conn, model=model.name, orgs=orgs)
    done = 0
    while True:
        async with engine.connect() as conn:
            memories = await repo.due(
                conn, model=model.name, batch=batch, orgs=orgs, skip_orgs=skip_orgs
            )
            docs = await repo.documents(conn, memories)
        if not memories:
            return done
        # per memory (org, memory: a memory id is unique within its org only), each chunk's
        # (doc, chunk number, text)
        pieces: dict[tuple[str, str], list[tuple[str, int, str]]] = {}
        for d in docs:
            for n, piece in enumerate(document_chunks(d)):
                pieces.setdefault((d.org_id, d.memory_id), []).append((d.doc_id, n, piece))
        by_memory: dict[tuple[str, str], list[tuple[str, int, list[float]]]] = {}
        for memory, chunked in pieces.items():
            # one memory's chunks are encoded together, apart from any other memory's: a
            # model's batch (its padding) moves a vector in the last float digits, so a
            # memory's vectors then depend on its own text only, never on a memory a reader
            # may not read that was due at the same time
            vectors = await asyncio.to_thread(model.encode, [text for _, _, text in chunked])
            by_memory[memory] = [
                (doc, n, v) for (doc, n, _), v in zip(chunked, vectors, strict=True)
            ]
        async with engine.begin() as conn:
            for m in memories:
                await repo.store(
                    conn,
                    memory=m,
                    model=model.name,
                    vectors=by_memory.get((m.org_id, m.memory_id), []),
                )
        done += len(memories)
        if progress is not None:
            progress(done, max(total, done))


async def warm_query_model(engine: AsyncEngine, model_name: str) -> bool:
    """Load the model that makes search's query vectors and the worker's (one copy, on one
    thread), where they can be used here (the model can run, the database holds the tables),
    before the service says it is ready: loading takes seconds, and the first searches would
    otherwise wait for it holding their pooled connections (a burst of them then found the pool
    exhausted). Returns whether it loaded; a database that cannot be asked now leaves it to the
    first search."""
    if models.available(model_name) is not None:  # no database needed to know
        return False
    try:
        async with engine.connect() as conn:
            if await unavailable(conn, model_name, fresh=True) is not None:
                return False
    except Exception as exc:  # start-up goes on: /readyz tells of the database
        log.warning("query model not loaded at start (the database did not answer): %s", exc)
        return False
    model = models.embedder(model_name, threads=1)  # as the worker: requests keep the others
    # a few lengths: the first vector of each new length of text is several times slower
    for words in (1, 8, 24, 64):
        await asyncio.to_thread(model.encode, [" ".join(["ready"] * words)])
    return True


class EmbeddingWorker(OwnEngine):
    """Embeds due memories every ``interval_s`` seconds (see the module docstring), on an
    engine of its own."""

    def __init__(self, engine: AsyncEngine, *, interval_s: float, model_name: str) -> None:
        super().__init__(engine)
        self.interval_s = interval_s
        self.model_name = model_name
        self._others: dict[str, dict[str, int]] = {}  # what the last tick found, by org

    async def tick(self) -> int:
        """One look: embed every due memory (0 when another process holds the worker's lock,
        the lane cannot run here, or the database holds vectors by another model: see the
        module docstring)."""
        if models.available(self.model_name) is not None:
            return 0
        engine = self._own_engine()
        async with (
            engine.connect() as conn,
            session_lock(conn, TICK_LOCK) as held,
        ):
            if not held or not await semantic_repo.tables_present(conn):
                return 0
            name = models.embedder(self.model_name, threads=1).name
            others = await repo.other_models(conn, model=name)
            if others != self._others and others:
                log.warning(
                    "semantic lane: not writing vectors by %s in the background for %s: their "
                    "memories hold vectors by another model; `sibyl-pg embed --model %s --org "
                    "ORG` replaces them, or start the service with that SIBYL_EMBEDDER",
                    name,
                    "; ".join(
                        f"{org} ({', '.join(f'{m}: {n} memories' for m, n in by.items())})"
                        for org, by in others.items()
                    ),
                    self.model_name,
                )
            self._others = others
            await conn.commit()
            return await embed_due(
                engine, model_name=self.model_name, threads=1, skip_orgs=list(others)
            )

    async def run(self) -> None:
        """Tick until cancelled, logging what each tick embedded."""
        try:
            await run_every(self.interval_s, self.tick, self._report, "embedding")
        finally:
            await self.close()

    @staticmethod
    def _report(done: int) -> None:
        if done:
            log.info("semantic lane: %d memories embedded", done)


def lifespan(
    engine: AsyncEngine, interval_s: float, model_name: str
) -> contextlib.AbstractAsyncContextManager[None]:
    """A context that runs an :class:`EmbeddingWorker` in the background while it is entered
    (nothing when ``interval_s`` is 0) and cancels it on exit."""
    return background(
        interval_s,
        lambda: EmbeddingWorker(engine, interval_s=interval_s, model_name=model_name).run(),
    )
