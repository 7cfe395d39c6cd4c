"""term statistics by audience (issue 12): the full-text lane's word weights

- ``term_audiences (org_id, audience)``: per audience (a project id: its project-scoped
  memories; ``*``: the org-scoped ones) the number of search documents (memories and current
  passages), the sum of their lengths, and whether the counts are still ``fresh``;
- ``term_stats (org_id, lexeme, audience)``: how many of the audience's documents hold the
  lexeme. Keyed lexeme before audience: a query word's lookup is one index range.

Private memories are never counted. ``sibyl-pg stats refresh`` (and the import, and ``sibyl-pg
communities rebuild``) recount an org; a write that changes or removes a counted row marks its
audience not fresh in the same transaction.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 20:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.Text(collation="C")


def upgrade() -> None:
    op.create_table(
        "term_audiences",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("audience", Id, nullable=False),
        sa.Column("documents", sa.BigInteger(), nullable=False),
        sa.Column("lengths", sa.BigInteger(), nullable=False),
        sa.Column("fresh", sa.Boolean(), server_default="true", nullable=False),
        sa.Column(
            "refreshed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name="fk_term_audiences_org_id_orgs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("org_id", "audience", name="pk_term_audiences"),
    )
    op.create_table(
        "term_stats",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("lexeme", Id, nullable=False),
        sa.Column("audience", Id, nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id", "audience"],
            ["term_audiences.org_id", "term_audiences.audience"],
            name="fk_term_stats_org_id_audience_term_audiences",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "lexeme", "audience", name="pk_term_stats"),
    )


def downgrade() -> None:
    op.drop_table("term_stats")
    op.drop_table("term_audiences")
