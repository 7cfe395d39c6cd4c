"""Service settings, read from the environment (pydantic-settings).

Every variable is optional; the defaults run the service on a fresh machine:

- ``DATABASE_URL``: a ``postgresql://`` URL. Unset: an embedded PostgreSQL (``pgserver``) in
  ``SIBYL_DATA_DIR/pg`` is started and used (rule: command-line).
- ``SIBYL_DATA_DIR``: the project's data folder (default ``<project>/.data``).
- ``SIBYL_PEPS_DIR``: the PEP corpus (default ``<project>/../shared/data/peps``).
- ``SIBYL_LOCOMO_DIR``: the LoCoMo conversations the evaluation reads (default
  ``<project>/../shared/data/locomo``).
- ``SIBYL_WALK_HOP_CAP``: rows one node may enter per hop arm, strongest hops first (default:
  sized from the request, ``limit + 1 + seeds``), rule: bounded-walk.
- ``SIBYL_WALK_LEVEL_CAP``: nodes a walk level before the last may keep, best weight first
  (default: ``4 × (limit + 1)``), rule: bounded-walk.
- ``SIBYL_WALK_HUB_DEGREE``: a node with more edges one way than this is read one relationship
  at a time, strongest first, instead of whole (default 64; docs/walk-plans.md).
- ``SIBYL_SEARCH_CANDIDATE_CAP``: candidates the full-text lane scores and the exact lane ranks
  (default 200; :mod:`app.domain.search.settings`).
- ``SIBYL_SEARCH_SEMANTIC``: ``true`` turns search's semantic lane on (default off; it runs only
  with the ``semantic`` extra installed and pgvector on the server: docs/search.md).
- ``SIBYL_SEARCH_RERANK``: the re-ranking of search's first results by meaning (default on; it
  runs where the semantic lane can, with the ``semantic`` extra and pgvector: docs/search.md);
  ``false`` turns it off.
- ``SIBYL_EMBEDDER``: the semantic lane's model: ``minilm`` (default; the ``semantic`` extra) or
  ``hashing`` (a bag of hashed words: for tests and benchmarks only).
- ``SIBYL_EMBED_INTERVAL_S``: how often (seconds) a serving process looks for memories whose
  vectors are missing or stale and embeds them (default 10; 0: never, then only ``sibyl-pg
  embed`` does); it runs only where the semantic lane or the re-ranking is on and can run
  (extra installed, pgvector).
- ``SIBYL_STATEMENT_TIMEOUT_MS``: read statement timeout (default 2000 ms).
- ``SIBYL_WRITE_LOCK_WAIT_MS``: how long a write waits, in all, for the row locks of another
  writer before it answers 503 (default 30000 ms); it waits in steps of half the statement
  timeout (at most 1 s), each ended by a lock timeout and the write run again
  (:func:`app.service.session.run_write`).
- ``SIBYL_EVIDENCE_LINES``: lines per evidence span (default 40); rule: evidence-windows.
- ``SIBYL_MAX_BODY_BYTES``: largest request body served (default 8 MiB); larger ones get 413.
- ``SIBYL_STATS_REFRESH_S``: how often (seconds) a serving process looks for orgs whose search
  word statistics are out of date and recounts them (default 60; 0: never, then only
  ``sibyl-pg stats refresh`` does; else 1 to 86400; see :mod:`app.service.workers.search_stats`).
- ``SIBYL_COMMUNITIES_REFRESH_S``: how often (seconds) a serving process rebuilds the
  communities of orgs whose communities a write retired (default 120; 0: never, then only
  ``sibyl-pg communities rebuild`` does; else 1 to 86400; :mod:`app.service.workers.communities`).
- ``SIBYL_COMMUNITIES_AUTO_MAX_LINKS``: the largest org (edges + mentions) a serving process
  rebuilds (default 200,000; larger ones are the operator's ``communities rebuild``).
- ``SIBYL_MIGRATION_LOCK_TIMEOUT_MS``: how long a migration waits for a table lock before it
  gives up (default 10000 ms; 0: forever). A migration waiting behind a long query would
  otherwise queue every later query of that table behind it (PostgreSQL's lock queue); given up,
  nothing changed (each migration is transactional) and it can be run again.
- ``SIBYL_REST_EXPLAIN``: what ``POST /api/admin/explain/{verb}`` shows an org admin: ``sql``
  (default: the statements, their bound values and psql scripts, no plan: PostgreSQL measures,
  estimates and even chooses a plan's nodes from every org's rows in the database) or
  ``measured`` (the full ``EXPLAIN (ANALYZE, BUFFERS)``: only where a database holds a single
  org) or ``single-org`` (measured while the database holds exactly one org, counted on every
  request: a second org imported into a running server turns the figures off at once; what
  ``make run`` sets on a one-org database). The CLI's ``sibyl-pg explain`` always measures (the
  operator).
- ``SIBYL_MCP_ALLOWED_HOSTS``: host names ``/mcp`` answers besides loopback (comma separated;
  ``*``: any), the MCP transport's DNS-rebinding check.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# The query parameters of a DATABASE_URL passed on to the driver (asyncpg, app.core.db.async_url):
# a socket host, TLS (libpq's sslmode, passed as asyncpg's ssl), a passfile,
# target_session_attrs. Any other is refused when the settings are read (asyncpg takes no
# options or application_name keyword: it was a traceback at the first query).
URL_PARAMETERS = frozenset({"host", "port", "sslmode", "ssl", "passfile", "target_session_attrs"})
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")


class Settings(BaseSettings):
    """Typed view of the environment; see the module docstring for each variable."""

    # a variable set but empty (`SIBYL_WALK_HOP_CAP=`) counts as unset: its default applies
    model_config = SettingsConfigDict(env_prefix="SIBYL_", extra="ignore", env_ignore_empty=True)

    @field_validator("stats_refresh_s", "communities_refresh_s")
    @classmethod
    def _whole_seconds_or_off(cls, value: float) -> float:
        if 0 < value < 1:  # a near-zero interval would run the refresher's look without pause
            raise ValueError("must be 0 (off) or at least 1 second")
        return value

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, value: str | None) -> str | None:
        # checked when read, so a typo is one line and exit 2 from any command, not a
        # traceback from the first connection; the message never repeats the URL (a password)
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("must be a postgresql:// URL, e.g. postgresql://user@host:5432/db")
        try:
            parts.port  # noqa: B018 (reading it checks it: a port that is not a number raises)
        except ValueError:
            raise ValueError("has a port that is not a number (or out of range)") from None
        given = parse_qsl(parts.query, keep_blank_values=True)
        for key, mode in given:
            if key in ("sslmode", "ssl") and mode not in SSL_MODES:
                raise ValueError(f"has {key}={mode!r}; it takes one of {', '.join(SSL_MODES)}")
            if key == "target_session_attrs" and mode not in SESSION_ATTRS:
                raise ValueError(
                    f"has target_session_attrs={mode!r}; it takes one of {', '.join(SESSION_ATTRS)}"
                )
            if key == "port" and not (mode.isdigit() and 0 < int(mode) < 65536):
                raise ValueError("has a port that is not a number (or out of range)")
        unknown = sorted({k for k, _ in given} - URL_PARAMETERS)
        if unknown:
            raise ValueError(
                f"has query parameters the service does not pass on ({', '.join(unknown)});"
                f" it takes {', '.join(sorted(URL_PARAMETERS))}"
            )
        return value

    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = PROJECT_ROOT / ".data"
    peps_dir: Path = PROJECT_ROOT.parent / "shared" / "data" / "peps"
    locomo_dir: Path = PROJECT_ROOT.parent / "shared" / "data" / "locomo"
    walk_hop_cap: int | None = Field(default=None, ge=1, le=100_000)
    walk_level_cap: int | None = Field(default=None, ge=1, le=1_000_000)
    walk_hub_degree: int = Field(default=64, ge=0, le=100_000)
    search_candidate_cap: int = Field(default=200, ge=1, le=100_000)
    search_semantic: bool = False
    search_rerank: bool = True
    embedder: Literal["minilm", "hashing"] = "minilm"
    embed_interval_s: float = Field(default=10.0, ge=0, le=86_400, allow_inf_nan=False)
    statement_timeout_ms: int = Field(default=2000, ge=10, le=600_000)
    write_lock_wait_ms: int = Field(default=30_000, ge=0, le=600_000)
    evidence_lines: int = Field(default=40, ge=1, le=10_000)
    stats_refresh_s: float = Field(default=60.0, ge=0, le=86_400, allow_inf_nan=False)
    communities_refresh_s: float = Field(default=120.0, ge=0, le=86_400, allow_inf_nan=False)
    communities_auto_max_links: int = Field(default=200_000, ge=0, le=100_000_000)
    migration_lock_timeout_ms: int = Field(default=10_000, ge=0, le=3_600_000)
    mcp_allowed_hosts: str = ""
    rest_explain: Literal["sql", "measured", "single-org"] = "sql"
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    # connections of the service's pool; REST expand's own one-statement pool
    # (app.core.db.statement_engine) holds up to expand_pool_size more
    pool_size: int = Field(default=10, ge=1, le=200)
    # REST and MCP expand's one-statement pool; None: min(pool_size, usable cores + 1)
    # (app.core.db.statement_pool_size)
    expand_pool_size: int | None = Field(default=None, ge=1, le=200)
    pool_timeout_s: float = Field(default=5.0, gt=0, le=300)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings (read once)."""
    return Settings()
