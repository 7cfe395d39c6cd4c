"""term statistics: which memories each audience's count could see (issue 12, new-user trial)

``term_audiences.counted_snapshot`` (``pg_snapshot``): the snapshot the audience's stamped counts
were taken in (``pg_current_snapshot()`` inside the repeatable-read counting transaction);
``entities.created_xid`` (``xid8``, default ``pg_current_xact_id()``): the transaction that
created the memory. A memory whose creating transaction that snapshot does not see
(``pg_visible_in_snapshot``) is in none of the counts, so editing or deleting it need not retire
the audience. No clock is read: a wall clock that steps back (an NTP step, a restored VM), or a
loader writing ``created_at`` itself, cannot make a counted memory look new (an adversarial
review of a first, clock-based version). NULL on either side (an audience never stamped since,
a memory created before this migration): every such write retires the audience, as before.

The default is set after the column is added, so existing rows keep NULL and the table is not
rewritten.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 23:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE term_audiences ADD COLUMN counted_snapshot pg_snapshot")
    op.execute("ALTER TABLE entities ADD COLUMN created_xid xid8")
    op.execute("ALTER TABLE entities ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id()")


def downgrade() -> None:
    op.execute("ALTER TABLE entities DROP COLUMN created_xid")
    op.execute("ALTER TABLE term_audiences DROP COLUMN counted_snapshot")
