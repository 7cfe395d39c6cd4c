"""term statistics: a refresh that does not hold writes back (issue 12, new-user trial)

``term_audiences.armed_by``: the token of the refresh that armed the audience, set in a short
transaction under the org's lock before it counts; a write that changes a counted row clears it
(and ``fresh``) as it retires the audience, and a later refresh's arming replaces it. The refresh
then counts without any lock and, in a last short transaction, stamps fresh only the audiences
still armed by its own token: none of them was written, nor re-armed, since its count began.

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
    op.add_column("term_audiences", sa.Column("armed_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("term_audiences", "armed_by")
