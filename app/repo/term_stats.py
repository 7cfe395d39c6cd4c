"""Document frequencies by audience: the statistics of the full-text lane's word weights
(rule: word-stats-per-audience; :mod:`app.domain.terms`, docs/search.md).

An **audience** is a set of rows every one of whose readers reads all of it: a project's
project-scoped memories (audience = the project id) and the org's org-scoped memories (audience
``*``, which no id can be). A reader reads exactly the audiences of its readable projects, and
``*`` unless its key is restricted to projects (rule: readable-project-set;
:mod:`app.repo.readrule`). Private memories belong to no audience and are never counted. A reader's
statistics are the sums over the audiences it reads, so every row they count is one the reader may
read: a row it cannot read (private, another project's, or the org's behind a restricted key)
changes none of its weights.

The documents counted are those the full-text lane scores: every memory's ``search_tsv`` and
every current passage's (``parent_revision`` = its memory's revision), whatever the lifecycle.

- ``sibyl:term_stats.*`` refresh statements recount one org (:func:`refresh`) in three
  transactions: *arm* (short, under the org's lock held exclusively, taken by polling so that
  no write queues behind it: every audience ``armed_by`` this refresh's token), *count* (no
  lock: one snapshot, into temporary tables), *stamp* (short: the audiences still armed by the
  same token get the new counts and ``fresh``; the others keep theirs, not fresh);
- ``sibyl:term_stats.retire`` marks audiences not fresh and not armed (:func:`retire`), after
  taking the shared form of that lock (``sibyl:term_stats.retire_lock``). A write waits only
  for the arming's own statements, never for a count, and never lets a count that missed it be
  stamped fresh: a write whose retire ran before the arming committed before it (the arming
  took the lock only once no write held it), so the count sees it; one whose retire ran after
  the arming disarmed the audience (or found it disarmed already), so it is not stamped. Two
  refreshes may overlap: the later arming takes every audience over, so the earlier refresh
  stamps none (its count may predate a write the later arming no longer shows);
- ``sibyl:search.words`` (named for the verb it serves) splits a query into words and reads
  the reader's sums for them (:func:`lookup`).

**Impact lists.** The count also writes, for every lexeme that more than ``list_length`` of the
org's counted documents hold, each audience's ``list_length`` documents holding it with the
highest BM25 term contribution (``tf·(k1 + 1) / (tf + k1·(1 − b + b·len / avg_len))``,
``avg_len`` the audience's mean length; ties by document id), not counting retired memories.
They are stored, one row per list (arrays in list order), under a new generation in their own
transaction (*store*, between *count* and *stamp*; no lock), the stamp points each audience
it stamps at that generation, and older generations are deleted after it (*sweep*). The
full-text lane reads a common word's candidates from them
(:mod:`app.repo.search`): every document of a list is one every reader of its audience may read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.repo.housekeeping import FLUSH_STATISTICS_SQL

ORG_AUDIENCE = "*"
"""The audience of org-scoped memories (no project or memory id can be ``*``)."""

_LOCK = "hashtext('sibyl:term_stats:' || CAST(:org_id AS text))"

# Every search document of the org that belongs to an audience, with that audience; and for a
# memory whether the count's own snapshot sees the transaction its created_xid names (always,
# unless the value came from another cluster: a dump restored elsewhere carries the old
# cluster's ids, which may lie ahead of every snapshot here; an adversarial review).
_DOCUMENTS = f"""documents AS (
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END AS audience,
           e.search_tsv AS tsv,
           coalesce(pg_visible_in_snapshot(e.created_xid, pg_current_snapshot()), true)
             AS xid_seen
    FROM entities e
    WHERE e.org_id = :org_id AND e.scope IN ('project', 'org')
  UNION ALL
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END,
           p.search_tsv, true
    FROM passages p
    JOIN entities e ON e.org_id = p.org_id AND e.id = p.parent_id
                   AND p.parent_revision = e.revision
    WHERE p.org_id = :org_id AND e.scope IN ('project', 'org')
)"""

# Every non-retired search document of an audience, with its id, memory and type: the documents
# of the impact lists (read in the count's snapshot).
_LIST_DOCUMENTS = f"""documents AS (
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END AS audience,
           e.id AS doc_id, e.id AS memory_id, e.type AS memory_type, e.search_tsv AS tsv,
           length(e.search_tsv) AS len
    FROM entities e
    WHERE e.org_id = :org_id AND e.scope IN ('project', 'org') AND e.lifecycle <> 'retired'
  UNION ALL
    SELECT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END,
           p.id, e.id, e.type, p.search_tsv, length(p.search_tsv)
    FROM passages p
    JOIN entities e ON e.org_id = p.org_id AND e.id = p.parent_id
                   AND p.parent_revision = e.revision
    WHERE p.org_id = :org_id AND e.scope IN ('project', 'org') AND e.lifecycle <> 'retired'
)"""

REFRESH_SETTINGS_SQL = text(
    """/* sibyl:term_stats.refresh_settings */ SET LOCAL statement_timeout = 0"""
)
# For the transactions that insert many rows under a foreign key (store: a row per list; stamp:
# a row per lexeme and audience, 57,262 on the PEP org): PostgreSQL checks each row with a
# prepared lookup, which the engine's force_custom_plan would plan again for every row (the PEP
# org's stamp: 0.7 s of checks against 0.2 s with the plan kept). Their own statements run once
# and read small or temporary tables, so a generic plan costs them nothing.
GENERIC_PLANS_SQL = text(
    """/* sibyl:term_stats.generic_plans */
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"""
)
# The count sorts every (document, common lexeme) pair once for the impact lists: in memory,
# and without JIT (compiling this plan with inlining took minutes where running it takes
# seconds).
COUNT_MEMORY_SQL = text(
    """/* sibyl:term_stats.count_memory */
