"""access lexemes: a private memory's readers as lexemes, so one GIN probe finds a reader's
private matches of a word

The full-text lane's private arm (a word common enough to take the impact lists, matched among
the reader's own and granted private memories, which no audience list holds) read every one of
the reader's private memories and passages whole for each query: on the 200k benchmark org a
reader with 1,736 of them paid about 18,000 buffers a search whatever it asked.

``access_tsv`` holds, on a private memory and on each of its passages, one lexeme per user who
may be given the row by the private branch of the read rule: the owner and every grantee
(``' r' || md5(user_id)``: a leading space, which no text search parser puts in a lexeme, so no
word of a text can equal it). It is NULL on every other row. The partial GIN indexes over
``search_tsv || access_tsv`` then answer "this reader's private rows holding this word" as the
intersection of two posting lists (``sibyl:search.fulltext``'s ``private`` arm).

The lexemes are a way in, never a permission: every row they find still passes the read rule
(``app/repo/readrule.py``) against the live ``entities`` and ``entity_grants`` rows, so a stale
lexeme can only cost a candidate, never show a row. They are kept by triggers, so every writer
(REST, MCP, the importer, a DBA's own statement) keeps them:

- ``entities`` before INSERT (a private row) or an UPDATE that changes ``scope`` or
  ``owner_id``: computed from the row and its grants;
- ``entities`` after an UPDATE that changed ``access_tsv``: copied to the memory's passages;
- ``entity_grants`` after INSERT, UPDATE or DELETE: the memory's recomputed (and so its
  passages'), an UPDATE's old and new memory both;
- ``passages`` after an INSERT statement: the new passages of private memories take their
  parent's, in one statement (a row trigger's lookup cost 70 us a passage: 0.8 s of the PEP
  import). A passage never changes its parent (a re-cut deletes and inserts).

The trigger functions keep the search path they were created with (``SET search_path FROM
CURRENT``): a session with another path (``pg_restore``'s empty one) still finds the tables.
The importer's set-based blocks run with ``session_replication_role = replica`` (its foreign
keys checked beforehand), so the triggers are ``ENABLE ALWAYS``: they fire there too. A
load with the triggers off (the benchmark's generator, which drops its indexes first) fills the
column after with ``SELECT sibyl_access_refill()``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 14:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTIONS = r"""
CREATE FUNCTION sibyl_access_lexeme(user_id text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ' r' || md5(user_id);

COMMENT ON FUNCTION sibyl_access_lexeme(text) IS
  'The lexeme of a reader in access_tsv (migration 0015): no parser makes a lexeme with a space.';

CREATE FUNCTION sibyl_access_query(user_id text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CAST('''' || sibyl_access_lexeme(user_id) || '''' AS tsquery);

COMMENT ON FUNCTION sibyl_access_query(text) IS
  'The tsquery of a reader''s access lexeme: AND it with a word to find its private rows.';

CREATE FUNCTION sibyl_access_tsv(org text, entity text, scope text, owner text)
RETURNS tsvector LANGUAGE sql STABLE
RETURN CASE WHEN scope = 'private' THEN array_to_tsvector(array_remove(  -- no owner: NULL
         ARRAY[sibyl_access_lexeme(owner)]
         || ARRAY(SELECT sibyl_access_lexeme(g.user_id) FROM entity_grants g
                  WHERE g.org_id = org AND g.entity_id = entity), NULL)) END;

COMMENT ON FUNCTION sibyl_access_tsv(text, text, text, text) IS
  'A memory''s access_tsv: its owner and grantees as lexemes when private, else NULL.';

CREATE FUNCTION sibyl_access_refresh(org text, entity text) RETURNS void
LANGUAGE sql BEGIN ATOMIC
  UPDATE entities t SET access_tsv = sibyl_access_tsv(t.org_id, t.id, t.scope, t.owner_id)
  WHERE t.org_id = org AND t.id = entity AND t.scope = 'private';
END;

COMMENT ON FUNCTION sibyl_access_refresh(text, text) IS
  'Recompute one private memory''s access_tsv (its passages follow by trigger).';

CREATE FUNCTION sibyl_access_refill() RETURNS void
LANGUAGE sql BEGIN ATOMIC
  UPDATE entities t SET access_tsv = sibyl_access_tsv(t.org_id, t.id, t.scope, t.owner_id)
  WHERE t.scope = 'private';
  UPDATE passages p SET access_tsv = t.access_tsv
  FROM entities t
  WHERE t.org_id = p.org_id AND t.id = p.parent_id AND t.access_tsv IS NOT NULL
    AND p.access_tsv IS DISTINCT FROM t.access_tsv;
END;

COMMENT ON FUNCTION sibyl_access_refill() IS
  'Every private memory''s access_tsv, then its passages'' where they differ: after rows were
   written with the access triggers off (a load with its indexes dropped).';

CREATE FUNCTION sibyl_entities_access() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  NEW.access_tsv := sibyl_access_tsv(NEW.org_id, NEW.id, NEW.scope, NEW.owner_id);
  RETURN NEW;
END $$;

CREATE FUNCTION sibyl_entities_access_passages() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE passages SET access_tsv = NEW.access_tsv
  WHERE org_id = NEW.org_id AND parent_id = NEW.id
    AND access_tsv IS DISTINCT FROM NEW.access_tsv;
  RETURN NULL;
END $$;

CREATE FUNCTION sibyl_grants_access() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN  -- the memory a grant left (a DELETE, or an UPDATE of the grant)
    PERFORM sibyl_access_refresh(OLD.org_id, OLD.entity_id);
  END IF;
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE'  -- the memory it names now, unless done just above
      AND (NEW.org_id, NEW.entity_id) IS DISTINCT FROM (OLD.org_id, OLD.entity_id)) THEN
    PERFORM sibyl_access_refresh(NEW.org_id, NEW.entity_id);
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION sibyl_passages_access() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE passages p SET access_tsv = t.access_tsv
  FROM new_passages n
  JOIN entities t ON t.org_id = n.org_id AND t.id = n.parent_id
  WHERE t.access_tsv IS NOT NULL AND p.org_id = n.org_id AND p.id = n.id;
  RETURN NULL;
END $$;
"""

TRIGGERS = r"""
CREATE TRIGGER access_on_insert BEFORE INSERT ON entities
  FOR EACH ROW WHEN (NEW.scope = 'private') EXECUTE FUNCTION sibyl_entities_access();

CREATE TRIGGER access_on_update BEFORE UPDATE OF scope, owner_id ON entities
  FOR EACH ROW WHEN (OLD.scope IS DISTINCT FROM NEW.scope
                     OR OLD.owner_id IS DISTINCT FROM NEW.owner_id)
  EXECUTE FUNCTION sibyl_entities_access();

CREATE TRIGGER access_to_passages AFTER UPDATE ON entities
  FOR EACH ROW WHEN (OLD.access_tsv IS DISTINCT FROM NEW.access_tsv)
  EXECUTE FUNCTION sibyl_entities_access_passages();

CREATE TRIGGER access_on_grant AFTER INSERT OR UPDATE OR DELETE ON entity_grants
  FOR EACH ROW EXECUTE FUNCTION sibyl_grants_access();

CREATE TRIGGER access_from_parent AFTER INSERT ON passages
  REFERENCING NEW TABLE AS new_passages
  FOR EACH STATEMENT EXECUTE FUNCTION sibyl_passages_access();

ALTER TABLE entities ENABLE ALWAYS TRIGGER access_on_insert;

ALTER TABLE entities ENABLE ALWAYS TRIGGER access_on_update;

ALTER TABLE entities ENABLE ALWAYS TRIGGER access_to_passages;

ALTER TABLE entity_grants ENABLE ALWAYS TRIGGER access_on_grant;

ALTER TABLE passages ENABLE ALWAYS TRIGGER access_from_parent;
"""

# Every private memory's lexemes, then its passages' (the triggers are created after, so the
# fill writes each row once).
FILL = "SELECT sibyl_access_refill()"


def _statements(script: str) -> list[str]:
    """The statements of ``script``, one per paragraph (a function body holds no blank line)."""
    return [part.strip() for part in script.split("\n\n") if part.strip()]


def upgrade() -> None:
    op.execute("ALTER TABLE entities ADD COLUMN access_tsv tsvector")
    op.execute("ALTER TABLE passages ADD COLUMN access_tsv tsvector")
    for statement in [*_statements(FUNCTIONS), FILL, *_statements(TRIGGERS)]:
        op.execute(statement)
    for table in ("entities", "passages"):
        op.execute(
            f"CREATE INDEX ix_{table}_access_search ON {table} USING gin "
            "((search_tsv || access_tsv)) WHERE access_tsv IS NOT NULL"
        )
    # what the private arm read before: the reader's own private memories, one by one
    op.drop_index("ix_entities_owner_private", table_name="entities")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX ix_entities_owner_private ON entities (org_id, owner_id, id)"
        " WHERE scope = 'private'"
    )
    op.execute("DROP TRIGGER access_from_parent ON passages")
    op.execute("DROP TRIGGER access_on_grant ON entity_grants")
    op.execute("DROP TRIGGER access_to_passages ON entities")
    op.execute("DROP TRIGGER access_on_update ON entities")
    op.execute("DROP TRIGGER access_on_insert ON entities")
    for name in (
        "sibyl_passages_access()",
        "sibyl_grants_access()",
        "sibyl_entities_access_passages()",
        "sibyl_entities_access()",
        "sibyl_access_refill()",
        "sibyl_access_refresh(text, text)",
        "sibyl_access_tsv(text, text, text, text)",
        "sibyl_access_query(text)",
        "sibyl_access_lexeme(text)",
    ):
        op.execute(f"DROP FUNCTION {name}")
    op.execute("DROP INDEX ix_passages_access_search")
    op.execute("DROP INDEX ix_entities_access_search")
    op.execute("ALTER TABLE passages DROP COLUMN access_tsv")
    op.execute("ALTER TABLE entities DROP COLUMN access_tsv")
