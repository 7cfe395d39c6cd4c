"""term statistics: which memories a count could see, by transaction ids (issue 12)

Replaces 0007's ``term_audiences.counted_at`` (a clock time; an adversarial review showed that a
clock stepping back, or a loader writing ``created_at``, could keep a deleted, counted memory in
fresh counts) with ``term_audiences.counted_snapshot`` (``pg_snapshot``: the snapshot of the
repeatable-read counting transaction) and ``entities.created_xid`` (``xid8``, default
``pg_current_xact_id()``: the transaction that created the memory). A memory whose creating
transaction that snapshot does not see (``pg_visible_in_snapshot``) is in none of the counts,
so editing or deleting it need not retire the audience. NULL on either side (an audience not
stamped since, a memory created before this migration): every such write retires the audience.

The default is set after the column is added, so existing rows keep NULL and the table is not
rewritten (both statements take the table's lock only briefly).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 23:40:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE term_audiences DROP COLUMN counted_at")
    op.execute("ALTER TABLE term_audiences ADD COLUMN counted_snapshot pg_snapshot")
    op.execute("ALTER TABLE entities ADD COLUMN created_xid xid8")
    op.execute("ALTER TABLE entities ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id()")


def downgrade() -> None:
    op.execute("ALTER TABLE entities DROP COLUMN created_xid")
    op.execute("ALTER TABLE term_audiences DROP COLUMN counted_snapshot")
    op.execute("ALTER TABLE term_audiences ADD COLUMN counted_at timestamptz")
