"""term statistics: a refresh that does not hold writes back (issue 12, new-user trial)

``term_audiences.armed``: set by a refresh, in a short transaction under the org's lock, before
it counts; a write that changes a counted row clears it (and ``fresh``) as it retires the
audience. The refresh then counts without any lock and, in a last short transaction, stamps
fresh only the audiences still armed: none of them was written since its count began.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 21:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "term_audiences",
        sa.Column("armed", sa.Boolean(), server_default="false", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("term_audiences", "armed")
