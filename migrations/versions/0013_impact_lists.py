"""impact lists: one row per list, its entries as arrays in list order

``term_impacts`` held one row per entry (up to 200 per lexeme and audience): a refresh of the
PEP corpus wrote 254,598 rows, each checked against its foreign key and its primary key, and
ranked every contribution of the org in one sort. ``term_impact_lists`` holds one row per list
(the document ids, their memories, the memories' types and the contributions, in step, best
first): the same lists in about 3,500 rows, each ordered within its own group.

The lists are derived data: the upgrade drops the old table and points every audience at no
generation, so the full-text lane scans until the next refresh writes the new lists (the
statistics refresher does within a minute in a running service; ``sibyl-pg stats refresh`` at
once). The downgrade does the same the other way.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.Text(collation="C")


def _audiences_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["org_id", "audience"],
        ["term_audiences.org_id", "term_audiences.audience"],
        name=f"fk_{table}_org_id_audience_term_audiences",
        ondelete="CASCADE",
    )


def upgrade() -> None:
    op.execute("UPDATE term_audiences SET impacts_generation = NULL")
    op.drop_table("term_impacts")
    op.create_table(
        "term_impact_lists",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("lexeme", Id, nullable=False),
        sa.Column("audience", Id, nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("doc_ids", ARRAY(Id), nullable=False),
        sa.Column("memory_ids", ARRAY(Id), nullable=False),
        sa.Column("memory_types", ARRAY(Id), nullable=False),
        sa.Column("impacts", ARRAY(sa.Float()), nullable=False),
        _audiences_fk("term_impact_lists"),
        sa.PrimaryKeyConstraint(
            "org_id", "lexeme", "audience", "generation", name="pk_term_impact_lists"
        ),
    )


def downgrade() -> None:
    op.execute("UPDATE term_audiences SET impacts_generation = NULL")
    op.drop_table("term_impact_lists")
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
        _audiences_fk("term_impacts"),
        sa.PrimaryKeyConstraint(
            "org_id", "lexeme", "audience", "generation", "rank", name="pk_term_impacts"
        ),
    )
