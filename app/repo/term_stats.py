"""Document frequencies by audience: the statistics of the full-text lane's word weights
(issue 12; :mod:`app.domain.terms`, docs/search.md).

An **audience** is a set of rows every one of whose readers reads all of it: a project's
project-scoped memories (audience = the project id) and the org's org-scoped memories (audience
``*``, which no id can be). A reader reads exactly the audiences of its readable projects, and
``*`` unless its key is restricted to projects (contract §2, :mod:`app.repo.readrule`). Private
memories belong to no audience and are never counted. A reader's statistics are the sums over
the audiences it reads, so every row they count is one the reader may read: a row it cannot read
(private, another project's, or the org's behind a restricted key) changes none of its weights.

The documents counted are those the full-text lane scores: every memory's ``search_tsv`` and
every current passage's (``parent_revision`` = its memory's revision), whatever the lifecycle.

- ``sibyl:term_stats.*`` refresh statements recount one org (:func:`refresh`), under an
  exclusive transaction lock of that org;
- ``sibyl:term_stats.retire`` marks audiences not fresh (:func:`retire`), after taking the
  shared form of that lock (``sibyl:term_stats.retire_lock``): a write and a refresh of the same
  org take turns, so a write never commits a change to a counted row that a refresh then counts
  as fresh without it;
- ``sibyl:search.weights`` (named for the verb it serves) reads a reader's sums for a query's
  words (:func:`lookup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

ORG_AUDIENCE = "*"
"""The audience of org-scoped memories (no project or memory id can be ``*``)."""

_LOCK = "hashtext('sibyl:term_stats:' || CAST(:org_id AS text))"

# Every search document of the org that belongs to an audience, with that audience.
_DOCUMENTS = f"""documents AS (
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END AS audience,
           e.search_tsv AS tsv
    FROM entities e
    WHERE e.org_id = :org_id AND e.scope IN ('project', 'org')
  UNION ALL
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END,
           p.search_tsv
    FROM passages p
    JOIN entities e ON e.org_id = p.org_id AND e.id = p.parent_id
                   AND p.parent_revision = e.revision
    WHERE p.org_id = :org_id AND e.scope IN ('project', 'org')
)"""

REFRESH_SETTINGS_SQL = text(
    """/* sibyl:term_stats.refresh_settings */ SET LOCAL statement_timeout = 0"""
)

REFRESH_LOCK_SQL = text(
    f"""/* sibyl:term_stats.refresh_lock */
SELECT pg_advisory_xact_lock({_LOCK})"""
)

CLEAR_STATS_SQL = text(
    """/* sibyl:term_stats.clear */
DELETE FROM term_stats WHERE org_id = :org_id"""
)

CLEAR_AUDIENCES_SQL = text(
    """/* sibyl:term_stats.clear_audiences */
DELETE FROM term_audiences WHERE org_id = :org_id"""
)

COUNT_AUDIENCES_SQL = text(
    f"""/* sibyl:term_stats.count_audiences */
WITH {_DOCUMENTS}
INSERT INTO term_audiences (org_id, audience, documents, lengths, fresh)
SELECT :org_id, d.audience, count(*), coalesce(sum(length(d.tsv)), 0), true
FROM documents d
GROUP BY d.audience
RETURNING documents"""
)

COUNT_LEXEMES_SQL = text(
    f"""/* sibyl:term_stats.count_lexemes */
WITH {_DOCUMENTS}
INSERT INTO term_stats (org_id, lexeme, audience, df)
SELECT :org_id, u.lexeme, d.audience, count(*)
FROM documents d
CROSS JOIN LATERAL unnest(d.tsv) u
GROUP BY u.lexeme, d.audience
ORDER BY u.lexeme, d.audience  -- a lexeme's rows on few pages: its lookup reads few buffers"""
)

RETIRE_LOCK_SQL = text(
    f"""/* sibyl:term_stats.retire_lock */
SELECT pg_advisory_xact_lock_shared({_LOCK})"""
)

RETIRE_SQL = text(
    """/* sibyl:term_stats.retire */
UPDATE term_audiences SET fresh = false
WHERE org_id = :org_id AND audience = ANY(CAST(:audiences AS text[])) AND fresh"""
)

# The audiences the bound reader reads: its readable projects, and '*' unless its key is
# restricted to projects (the read rule, app/repo/readrule.py). A constant once the parameters are
# bound (custom plans), so `= ANY(...)` is a hashed filter.
_READER_AUDIENCES = f"""CASE WHEN :r_restricted THEN CAST(:r_projects AS text[])
         ELSE array_append(CAST(:r_projects AS text[]), '{ORG_AUDIENCE}') END"""

