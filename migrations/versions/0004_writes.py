"""writes: pending links (contract §9 revised, issue 13)

- ``pending_links (org_id, src_id, dst_id)``: a ``[[dst]]`` link of ``src``'s content whose
  target does not exist yet. Its key serves "the pending links of a source" (re-derivation on a
  body edit); ``ix_pending_links_target`` serves "the pending links to a new memory" (resolved
  into mentions when it is created). Deleting the source deletes its pending links.

Revision ID: 0004
Revises: 0002 (re-chained after 0003 by the integrator)
Create Date: 2026-11-30 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.Text(collation="C")


def upgrade() -> None:
    op.create_table(
        "pending_links",
        sa.Column("org_id", Id, nullable=False),
        sa.Column("src_id", Id, nullable=False),
        sa.Column("dst_id", Id, nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id", "src_id"],
            ["entities.org_id", "entities.id"],
            name="fk_pending_links_org_id_src_id_entities",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "src_id", "dst_id", name="pk_pending_links"),
    )
    op.create_index(
        "ix_pending_links_target", "pending_links", ["org_id", "dst_id", "src_id"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ix_pending_links_target", table_name="pending_links")
    op.drop_table("pending_links")
