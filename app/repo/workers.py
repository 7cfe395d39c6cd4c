"""The statements of the background workers (:mod:`app.service.workers`).

Each worker's tick lock is a session advisory lock in the two-key form, a key space of its own
(``hashtext('sibyl-pg')``, ``hashtext(worker)``): a one-key lock, such as an org's statistics
lock, can never collide with it (the one-key hash of the name ``refresher`` was once the
statistics lock of an org named `refresher`).
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

_TRY_LOCK_SQL = text(
    """/* sibyl:worker.tick_lock */
SELECT pg_try_advisory_lock(hashtext('sibyl-pg'), hashtext(:worker)) AS held"""
)
_UNLOCK_SQL = text(
    """/* sibyl:worker.tick_unlock */
SELECT pg_advisory_unlock(hashtext('sibyl-pg'), hashtext(:worker))"""
)


def tick_lock(worker: str) -> TextClause:
    """The statement that tries ``worker``'s tick lock (answers ``held``), its name bound."""
    return _TRY_LOCK_SQL.bindparams(worker=worker)


def tick_unlock(worker: str) -> TextClause:
    """The statement that releases ``worker``'s tick lock, its name bound."""
    return _UNLOCK_SQL.bindparams(worker=worker)