WEIGHTS_SQL = text(
    f"""/* sibyl:search.weights */
WITH totals AS (  -- the reader's audiences' documents and lengths; stale: how many not fresh
    SELECT count(*) FILTER (WHERE NOT s.fresh) AS stale,
           coalesce(sum(s.documents), 0) AS documents, coalesce(sum(s.lengths), 0) AS lengths
    FROM term_audiences s
    WHERE s.org_id = :r_org AND s.audience = ANY({_READER_AUDIENCES})
),
frequencies AS (  -- per word, the document frequency of its scarcest lexeme (stop words: none)
    SELECT w.word, min(coalesce(d.df, 0)) AS df
    FROM unnest(CAST(:words AS text[])) AS w(word)
    CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', w.word))) AS l(lexeme)
    LEFT JOIN LATERAL (  -- summed over the reader's audiences: one index range per lexeme
        SELECT sum(s.df) AS df
        FROM term_stats s
        WHERE s.org_id = :r_org AND s.lexeme = l.lexeme
          AND s.audience = ANY({_READER_AUDIENCES})
    ) d ON true
    GROUP BY w.word
)
SELECT t.stale, t.documents, t.lengths,
       coalesce((SELECT array_agg(f.word ORDER BY f.word) FROM frequencies f), '{{}}') AS words,
       coalesce((SELECT array_agg(f.df ORDER BY f.word) FROM frequencies f), '{{}}') AS dfs
FROM totals t"""
)


@dataclass(frozen=True)
class Stats:
    """A reader's statistics: ``documents`` it may read (summed over its audiences), the mean
    length of their vectors, and per looked-up word the documents holding it (a stop word, which
    the database drops, is absent)."""

    documents: int
    avg_length: float
    df: dict[str, int]


async def refresh(conn: AsyncConnection, *, org_id: str) -> tuple[int, int]:
    """Recount every audience of ``org_id`` (in the caller's transaction, which it should commit
    soon: writes of the org wait for it); return (audiences, documents)."""
    p = {"org_id": org_id}
    await conn.execute(REFRESH_SETTINGS_SQL)  # a whole org's vectors: not a request's bound
    await conn.execute(REFRESH_LOCK_SQL, p)
    await conn.execute(CLEAR_STATS_SQL, p)
    await conn.execute(CLEAR_AUDIENCES_SQL, p)
    counts = [r.documents for r in await conn.execute(COUNT_AUDIENCES_SQL, p)]
    await conn.execute(COUNT_LEXEMES_SQL, p)
    return len(counts), sum(counts)


VACUUM_SQL = text("/* sibyl:term_stats.vacuum */ VACUUM (ANALYZE) term_audiences, term_stats")


async def vacuum(conn: AsyncConnection) -> None:
    """``VACUUM (ANALYZE)`` the statistics tables; ``conn`` must be in autocommit mode."""
    await conn.execute(VACUUM_SQL)


async def refresh_orgs(engine: AsyncEngine, org_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """:func:`refresh` each of ``org_ids``, one transaction each; (audiences, documents) by org.
    Runs on an engine of its own to the same database, without the service's statement timeout
    (server- and client-side: a whole org's vectors are read). The caller then vacuums
    (:func:`vacuum`)."""
    from app.core.db import make_engine

    bulk = make_engine(engine.url.render_as_string(hide_password=False))
    out: dict[str, tuple[int, int]] = {}
    try:
        for org_id in org_ids:
            async with bulk.begin() as conn:
                out[org_id] = await refresh(conn, org_id=org_id)
    finally:
        await bulk.dispose()
    return out


def audiences_of(scope: str, project_id: str | None) -> list[str]:
    """The audience a memory of ``scope`` belongs to (none for a private one)."""
    if scope == "org":
        return [ORG_AUDIENCE]
    if scope == "project" and project_id is not None:
        return [project_id]
    return []


async def retire(conn: AsyncConnection, *, org_id: str, audiences: Sequence[str]) -> None:
    """Mark ``audiences`` of ``org_id`` not fresh (same transaction as the write that changed a
    row they count)."""
    if audiences:
        p = {"org_id": org_id, "audiences": sorted(set(audiences))}
        await conn.execute(RETIRE_LOCK_SQL, p)
        await conn.execute(RETIRE_SQL, p)


async def lookup(
    conn: AsyncConnection, *, reader_params: dict[str, object], words: Sequence[str]
) -> Stats | None:
    """The bound reader's statistics for ``words`` (lower-cased query words); None when it has
    none to use: no document counted, or one of its audiences is not fresh."""
    row = (
        await conn.execute(WEIGHTS_SQL, {**reader_params, "words": list(dict.fromkeys(words))})
    ).one()
    if row.stale or not row.documents:
        return None
    return Stats(
        documents=int(row.documents),
        avg_length=max(1.0, float(row.lengths) / float(row.documents)),
        df=dict(zip(row.words, (int(d) for d in row.dfs), strict=True)),
    )
