"""search pipeline: per-word impact lists, and vectors for the semantic lane where pgvector exists

- ``term_impacts (org_id, lexeme, audience, generation, rank)``: for every lexeme that more than
  the list length of the org's counted documents hold, each audience's documents holding it
  with the highest BM25 term contribution, best first (``rank`` 1..n), written by the statistics
  refresh under a new ``generation``; ``term_audiences.impacts_generation`` names the current
  one (a refresh writes the new lists first, then points the audience at them in its stamp, then
  deletes the old ones). The full-text lane reads a common word's candidates from these lists
  instead of sampling its matches.
- Where the server has the ``vector`` extension (pgvector): ``embeddings`` (one vector per chunk
  of a memory's searchable text, at the memory's revision) with an HNSW index, and
  ``embedding_state`` (which revision of each memory was embedded, with how many chunks). Not
  created where the extension is missing: the semantic lane is then off and search says so.
  ``sibyl-pg semantic setup`` creates them later, once the extension is installed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.repo.semantic_schema import create_semantic_tables, drop_semantic_tables

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.Text(collation="C")


def upgrade() -> None:
    op.execute("CREATE SEQUENCE term_impacts_generation")
    op.add_column("term_audiences", sa.Column("impacts_generation", sa.BigInteger(), nullable=True))
    op.create_table(
        "term_impacts",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("lexeme", Id, nullable=False),
        sa.Column("audience", Id, nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("doc_id", Id, nullable=False),
        sa.Column("memory_id", Id, nullable=False),
        sa.Column("memory_type", Id, nullable=False),
        sa.Column("impact", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id", "audience"],
            ["term_audiences.org_id", "term_audiences.audience"],
            name="fk_term_impacts_org_id_audience_term_audiences",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "org_id", "lexeme", "audience", "generation", "rank", name="pk_term_impacts"
        ),
    )
    # the full-text lane's private arm: a reader's own private memories, and its grants
    op.create_index(
        "ix_entities_owner_private",
        "entities",
        ["org_id", "owner_id", "id"],
        postgresql_where=sa.text("scope = 'private'"),
    )
    op.create_index("ix_entity_grants_user", "entity_grants", ["org_id", "user_id", "entity_id"])
    create_semantic_tables(op.get_bind())


def downgrade() -> None:
    drop_semantic_tables(op.get_bind())
    op.drop_index("ix_entity_grants_user", table_name="entity_grants")
    op.drop_index("ix_entities_owner_private", table_name="entities")
    op.drop_table("term_impacts")
    op.drop_column("term_audiences", "impacts_generation")
    op.execute("DROP SEQUENCE term_impacts_generation")