SELECT set_config('work_mem', '64MB', true), set_config('jit', 'off', true)"""
)

# Tried, never waited on: a waiting exclusive request would queue every new write of the org
# behind the transactions that hold the lock shared (a long import), so the arming polls.
REFRESH_LOCK_SQL = text(
    f"""/* sibyl:term_stats.refresh_lock */
SELECT pg_try_advisory_xact_lock({_LOCK}) AS locked"""
)

# The audiences the org has now (read before the arming's lock is taken: it scans the org).
AUDIENCES_SQL = text(
    f"""/* sibyl:term_stats.audiences */
SELECT DISTINCT CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}' ELSE e.project_id END AS audience
FROM entities e
WHERE e.org_id = :org_id AND e.scope IN ('project', 'org')"""
)

ARM_SQL = text(
    """/* sibyl:term_stats.arm */
INSERT INTO term_audiences (org_id, audience, documents, lengths, fresh, armed_by)
SELECT :org_id, a.audience, 0, 0, false, :token
FROM unnest(CAST(:audiences AS text[])) AS a(audience)
ON CONFLICT (org_id, audience) DO UPDATE SET armed_by = :token"""
)

ARM_REST_SQL = text(
    """/* sibyl:term_stats.arm_rest */
UPDATE term_audiences SET armed_by = :token
WHERE org_id = :org_id AND armed_by IS DISTINCT FROM :token  -- another refresh's: taken over"""
)

COUNT_SNAPSHOT_SQL = text(
    """/* sibyl:term_stats.count_snapshot */ SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"""
)

COUNT_AUDIENCES_SQL = text(
    f"""/* sibyl:term_stats.count_audiences */
CREATE TEMPORARY TABLE counted_audiences ON COMMIT PRESERVE ROWS AS
WITH {_DOCUMENTS}
SELECT d.audience, count(*) AS documents, coalesce(sum(length(d.tsv)), 0) AS lengths,
       bool_and(d.xid_seen) AS xids_seen  -- false: its snapshot cannot tell new rows apart
FROM documents d
GROUP BY d.audience"""
)

COUNT_LEXEMES_SQL = text(
    f"""/* sibyl:term_stats.count_lexemes */
CREATE TEMPORARY TABLE counted_lexemes ON COMMIT PRESERVE ROWS AS
WITH {_DOCUMENTS}
SELECT u.lexeme, d.audience, count(*) AS df
FROM documents d
CROSS JOIN LATERAL unnest(d.tsv) u
GROUP BY u.lexeme, d.audience"""
)

