"""Domain errors that carry their HTTP meaning; one handler per surface maps them.

Messages are written for the caller and never echo an id that might not be readable, SQL text or a
stack trace. 422 is left to payload-shape validation (pydantic).
"""

from __future__ import annotations


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
    """Absent or not readable: the two are indistinguishable (404, contract §2)."""

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
    """The database is unreachable, saturated, or a statement timed out (503, with Retry-After)."""

    status = 503

    def __init__(self, detail: str = "Database unavailable, retry later", retry_after: int = 2):
        super().__init__(detail)
        self.retry_after = retry_after
