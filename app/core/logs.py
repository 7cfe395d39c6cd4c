"""What the service logs about the answers it could not give: every 5xx, with its cause.

One line per failure, on the ``sibyl_pg`` logger: where (a REST method and path, or an MCP
tool), the status, the caller's message and the cause (:func:`app.core.errors.describe`: the
classes of the exceptions and their SQLSTATE). Never SQL text, bound values or a request body:
a driver's message may quote them, so messages are left out. A 500 adds the stack's frames
(file, line, function), without the exception's message.
"""

from __future__ import annotations

import logging
import traceback

from app.core.errors import DomainError, describe

log = logging.getLogger("sibyl_pg")

STACK_FRAMES = 12
"""Frames of a 500's stack logged (the innermost ones)."""


def refused(where: str, error: DomainError) -> None:
    """Log ``error`` when it is a server-side failure (5xx: a database fault, a 503)."""
    if error.status < 500:
        return
    cause = getattr(error, "cause", None) or "not recorded"
    log.warning("%s answered %d %s (cause: %s)", where, error.status, error.detail, cause)


def internal(where: str, error: BaseException) -> None:
    """Log a bug answered 500: its cause and the innermost frames of its stack, once."""
    frames = traceback.extract_tb(error.__traceback__)[-STACK_FRAMES:]
    stack = "".join(f"\n  {f.filename}:{f.lineno} in {f.name}" for f in frames)
    log.error("%s answered 500 (cause: %s)%s", where, describe(error), stack)
