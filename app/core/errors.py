"""Domain errors that carry their HTTP meaning; one handler per surface maps them.

Messages are written for the caller and never echo an id that might not be readable, SQL text or a
stack trace. 422 is left to payload-shape validation (pydantic): :func:`shape_errors` and
:func:`shape_message` turn pydantic's errors into the one message both surfaces show (REST's
``detail``, MCP's tool-error text), without the rejected values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypedDict


class ShapeError(TypedDict):
    """One reason a payload does not fit its schema: where (``loc``), why (``msg``, ``type``)."""

    loc: list[str | int]
    msg: str
    type: str


class DomainError(Exception):
    """Base of every error a caller may see; ``status`` is its HTTP status."""

    status: int = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(DomainError):
    """Malformed input (400): a blank id, a bad name, spans that do not tile a body."""

    status = 400


class Unauthorized(DomainError):
    """Missing, unknown or revoked API key (401)."""

    status = 401


class Forbidden(DomainError):
    """Readable but not writable, or a key without the needed scope (403)."""

    status = 403


class NotFound(DomainError):
    """Absent or not readable: the two are indistinguishable (404, rule: hidden-is-absent)."""

    status = 404

    def __init__(self, detail: str = "Entity not found") -> None:
        super().__init__(detail)


class Conflict(DomainError):
    """The write conflicts with stored state (409)."""

    status = 409


class PreconditionFailed(DomainError):
    """``If-Match`` revision does not match the stored one (412)."""

    status = 412


class Unavailable(DomainError):
    """The database is unreachable, saturated, or a statement timed out (503, with Retry-After).
    ``cause`` names the fault for the server's log (:func:`describe`), never for the caller."""

    status = 503

    def __init__(
        self,
        detail: str = "Database unavailable, retry later",
        retry_after: int = 2,
        cause: str | None = None,
    ):
        super().__init__(detail)
        self.retry_after = retry_after
        self.cause = cause


MAX_LISTED_ERRORS = 5
"""At most this many validation errors are spelled out in a message (the rest are counted)."""


def shape_errors(errors: Sequence[Mapping[str, Any]]) -> list[ShapeError]:
    """Validation errors (pydantic's ``errors()``) as ``{"loc", "msg", "type"}`` dicts, without the
    rejected input (it may be an id the caller may not read, or not even JSON-encodable). The
    name of an unknown field is the caller's text as well: its error points at the object that
    holds it (``loc`` without the name, ``type: extra_forbidden``), and several unknown fields
    of one object are one error (the same reason, said once)."""
    out: list[ShapeError] = []
    for error in errors:
        loc = [part for part in error.get("loc", ()) if isinstance(part, (str, int))]
        kind = str(error.get("type"))
        msg = str(error.get("msg", ""))
        if kind == "extra_forbidden" and loc:
            loc = loc[:-1]  # the unknown field's name is the caller's text too: not echoed
        if kind == "json_invalid" and len(loc) == 2 and isinstance(loc[1], int):
            # FastAPI puts the parser's character offset in the location (``body.14``), which
            # reads as the 15th item of a list: the body is the location, the offset the reason
            msg, loc = f"{msg} at character {loc[1]}", loc[:1]
        shaped: ShapeError = {"loc": loc, "msg": msg, "type": kind}
        if shaped not in out:
            out.append(shaped)
    return out


def shape_message(errors: Sequence[ShapeError], *, what: str = "request") -> str:
    """One line for a caller: ``Invalid request: depth: Input should be a valid integer; ...``.

    Names the fields (their locations) and pydantic's reason, never a value; at most
    :data:`MAX_LISTED_ERRORS` reasons, the rest counted.
    """
    parts = []
    for error in errors[:MAX_LISTED_ERRORS]:
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return f"Invalid {what}: " + "; ".join(parts) if parts else f"Invalid {what}"


def describe(error: BaseException) -> str:
    """The chain of ``error``'s causes as a log can say it: each exception's class and, for a
    database error, its SQLSTATE, e.g. ``DBAPIError < QueryCanceledError (SQLSTATE 57014)``;
    never a message (a driver's message may quote SQL or the values of a statement)."""
    parts: list[str] = []
    for current in causes(error):
        name = type(current).__name__
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(code, str) and code:
            name += f" (SQLSTATE {code})"
        errno = getattr(current, "errno", None) if isinstance(current, OSError) else None
        if isinstance(errno, int):
            name += f" (errno {errno})"
        if name not in parts:
            parts.append(name)
    return " < ".join(parts)


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything in its chain of causes, each once: a driver error wrapped by
    SQLAlchemy (``orig``), raised from another (``__cause__``) or while handling one
    (``__context__``)."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [getattr(current, "orig", None), current.__cause__, current.__context__]


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error as SQLAlchemy raises it: the code of the driver's error
    it wraps (``orig``, or what that was raised from), or None."""
    orig = getattr(error, "orig", None)
    for candidate in (orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(code, str):
            return code
    return None
