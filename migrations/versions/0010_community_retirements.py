"""community retirements: which orgs' communities a write made stale, for the automatic rebuild

``community_retirements (org_id, seq)``: one row per write that retired (or may have changed)
an org's communities, inserted in the write's transaction under the org's community lock in
shared mode (``sibyl:communities.mark``). A rebuild replaces an org's communities only when no
row appeared while it read and detected, and then deletes the rows it saw; a serving process
rebuilds the orgs that hold rows (``app/domain/community_refresher.py``; new-user trial
2026-12-01: one write removed the ``SHARES_COMMUNITY`` neighbours of every reader until an
operator ran ``sibyl-pg communities rebuild``). Keyed by org first (Citus: one shard).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.Text(collation="C")


def upgrade() -> None:
    op.create_table(
        "community_retirements",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column(
            "retired_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name="fk_community_retirements_org_id_orgs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("org_id", "seq", name="pk_community_retirements"),
    )


def downgrade() -> None:
    op.drop_table("community_retirements")
