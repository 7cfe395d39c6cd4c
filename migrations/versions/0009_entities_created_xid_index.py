"""entities by creating transaction: the automatic statistics refresh's index (issue 12)

``ix_entities_created_xid (org_id, created_xid)``: the refresher (app/domain/refresher.py) asks
once a minute whether an org holds a memory created since its search statistics were counted
(``sibyl:term_stats.due_orgs``); with this index that reads only the memories created since the
count's snapshot began (``created_xid >= pg_snapshot_xmin(counted_snapshot)``), not every
memory of the database (146 ms a look at the 200k benchmark without it). A plain
``CREATE INDEX``: writes to ``entities`` wait while it is built (about a second per million
memories here).

Also marks not fresh every audience counted without a snapshot (stamped before 0008, or holding
a restored dump's ids): the refresher cannot tell which of their memories were created since
(an adversarial review), so each is recounted once; a recount stamps the snapshot again where
it can.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 00:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_entities_created_xid", "entities", ["org_id", "created_xid"])
    op.execute("UPDATE term_audiences SET fresh = false WHERE counted_snapshot IS NULL")


def downgrade() -> None:
    op.drop_index("ix_entities_created_xid", table_name="entities")