# The impact lists of the count's snapshot (see the module docstring): the lexemes more than
# :list_length counted documents of the org hold, and per audience its best documents for each,
# one row per list. Lexemes compare bytewise (COLLATE "C"): the grouping is the cost, and a
# locale's comparison would be most of it. Each list is ordered within its group only (the
# aggregate's own sort, a few hundred rows each), never one sort of every contribution; its
# entries are ranked as one composite value (term_impact_entry) so that the group is sorted
# once, not once per array.
COUNT_IMPACTS_SQL = text(
    f"""/* sibyl:term_stats.count_impacts */
CREATE TEMPORARY TABLE counted_impacts ON COMMIT PRESERVE ROWS AS
WITH {_LIST_DOCUMENTS},
common AS MATERIALIZED (  -- the lexemes whose matches a list bounds
    SELECT c.lexeme COLLATE "C" AS lexeme
    FROM counted_lexemes c
    GROUP BY c.lexeme
    HAVING sum(c.df) > :list_length
),
means AS (  -- each audience's mean document length
    SELECT c.audience, greatest(c.lengths::float8 / greatest(c.documents, 1), 1) AS mean
    FROM counted_audiences c
),
contributions AS (  -- per document and common lexeme: BM25's term contribution
    SELECT d.audience, u.lexeme COLLATE "C" AS lexeme, d.doc_id, d.memory_id, d.memory_type,
           f.tf * (CAST(:k1 AS float8) + 1)
           / (f.tf + CAST(:k1 AS float8)
                     * (1 - CAST(:b AS float8) + CAST(:b AS float8) * d.len / m.mean)) AS impact
    FROM documents d
    JOIN means m ON m.audience = d.audience
    CROSS JOIN LATERAL unnest(d.tsv) u  -- the vector read once per document
    CROSS JOIN LATERAL (SELECT cardinality(u.positions) AS tf) f
    WHERE u.lexeme COLLATE "C" IN (SELECT lexeme FROM common)
),
ranked AS (  -- each list: its best entries, ranked with one sort of its own group
    SELECT c.audience, c.lexeme,
           (array_agg(CAST((c.doc_id, c.memory_id, c.memory_type, c.impact) AS term_impact_entry)
                      ORDER BY c.impact DESC, c.doc_id))[1:L.n] AS entries
    FROM contributions c
    CROSS JOIN (SELECT CAST(:list_length AS int) AS n) L
    GROUP BY c.audience, c.lexeme, L.n
)
SELECT r.audience, r.lexeme,  -- unnest reads an array in its order
       ARRAY(SELECT e.doc_id FROM unnest(r.entries) e) AS doc_ids,
       ARRAY(SELECT e.memory_id FROM unnest(r.entries) e) AS memory_ids,
       ARRAY(SELECT e.memory_type FROM unnest(r.entries) e) AS memory_types,
       ARRAY(SELECT e.impact FROM unnest(r.entries) e) AS impacts
FROM ranked r"""
)

NEXT_GENERATION_SQL = text(
    """/* sibyl:term_stats.next_generation */ SELECT nextval('term_impacts_generation')"""
)

# The lists of the audiences that have a row (an audience new since the arming gets one at the
# stamp, not fresh, and its lists at the next refresh), under the refresh's generation.
STORE_IMPACTS_SQL = text(
    """/* sibyl:term_stats.store_impacts */
INSERT INTO term_impact_lists (org_id, lexeme, audience, generation, doc_ids, memory_ids,
                               memory_types, impacts)
SELECT :org_id, c.lexeme, c.audience, :generation, c.doc_ids, c.memory_ids, c.memory_types,
       c.impacts
FROM counted_impacts c
WHERE EXISTS (SELECT 1 FROM term_audiences s WHERE s.org_id = :org_id AND s.audience = c.audience)
ORDER BY c.lexeme, c.audience  -- a word's lists on few pages"""
)

# After the stamp: the generations older than each audience's current one, and this refresh's
# own lists of the audiences it did not stamp (never a newer refresh's, still to be stamped).
SWEEP_IMPACTS_SQL = text(
    """/* sibyl:term_stats.sweep_impacts */
DELETE FROM term_impact_lists i
USING term_audiences s
WHERE i.org_id = :org_id AND s.org_id = :org_id AND s.audience = i.audience
  AND (i.generation < s.impacts_generation
       OR (i.generation = :generation
           AND s.impacts_generation IS DISTINCT FROM CAST(:generation AS bigint)))"""
)

