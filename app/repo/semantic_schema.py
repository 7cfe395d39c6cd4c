"""The semantic lane's tables, created only where the server has pgvector (the ``vector``
extension).

- ``embedding_state (org_id, memory_id)``: which revision of a memory was embedded, by which
  model, into how many chunks (0: nothing to embed). A memory whose row is missing, or names an
  older revision or another model, is due for the embedding worker.
- ``embeddings (org_id, memory_id, doc_id, chunk)``: one vector per chunk of a search document
  (a current passage, or a memory never cut), at the memory's ``revision``; HNSW index for
  large readable sets (:mod:`app.repo.semantic`). Rows of a memory are replaced together with
  its state row, in one transaction of the worker.

Both reference ``entities`` (deleting a memory deletes its vectors). They are not part of the
SQLAlchemy models (their column type comes from the extension): the migration environment
ignores them when it compares models and database.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

DIMENSIONS = 384
"""The length of a vector (all-MiniLM-L6-v2's)."""

SEMANTIC_TABLES = frozenset({"embeddings", "embedding_state"})

AVAILABLE_SQL = text(
    """/* sibyl:semantic.available */
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS available,
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') AS installed,
       to_regclass('embeddings') IS NOT NULL AS tables"""
)

_CREATE = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS embedding_state (
    org_id text COLLATE "C" NOT NULL,
    memory_id text COLLATE "C" NOT NULL,
    revision integer NOT NULL,
    model text NOT NULL,
    chunks integer NOT NULL,
    embedded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_embedding_state PRIMARY KEY (org_id, memory_id),
    CONSTRAINT fk_embedding_state_org_id_memory_id_entities FOREIGN KEY (org_id, memory_id)
        REFERENCES entities (org_id, id) ON DELETE CASCADE
)""",
    f"""CREATE TABLE IF NOT EXISTS embeddings (
    org_id text COLLATE "C" NOT NULL,
    memory_id text COLLATE "C" NOT NULL,
    revision integer NOT NULL,
    doc_id text COLLATE "C" NOT NULL,
    chunk integer NOT NULL,
    embedding vector({DIMENSIONS}) NOT NULL,
    CONSTRAINT pk_embeddings PRIMARY KEY (org_id, memory_id, doc_id, chunk),
    CONSTRAINT fk_embeddings_org_id_memory_id_entities FOREIGN KEY (org_id, memory_id)
        REFERENCES entities (org_id, id) ON DELETE CASCADE
)""",
    """CREATE INDEX IF NOT EXISTS ix_embeddings_hnsw ON embeddings
    USING hnsw (embedding vector_cosine_ops)""",
)


def create_semantic_tables(conn: Connection) -> bool:
    """Create the extension and the tables where the server offers pgvector; return whether
    they exist afterwards. Idempotent."""
    row = conn.execute(AVAILABLE_SQL).one()
    if not row.available:
        return bool(row.tables)
    for statement in _CREATE:
        conn.execute(text(statement))
    return True


def drop_semantic_tables(conn: Connection) -> None:
    """Drop the tables (the extension stays: other databases' objects may use it)."""
    conn.execute(text("DROP TABLE IF EXISTS embeddings, embedding_state"))
