"""impact lists: a composite type for one entry, so a list is ranked with one sort

The count of the impact lists ordered each group's contributions four times (one ordered
``array_agg`` per array: document ids, memory ids, types, contributions). With the entry as one
composite value the group is sorted once and its arrays are read out of the ranked entries
(``sibyl:term_stats.count_impacts``): the same lists, about a third less time on the PEP org.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 02:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        'CREATE TYPE term_impact_entry AS (doc_id text COLLATE "C", memory_id text COLLATE "C",'
        " memory_type text, impact float8)"
    )


def downgrade() -> None:
    op.execute("DROP TYPE term_impact_entry")