# What the stamp must change so that the org's term_stats equal the count: (lexeme, audience)
# with the new df, or a NULL df for a row to delete. Read in the count's snapshot, after the
# arming: only the stamp writes term_stats, and only for audiences still armed by its own token,
# so for those audiences the rows the stamp finds are the rows this snapshot saw (a refresh that
# armed earlier and stamped after our arming stamps none of them: ours took them over). The
# stamp then writes only the rows that changed and holds its locks for that long, not for a
# rewrite of every lexeme of the org (writes would wait seconds behind it and fail 503 on the
# statement timeout).
COUNT_CHANGES_SQL = text(
    """/* sibyl:term_stats.count_changes */
CREATE TEMPORARY TABLE lexeme_changes ON COMMIT PRESERVE ROWS AS
SELECT coalesce(c.lexeme, s.lexeme) AS lexeme, coalesce(c.audience, s.audience) AS audience,
       c.df  -- NULL: the word is gone from that audience
FROM counted_lexemes c
FULL JOIN (SELECT t.lexeme, t.audience, t.df FROM term_stats t WHERE t.org_id = :org_id) s
  ON s.lexeme = c.lexeme AND s.audience = c.audience
WHERE c.df IS DISTINCT FROM s.df"""
)

STILL_ARMED_SQL = text(
    """/* sibyl:term_stats.still_armed */
SELECT s.audience FROM term_audiences s
WHERE s.org_id = :org_id AND s.armed_by = :token
ORDER BY s.audience
FOR UPDATE SKIP LOCKED  -- a row a write holds is being disarmed: never waited for (no deadlock)"""
)

STAMP_CLEAR_SQL = text(
    """/* sibyl:term_stats.stamp_clear */
DELETE FROM term_stats t
USING lexeme_changes c
WHERE t.org_id = :org_id AND t.lexeme = c.lexeme AND t.audience = c.audience AND c.df IS NULL
  AND c.audience = ANY(CAST(:audiences AS text[]))"""
)

STAMP_LEXEMES_SQL = text(
    """/* sibyl:term_stats.stamp_lexemes */
INSERT INTO term_stats (org_id, lexeme, audience, df)
SELECT :org_id, c.lexeme, c.audience, c.df
FROM lexeme_changes c
WHERE c.df IS NOT NULL AND c.audience = ANY(CAST(:audiences AS text[]))
ORDER BY c.lexeme, c.audience  -- a lexeme's rows on few pages: its lookup reads few buffers
ON CONFLICT (org_id, lexeme, audience) DO UPDATE SET df = EXCLUDED.df"""
)

# The counting transaction's snapshot (repeatable read: the one every count statement uses).
COUNTED_SNAPSHOT_SQL = text(
    """/* sibyl:term_stats.counted_snapshot */
SELECT CAST(pg_current_snapshot() AS text) AS snapshot"""
)

STAMP_AUDIENCES_SQL = text(
    """/* sibyl:term_stats.stamp_audiences */
UPDATE term_audiences s
SET documents = c.documents, lengths = c.lengths, fresh = true, armed_by = NULL,
    refreshed_at = now(), impacts_generation = CAST(:generation AS bigint),
    counted_snapshot = CASE WHEN c.xids_seen THEN CAST(CAST(:snapshot AS text) AS pg_snapshot)
                       END  -- NULL: every write into it retires it
FROM counted_audiences c
WHERE s.org_id = :org_id AND s.audience = c.audience
  AND s.audience = ANY(CAST(:audiences AS text[]))
RETURNING s.documents"""
)

STAMP_GONE_SQL = text(
    """/* sibyl:term_stats.stamp_gone */
DELETE FROM term_audiences s
WHERE s.org_id = :org_id AND s.audience = ANY(CAST(:audiences AS text[]))
  AND NOT EXISTS (SELECT 1 FROM counted_audiences c WHERE c.audience = s.audience)"""
)

# An audience counted but without a row at the arming (its first memory came since): stored,
# not fresh (a write into it may have been missed), so its readers keep the fallback weights.
STAMP_NEW_SQL = text(
    """/* sibyl:term_stats.stamp_new */
INSERT INTO term_audiences (org_id, audience, documents, lengths, fresh, armed_by)
SELECT :org_id, c.audience, 0, 0, false, NULL FROM counted_audiences c
WHERE NOT EXISTS (  -- read, not a conflict check: never waits for a write holding the row
    SELECT 1 FROM term_audiences s WHERE s.org_id = :org_id AND s.audience = c.audience)
ON CONFLICT (org_id, audience) DO NOTHING"""
)

DROP_COUNTED_SQL = text(
    """/* sibyl:term_stats.drop_counted */
DROP TABLE IF EXISTS counted_audiences, counted_lexemes, lexeme_changes, counted_impacts"""
)

