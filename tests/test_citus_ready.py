"""Ready for Citus (issue 15, docs/scaling.md): every key the walk or a write uses has org_id.

Reads the migrated catalog: every primary key, unique constraint, foreign key and b-tree index
of a table that carries ``org_id`` must include it (``orgs`` is distributed by its own ``id``),
so each table can be distributed by ``org_id`` without a schema change. The exceptions are the
ones ``docs/scaling.md`` names, each with its reason; a new key without ``org_id`` fails here.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# Named in docs/scaling.md: api_keys becomes a reference table (the key probe runs before the org
# is known); uq_users_id goes at the move (a unique constraint without org_id cannot be enforced
# on a distributed table); the full-text GIN indexes are per shard and not used by walks.
DOCUMENTED = {
    "pk_api_keys",
    "uq_api_keys_key_hash",
    "fk_api_keys_org_id_user_id_users",  # dropped at the move (reference -> distributed)
    "uq_users_id",
}

KEYS_SQL = text(
    """
WITH tables AS (
    SELECT c.oid, c.relname,
           CASE WHEN c.relname = 'orgs' THEN 'id' ELSE 'org_id' END AS dist
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
      AND (c.relname = 'orgs' OR EXISTS (
            SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped))
)
SELECT t.relname AS table_name, con.conname AS name, con.contype AS kind,
       EXISTS (SELECT 1 FROM pg_attribute a
               WHERE a.attrelid = t.oid AND a.attname = t.dist
                 AND a.attnum = ANY(con.conkey)) AS has_org,
       con.contype <> 'f' OR EXISTS (
         SELECT 1 FROM pg_attribute a
         JOIN tables r ON r.oid = con.confrelid
         WHERE a.attrelid = con.confrelid AND a.attname = r.dist
           AND a.attnum = ANY(con.confkey)) AS target_has_org
FROM tables t
JOIN pg_constraint con ON con.conrelid = t.oid AND con.contype IN ('p', 'u', 'f')
UNION ALL
SELECT t.relname, i.relname, 'i',
       EXISTS (SELECT 1 FROM pg_attribute a
               WHERE a.attrelid = t.oid AND a.attname = t.dist
                 AND a.attnum = ANY(ix.indkey::int2[])),
       true
FROM tables t
JOIN pg_index ix ON ix.indrelid = t.oid
JOIN pg_class i ON i.oid = ix.indexrelid
JOIN pg_am am ON am.oid = i.relam
WHERE am.amname = 'btree'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint con  -- those are checked as constraints
                  WHERE con.conindid = ix.indexrelid AND con.contype IN ('p', 'u'))
ORDER BY 1, 2
"""
)


async def _offenders(conn: AsyncConnection) -> list[tuple[str, str, str]]:
    rows = (await conn.execute(KEYS_SQL)).all()
    assert rows, "no keys read from the catalog"
    return [
        (r.table_name, r.name, r.kind)
        for r in rows
        if not (r.has_org and r.target_has_org) and r.name not in DOCUMENTED
    ]


async def test_every_key_of_an_org_table_includes_org_id(engine):
    async with engine.connect() as conn:
        assert await _offenders(conn) == []
        # The walk's own keys are among those read.
        names = {r.name for r in (await conn.execute(KEYS_SQL)).all()}
    assert {"pk_edges", "ix_edges_incoming", "ix_entities_read", "pk_entity_grants"} <= names


async def test_a_key_without_org_id_is_caught(engine):
    # The denied side of the check: a unique index, a unique constraint and a foreign key that
    # leave org_id out are all reported (inside a transaction that is rolled back).
    async with engine.connect() as conn:
        tx = await conn.begin()
        try:
            await conn.execute(
                text(
                    "CREATE TABLE walk_probe (org_id text NOT NULL, id text NOT NULL,"
                    " other text, PRIMARY KEY (org_id, id),"
                    " CONSTRAINT uq_walk_probe_other UNIQUE (other))"
                )
            )
            await conn.execute(text("CREATE UNIQUE INDEX ix_walk_probe_id ON walk_probe (id)"))
            await conn.execute(
                text(
                    "ALTER TABLE walk_probe ADD CONSTRAINT fk_walk_probe_id"
                    " FOREIGN KEY (id) REFERENCES walk_probe (id)"
                )
            )
            found = {name for table, name, _ in await _offenders(conn) if table == "walk_probe"}
            assert found == {"uq_walk_probe_other", "ix_walk_probe_id", "fk_walk_probe_id"}
        finally:
            await tx.rollback()
