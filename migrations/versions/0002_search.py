"""search: stored full-text vectors on entities and passages, their GIN indexes, and the
name-prefix index of the exact lane (contract §8, issue 4)

- ``entities.search_tsv``: the memory's name (weight A) and its body (weight B). A body that a
  lossless set of spans carries (``passage_total > 0 AND passages_lossless``) is searched through
  its passages, so only its lead (the first 2000 characters, what an uncut prose memory holds at
  most) is indexed on the memory itself; any other body is indexed up to 100000 characters (well
  under the 1 MB limit of a ``tsvector``).
- ``passages.search_tsv``: the span's breadcrumb (weight A) and its text (weight B).
- Plain GIN indexes on the vectors: ``btree_gin`` (which would let the GIN index lead with
  ``org_id``) ships with the PostgreSQL 15 server but not with the embedded PostgreSQL 16
  (``pgserver``), so the org bound is a filter on the matched rows.
- ``entities.name_lower``: ``lower(name)`` stored with the ``"C"`` collation, and
  ``ix_entities_name_prefix`` on ``(org_id, name_lower, id)``: the exact lane's case-insensitive
  name-prefix range scan, in the (bytewise) order it ranks, stopping after its cap. A stored
  column rather than an expression index because reflection drops an expression's collation, so
  ``alembic check`` could never see the two agree.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENTITY_TSV = (
    "setweight(to_tsvector('english'::regconfig, name), 'A') || "
    "setweight(to_tsvector('english'::regconfig, CASE WHEN passage_total > 0 AND "
    "passages_lossless THEN left(content, 2000) ELSE left(content, 100000) END), 'B')"
)
PASSAGE_TSV = (
    "setweight(to_tsvector('english'::regconfig, coalesce(breadcrumb, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, left(content, 100000)), 'B')"
)


def upgrade() -> None:
    op.add_column(
        "entities",
        sa.Column(
            "search_tsv",
            postgresql.TSVECTOR(),
            sa.Computed(ENTITY_TSV, persisted=True),
            nullable=True,
        ),
    )
    op.add_column(
        "passages",
        sa.Column(
            "search_tsv",
            postgresql.TSVECTOR(),
            sa.Computed(PASSAGE_TSV, persisted=True),
            nullable=True,
        ),
    )
    op.add_column(
        "entities",
        sa.Column(
            "name_lower",
            sa.Text(collation="C"),
            sa.Computed("lower(name)", persisted=True),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_entities_search", "entities", ["search_tsv"], unique=False, postgresql_using="gin"
    )
    op.create_index(
        "ix_passages_search", "passages", ["search_tsv"], unique=False, postgresql_using="gin"
    )
    op.create_index(
        "ix_entities_name_prefix",
        "entities",
        ["org_id", "name_lower", "id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_entities_name_prefix", table_name="entities")
    op.drop_index("ix_passages_search", table_name="passages", postgresql_using="gin")
    op.drop_index("ix_entities_search", table_name="entities", postgresql_using="gin")
    op.drop_column("passages", "search_tsv")
    op.drop_column("entities", "name_lower")
    op.drop_column("entities", "search_tsv")