RETIRE_LOCK_SQL = text(
    f"""/* sibyl:term_stats.retire_lock */
SELECT pg_advisory_xact_lock_shared({_LOCK})"""
)

# Retires an armed audience always (its refresh's count may hold the row), a fresh one unless
# the written memory (:entity_id, still stored) was created by a transaction its count's
# snapshot does not see: such a memory is in none of its counts, so editing or deleting it
# must not send every reader of its project to the fallback weights. Transaction ids, not
# clocks: a clock that steps back could make a counted memory look new.
RETIRE_SQL = text(
    """/* sibyl:term_stats.retire */
UPDATE term_audiences s SET fresh = false, armed_by = NULL
WHERE s.org_id = :org_id AND s.audience = ANY(CAST(:audiences AS text[]))
  AND (s.armed_by IS NOT NULL
       OR (s.fresh AND NOT coalesce(
             (SELECT NOT pg_visible_in_snapshot(e.created_xid, s.counted_snapshot)
              FROM entities e
              WHERE e.org_id = :org_id AND e.id = CAST(:entity_id AS text)),
             false)))"""
)

# Retires the audiences a memory moves INTO (its scope or project changed): the same rule as
# above for a row that exists (the count may hold the memory only if it saw its creation... and
# then held it elsewhere, so it misses it here), and a row made, not fresh, for an audience that
# has none yet (a project never counted: the refresher sees it as due; an adversarial review).
RETIRE_INTO_SQL = text(
    """/* sibyl:term_stats.retire_into */
INSERT INTO term_audiences AS s (org_id, audience, documents, lengths, fresh)
SELECT :org_id, a.audience, 0, 0, false
FROM unnest(CAST(:audiences AS text[])) AS a(audience)
ON CONFLICT (org_id, audience) DO UPDATE SET fresh = false, armed_by = NULL
WHERE s.armed_by IS NOT NULL
   OR (s.fresh AND NOT coalesce(
         (SELECT NOT pg_visible_in_snapshot(e.created_xid, s.counted_snapshot)
          FROM entities e
          WHERE e.org_id = :org_id AND e.id = CAST(:entity_id AS text)),
         false))"""
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


ARM_WAIT_S = 120.0
"""How long an arming polls for the org's lock (held shared by writes in flight) before the
refresh gives up with :class:`RefreshBusy`."""
ARM_POLL_S = 0.05


class RefreshBusy(RuntimeError):
    """Writes of the org held its statistics lock for :data:`ARM_WAIT_S` without a gap."""


LIST_LENGTH = 200
"""The documents an impact list keeps per audience and lexeme; a lexeme gets lists when more of
the org's counted documents hold it."""


@dataclass(frozen=True)
class ListParams:
    """What the impact lists are computed with: their length (the documents kept per audience
    and lexeme; a lexeme gets lists when more of the org's counted documents hold it) and the
    BM25 constants of the contribution they are ordered by (the search settings' own)."""

    list_length: int = LIST_LENGTH
    k1: float = 1.2
    b: float = 0.75


async def refresh(
    conn: AsyncConnection,
    *,
    org_id: str,
    arm_wait_s: float | None = None,
    lists: ListParams | None = None,
) -> tuple[int, int]:
    """Recount every audience of ``org_id`` on ``conn`` (a connection outside any transaction:
    :func:`arm`, :func:`count`, :func:`store`, :func:`stamp` and :func:`sweep` run a transaction
    each, see the module docstring); return (audiences stamped fresh, their documents). Writes of
    the org wait only for the arming's own statements, never for the count or the lists; an
    overlapping refresh takes over the audiences it arms (the earlier one then stamps none of
    them). ``lists``: how the impact lists are computed (default :class:`ListParams`)."""
    try:
        token = await arm(conn, org_id=org_id, arm_wait_s=arm_wait_s)
        snapshot = await count(conn, org_id=org_id, lists=lists or ListParams())
        generation = await store(conn, org_id=org_id)
        done = await stamp(
            conn, org_id=org_id, token=token, snapshot=snapshot, generation=generation
        )
        await sweep(conn, org_id=org_id, generation=generation)
        return done
    finally:
        if not conn.in_transaction():
            async with conn.begin():
                await conn.execute(DROP_COUNTED_SQL)


async def arm(conn: AsyncConnection, *, org_id: str, arm_wait_s: float | None = None) -> str:
    """Refresh, step 1 (one short transaction, under the org's lock, taken by polling so that
    it never queues writes behind it): every audience of ``org_id`` armed with a new token (a
    row made for each new one); returns the token. Raises :class:`RefreshBusy` when writes held
    the lock for ``arm_wait_s`` seconds (default :data:`ARM_WAIT_S`)."""
    p = {"org_id": org_id}
    token = secrets.token_hex(8)
    deadline = time.monotonic() + (ARM_WAIT_S if arm_wait_s is None else arm_wait_s)
    async with conn.begin():
        await conn.execute(REFRESH_SETTINGS_SQL)
        audiences = [r.audience for r in await conn.execute(AUDIENCES_SQL, p)]
        while not (await conn.execute(REFRESH_LOCK_SQL, p)).scalar():
            if time.monotonic() > deadline:
                raise RefreshBusy(f"writes of {org_id} held its statistics lock; try again")
            await asyncio.sleep(ARM_POLL_S)  # in-flight retiring writes end first
        await conn.execute(ARM_SQL, {**p, "audiences": audiences, "token": token})
        await conn.execute(ARM_REST_SQL, {**p, "token": token})
    return token


async def count(conn: AsyncConnection, *, org_id: str, lists: ListParams | None = None) -> str:
    """Refresh, step 2 (one repeatable-read transaction, no lock): count the org's documents
    and lexemes by audience into this session's temporary tables, the lexeme rows that differ
    from the stored ones (what :func:`stamp` writes) and the impact lists (what :func:`store`
    writes; ``lists``: their parameters, default :class:`ListParams`). Returns the transaction's
    snapshot (``pg_snapshot`` as text, read after its first query): a memory whose creating
    transaction it does not see is in none of the counts."""
    p = {"org_id": org_id}
    async with conn.begin():
        await conn.execute(COUNT_SNAPSHOT_SQL)
        await conn.execute(REFRESH_SETTINGS_SQL)
        await conn.execute(COUNT_MEMORY_SQL)
        await conn.execute(DROP_COUNTED_SQL)
        await conn.execute(COUNT_AUDIENCES_SQL, p)
        snapshot: str = (await conn.execute(COUNTED_SNAPSHOT_SQL)).scalar_one()
        await conn.execute(COUNT_LEXEMES_SQL, p)
        await conn.execute(COUNT_CHANGES_SQL, p)
        await conn.execute(COUNT_IMPACTS_SQL, {**p, **dataclasses.asdict(lists or ListParams())})
    return snapshot


async def store(conn: AsyncConnection, *, org_id: str) -> int:
    """Refresh, step 3 (one transaction, no lock: nothing reads a generation before a stamp
    names it): write the counted impact lists under a new generation; return it."""
    async with conn.begin():
        await conn.execute(REFRESH_SETTINGS_SQL)
        await conn.execute(GENERIC_PLANS_SQL)
        generation = int((await conn.execute(NEXT_GENERATION_SQL)).scalar_one())
        await conn.execute(STORE_IMPACTS_SQL, {"org_id": org_id, "generation": generation})
    return generation


async def sweep(conn: AsyncConnection, *, org_id: str, generation: int) -> None:
    """Refresh, step 5 (one transaction): delete the impact lists no audience uses any more
    (older generations, and ``generation``'s lists of audiences the stamp did not take)."""
    async with conn.begin():
        await conn.execute(REFRESH_SETTINGS_SQL)
        await conn.execute(SWEEP_IMPACTS_SQL, {"org_id": org_id, "generation": generation})


async def stamp(
    conn: AsyncConnection,
    *,
    org_id: str,
    token: str,
    snapshot: str | None = None,
    generation: int | None = None,
) -> tuple[int, int]:
    """Refresh, step 4 (one short transaction): the audiences still armed by ``token`` (no
    write retired them and no later refresh took them over since the arming; a row a write is
    disarming is skipped, never waited for) take the counts and ``fresh`` (only the lexeme rows
    whose counts changed are written, so a write's retire waits for little); an armed audience
    with no document left loses its row; an audience counted that had no row at the arming gets
    one, not fresh. ``snapshot``: what :func:`count` returned (None: unknown; every write
    into a stamped audience then retires it). Returns (audiences stamped fresh, their
    documents). ``generation``: the impact lists :func:`store` wrote, which each stamped
    audience now names (None: none)."""
    p = {"org_id": org_id}
    async with conn.begin():
        await conn.execute(REFRESH_SETTINGS_SQL)
        await conn.execute(GENERIC_PLANS_SQL)
        armed = [r.audience for r in await conn.execute(STILL_ARMED_SQL, {**p, "token": token})]
        q = {**p, "audiences": armed}
        await conn.execute(STAMP_CLEAR_SQL, q)
        await conn.execute(STAMP_GONE_SQL, q)
        await conn.execute(STAMP_LEXEMES_SQL, q)
        documents = [
            r.documents
            for r in await conn.execute(
                STAMP_AUDIENCES_SQL, {**q, "snapshot": snapshot, "generation": generation}
            )
        ]
        await conn.execute(STAMP_NEW_SQL, p)
        await conn.execute(DROP_COUNTED_SQL)
    return len(documents), sum(documents)


VACUUM_SQL = text(
    "/* sibyl:term_stats.vacuum */ VACUUM (ANALYZE) term_audiences, term_stats, term_impact_lists"
)


async def vacuum(conn: AsyncConnection) -> None:
    """``VACUUM (ANALYZE)`` the statistics tables; ``conn`` must be in autocommit mode (its
    pending row counts are flushed first: :data:`app.repo.housekeeping.FLUSH_STATISTICS_SQL`)."""
    await conn.execute(text(FLUSH_STATISTICS_SQL))
    await conn.execute(VACUUM_SQL)


async def refresh_orgs(engine: AsyncEngine, org_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """:func:`refresh` each of ``org_ids`` (three short-or-lockless transactions each, see
    there), then ``VACUUM (ANALYZE)`` the statistics tables it rewrote (fresh planner statistics
    and visibility map: autovacuum may be off); (audiences, documents) by org. The first org
    that fails raises its error (:func:`recount` with ``stop_on_error``). Runs on an engine of
    its own to the same database, without the service's statement timeout (server- and
    client-side: a whole org's vectors are read)."""
    from app.core.db import make_engine

    bulk = make_engine(engine.url.render_as_string(hide_password=False))
    try:
        done = await recount(bulk, org_ids, stop_on_error=True)
    finally:
        await bulk.dispose()
    return {org_id: (r.audiences, r.documents) for org_id, r in done.items()}


# The orgs whose statistics a refresh would change (the automatic refresher's question,
# app.service.workers.search_stats), each arm through an index:
# - an audience a write retired (not fresh), or made not fresh by a move into it;
# - an audience holding a memory whose creating transaction its count's snapshot does not see
#   (created since; creates retire nothing): per audience row, the memories of the org created
#   at or after that snapshot's xmin (ix_entities_created_xid), those of the audience that the
#   snapshot does not see;
# - a memory created at or after the org's oldest count (the same index) in an audience with no
#   row (the first memory of a new project, or of the org scope);
# - an org with memories in an audience and no audience row at all (never counted).
# An audience counted without a snapshot (NULL: a restored dump's ids) is due only when
# retired. Private memories belong to no audience and make no org due.
DUE_ORGS_SQL = text(
    f"""/* sibyl:term_stats.due_orgs */
WITH counted AS (  -- the audiences of the orgs asked about
    SELECT a.org_id, a.audience, a.fresh, a.counted_snapshot AS snapshot
    FROM term_audiences a
    WHERE CAST(:orgs AS text[]) IS NULL OR a.org_id = ANY(CAST(:orgs AS text[]))
)
SELECT c.org_id
FROM counted c
WHERE NOT c.fresh
UNION
SELECT c.org_id
FROM counted c
CROSS JOIN LATERAL (  -- per audience, an index range: the memories created since its xmin
    SELECT 1 FROM entities e
    WHERE e.org_id = c.org_id AND e.created_xid >= pg_snapshot_xmin(c.snapshot)
      AND CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}'
               WHEN e.scope = 'project' THEN e.project_id END = c.audience
      AND NOT pg_visible_in_snapshot(e.created_xid, c.snapshot)
    ORDER BY e.created_xid DESC  -- read from the index, newest first (never a scan of all)
    LIMIT 1) created
WHERE c.snapshot IS NOT NULL
UNION
SELECT o.org_id
FROM (SELECT c.org_id, min(pg_snapshot_xmin(c.snapshot)) AS xmin
      FROM counted c WHERE c.snapshot IS NOT NULL GROUP BY c.org_id) o
CROSS JOIN LATERAL (  -- per org, an index range: the memories created since its oldest count
    SELECT 1 FROM entities e
    WHERE e.org_id = o.org_id AND e.created_xid >= o.xmin AND e.scope IN ('project', 'org')
      AND NOT EXISTS (
          SELECT 1 FROM counted c
          WHERE c.org_id = e.org_id
            AND c.audience = CASE WHEN e.scope = 'org' THEN '{ORG_AUDIENCE}'
                                  ELSE e.project_id END)
    ORDER BY e.created_xid DESC
    LIMIT 1) unrowed
UNION
SELECT o.id
FROM orgs o
WHERE (CAST(:orgs AS text[]) IS NULL OR o.id = ANY(CAST(:orgs AS text[])))
  AND NOT EXISTS (SELECT 1 FROM term_audiences a WHERE a.org_id = o.id)
  AND EXISTS (SELECT 1 FROM entities e WHERE e.org_id = o.id AND e.scope IN ('project', 'org'))
ORDER BY 1"""
)


STALE_COUNT_SQL = text(
    """/* sibyl:term_stats.stale_count */
SELECT count(*) FROM term_audiences WHERE org_id = :org_id AND NOT fresh"""
)


async def stale_audiences(conn: AsyncConnection, *, org_id: str) -> int:
    """How many audiences of ``org_id`` are not fresh (their readers use the fallback)."""
    return int((await conn.execute(STALE_COUNT_SQL, {"org_id": org_id})).scalar_one())


async def due_orgs(conn: AsyncConnection, orgs: Sequence[str] | None = None) -> list[str]:
    """The orgs (of ``orgs``; None: of every org) whose search statistics are out of date (see
    :data:`DUE_ORGS_SQL`), by id."""
    params = {"orgs": None if orgs is None else list(orgs)}
    return [r.org_id for r in await conn.execute(DUE_ORGS_SQL, params)]


@dataclass(frozen=True)
class Recount:
    """What recounting one org did: ``audiences`` stamped fresh and their ``documents`` (0, 0
    when it failed), its wall time in ``seconds``, and ``error`` (the exception's class name;
    None when it succeeded)."""

    audiences: int
    documents: int
    seconds: float
    error: str | None = None


async def recount(
    engine: AsyncEngine,
    org_ids: Sequence[str],
    *,
    arm_wait_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop_on_error: bool = False,
) -> dict[str, Recount]:
    """:func:`refresh` each of ``org_ids`` on ``engine`` (one connection each; an org that
    fails is reported and the next one counted, or, with ``stop_on_error``, its error raised),
    then ``VACUUM (ANALYZE)`` the statistics tables once when any org was stamped. ``engine``
    should carry no statement timeout; ``clock`` (seconds) times each org."""
    from app.core.db import cancelling

    out: dict[str, Recount] = {}
    for org_id in org_ids:
        started = clock()
        try:
            async with engine.connect() as conn:
                audiences, documents = await refresh(conn, org_id=org_id, arm_wait_s=arm_wait_s)
            out[org_id] = Recount(audiences, documents, clock() - started)
        except Exception as exc:
            if stop_on_error or cancelling():  # cancelled mid-statement: stop, not next org
                raise
            out[org_id] = Recount(0, 0, clock() - started, type(exc).__name__)
    if any(r.error is None for r in out.values()):
        async with engine.connect() as conn:
            await vacuum(await conn.execution_options(isolation_level="AUTOCOMMIT"))
    return out


def audiences_of(scope: str, project_id: str | None) -> list[str]:
    """The audience a memory of ``scope`` belongs to (none for a private one)."""
    if scope == "org":
        return [ORG_AUDIENCE]
    if scope == "project" and project_id is not None:
        return [project_id]
    return []


async def retire(
    conn: AsyncConnection,
    *,
    org_id: str,
    audiences: Sequence[str],
    entity_id: str | None = None,
    moved_in: bool = False,
) -> None:
    """Mark ``audiences`` of ``org_id`` not fresh (same transaction as the write that changed a
    row they count): an armed one always; a fresh one unless ``entity_id`` (the written memory,
    still stored) was created by a transaction its count's snapshot does not see (in none of its
    counts). Without ``entity_id`` (or when either side is unknown), every one. ``moved_in``:
    the memory moves into these audiences; one with no row yet gets a row, not fresh."""
    if audiences:
        p = {"org_id": org_id, "audiences": sorted(set(audiences)), "entity_id": entity_id}
        await conn.execute(RETIRE_LOCK_SQL, p)
        await conn.execute(RETIRE_INTO_SQL if moved_in else RETIRE_SQL, p)


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
