"""term statistics: when each audience's count was taken (issue 12, new-user trial)

``term_audiences.counted_at``: a time at or after the snapshot the audience's stamped counts were
taken from (``clock_timestamp()`` read inside the counting transaction, after its first query).
A memory created after it (``entities.created_at`` is its transaction's start) is in none of the
counts, so editing or deleting it need not retire the audience; NULL (never stamped, or counted
before this column): every such write retires it, as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "term_audiences", sa.Column("counted_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("term_audiences", "counted_at")
