"""search relevance: whole bodies indexed, short leads on cut memories, a title column for the
exact lane (contract §7, §8; issue 12)

- ``entities.search_tsv``: the name (weight A) and, for a memory whose body is carried by
  passages, only a short lead (its first 600 characters); any other body is indexed whole, with
  no length cut-off. So a long memory competes through its name, its lead and its passages,
  never through its whole body on one row. Since issue 12 every cut tiles the whole body
  (spans past the count cap are merged, not dropped); a cut made before it could have dropped
  text past its 64th span, so "carried by passages" is ``passage_total > 0 AND
  (passages_lossless OR passage_total < 64)``: such an older cut (64 spans, not lossless) keeps
  its whole body searchable on the memory's row until its next edit re-cuts it (an evidence cut
  of exactly 64 windows is indexed whole too: never lossless, it cannot tell).
- ``passages.search_tsv``: the breadcrumb (weight A) and the whole span (weight B), no cut-off.
- ``entities.head_tsv`` (the name) and ``passages.head_tsv`` (the breadcrumb), with GIN indexes
  ``ix_entities_head`` and ``ix_passages_head``: the full-text lane scans a word's matches in
  these heads first, so when a common word's matches are capped, the candidates kept are those
  holding it in a name or heading (the strongest evidence), not the first rows met.
- ``entities.title_lower``: the name's title after a conventional prefix such as ``PEP 8: `` or
  ``KEP-753: `` (letters, optional space or hyphen, a number, a separator ``:`` ``.`` or a dash,
  then spaces), lower-cased, ``"C"`` collation; null when the name has no such prefix. Indexed
  by ``ix_entities_title_prefix`` on ``(org_id, title_lower, id)`` for the exact lane's range
  scan, like ``ix_entities_name_prefix``.

PostgreSQL 15 and 16 cannot change a generated column's expression in place, so both vectors
are dropped and added again (their GIN indexes with them), which recomputes every row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENTITY_TSV = (
    "setweight(to_tsvector('english'::regconfig, name), 'A') || "
    "setweight(to_tsvector('english'::regconfig, CASE WHEN passage_total > 0 AND "
    "(passages_lossless OR passage_total < 64) THEN left(content, 600) ELSE content END), 'B')"
)
PASSAGE_TSV = (
    "setweight(to_tsvector('english'::regconfig, coalesce(breadcrumb, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, content), 'B')"
)
ENTITY_HEAD = "to_tsvector('english'::regconfig, name)"
PASSAGE_HEAD = "to_tsvector('english'::regconfig, coalesce(breadcrumb, ''))"
TITLE_PREFIX = "^[[:alpha:]]{2,12}[ -]?[0-9]+[[:alnum:]]*[[:space:]]*[-:.–—][[:space:]]+"
TITLE_LOWER = (
    f"CASE WHEN name ~ '{TITLE_PREFIX}' THEN lower(regexp_replace(name, '{TITLE_PREFIX}', '')) END"
)

# migration 0002's expressions, for the downgrade
OLD_ENTITY_TSV = (
    "setweight(to_tsvector('english'::regconfig, name), 'A') || "
    "setweight(to_tsvector('english'::regconfig, CASE WHEN passage_total > 0 AND "
    "passages_lossless THEN left(content, 2000) ELSE left(content, 100000) END), 'B')"
)
OLD_PASSAGE_TSV = (
    "setweight(to_tsvector('english'::regconfig, coalesce(breadcrumb, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, left(content, 100000)), 'B')"
)


def _vectors(entity_tsv: str, passage_tsv: str) -> None:
    op.drop_index("ix_passages_search", table_name="passages", postgresql_using="gin")
    op.drop_index("ix_entities_search", table_name="entities", postgresql_using="gin")
    op.drop_column("passages", "search_tsv")
    op.drop_column("entities", "search_tsv")
    for table, expression in (("entities", entity_tsv), ("passages", passage_tsv)):
        op.add_column(
            table,
            sa.Column(
                "search_tsv",
                postgresql.TSVECTOR(),
                sa.Computed(expression, persisted=True),
                nullable=True,
            ),
        )
    op.create_index(
        "ix_entities_search", "entities", ["search_tsv"], unique=False, postgresql_using="gin"
    )
    op.create_index(
        "ix_passages_search", "passages", ["search_tsv"], unique=False, postgresql_using="gin"
    )


def upgrade() -> None:
    _vectors(ENTITY_TSV, PASSAGE_TSV)
    for table, expression in (("entities", ENTITY_HEAD), ("passages", PASSAGE_HEAD)):
        op.add_column(
            table,
            sa.Column(
                "head_tsv",
                postgresql.TSVECTOR(),
                sa.Computed(expression, persisted=True),
                nullable=True,
            ),
        )
        op.create_index(
            f"ix_{table}_head", table, ["head_tsv"], unique=False, postgresql_using="gin"
        )
    op.add_column(
        "entities",
        sa.Column(
            "title_lower",
            sa.Text(collation="C"),
            sa.Computed(TITLE_LOWER, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_entities_title_prefix", "entities", ["org_id", "title_lower", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_entities_title_prefix", table_name="entities")
    op.drop_column("entities", "title_lower")
    for table in ("entities", "passages"):
        op.drop_index(f"ix_{table}_head", table_name=table, postgresql_using="gin")
        op.drop_column(table, "head_tsv")
    _vectors(OLD_ENTITY_TSV, OLD_PASSAGE_TSV)
