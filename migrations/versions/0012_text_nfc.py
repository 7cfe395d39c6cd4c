"""text in NFC: names and bodies re-normalised, passages re-cut by the current cutter

Every write now stores a memory's name, body and span labels in Unicode NFC (search compares
text in NFC: a body stored decomposed was found by no spelling of its words), and the prose
cutter splits a paragraph over the span bound at sentences, lines and words, with no count cap.
This migration brings stored rows to the same state a write gives today:

- names and bodies not in NFC are normalised (PostgreSQL's ``normalize``, on a UTF-8 server);
- the passages of a memory are re-cut when its body changed (declared spans and evidence
  windows keep their boundaries, moved onto the normalised text; labels normalised) or when
  the prose cutter now cuts its body otherwise. The revision stays: a passage whose index and
  text are unchanged keeps its id (ids are minted from parent, revision, index and text);
- the search statistics of every audience holding a changed memory are marked not fresh.

The downgrade keeps the data as it is (normalisation cannot be undone, and the old cut is the
same text in other pieces).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 18:00:00
"""

import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.domain import spans
from app.domain.passages import passage_id

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEVER_CUT = sorted(spans.NEVER_CUT_TYPES)


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


def upgrade() -> None:
    conn = op.get_bind()
    changed: set[tuple[str, str]] = set()
    if conn.execute(sa.text("SELECT current_setting('server_encoding') = 'UTF8'")).scalar():
        rows = conn.execute(
            sa.text(
                "UPDATE entities SET name = normalize(name, NFC), content = normalize(content, NFC)"
                " WHERE NOT (name IS NFC NORMALIZED AND content IS NFC NORMALIZED)"
                " RETURNING org_id, id"
            )
        )
        changed = {(r.org_id, r.id) for r in rows}
        conn.execute(
            sa.text(
                "UPDATE passages SET breadcrumb = normalize(breadcrumb, NFC)"
                " WHERE breadcrumb IS NOT NULL AND NOT breadcrumb IS NFC NORMALIZED"
            )
        )
    # the memories whose passages may differ: cut ones, and prose bodies over the threshold
    candidates = conn.execute(
        sa.text(
            "SELECT org_id, id, type, content, revision, passage_kind, scope, project_id"
            " FROM entities"
            " WHERE passage_total > 0"
            "    OR (char_length(content) > :min_body AND NOT type = ANY(:never))"
        ),
        {"min_body": spans.PROSE_MIN_BODY, "never": NEVER_CUT},
    ).all()
    stale: set[tuple[str, str]] = set()
    for e in candidates:
        key = (e.org_id, e.id)
        stored = conn.execute(
            sa.text(
                "SELECT start_offset, end_offset, breadcrumb, content FROM passages"
                " WHERE org_id = :o AND parent_id = :p AND parent_revision = :r"
                " ORDER BY passage_index"
            ),
            {"o": e.org_id, "p": e.id, "r": e.revision},
        ).all()
        if e.passage_kind in ("declared", "evidence"):
            if key not in changed or not stored:
                continue
            # the spans keep their text, normalised one by one: each stored passage holds
            # the text it had before the body was normalised
            cut: list[spans.Span] = []
            offset = 0
            for row in stored:
                size = len(_nfc(row.content))
                label = _nfc(row.breadcrumb) if row.breadcrumb is not None else None
                cut.append(spans.Span(offset, offset + size, label))
                offset += size
            kind, lossless = e.passage_kind, e.passage_kind == "declared"
        else:
            projection = spans.project(e.type, e.content)
            if projection is None:
                cut, kind, lossless = [], None, False
            else:
                cut, kind, lossless = list(projection.spans), projection.kind, projection.lossless
            if key not in changed and [(s.start, s.end, s.breadcrumb) for s in cut] == [
                (r.start_offset, r.end_offset, r.breadcrumb) for r in stored
            ]:
                continue
        conn.execute(
            sa.text("DELETE FROM passages WHERE org_id = :o AND parent_id = :p"),
            {"o": e.org_id, "p": e.id},
        )
        if cut:
            conn.execute(
                sa.text(
                    "INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index,"
                    " start_offset, end_offset, breadcrumb, content)"
                    " VALUES (:o, :id, :p, :r, :i, :s, :e, :b, :c)"
                ),
                [
                    {
                        "o": e.org_id,
                        "id": passage_id(e.id, e.revision, i, e.content[s.start : s.end]),
                        "p": e.id,
                        "r": e.revision,
                        "i": i,
                        "s": s.start,
                        "e": s.end,
                        "b": s.breadcrumb,
                        "c": e.content[s.start : s.end],
                    }
                    for i, s in enumerate(cut)
                ],
            )
        conn.execute(
            sa.text(
                "UPDATE entities SET passage_kind = :k, passage_total = :n,"
                " passages_lossless = :l WHERE org_id = :o AND id = :p"
            ),
            {"k": kind, "n": len(cut), "l": lossless, "o": e.org_id, "p": e.id},
        )
        stale.add(key)
    audiences: dict[str, set[str]] = {}
    for org_id, entity_id in changed | stale:
        row = conn.execute(
            sa.text("SELECT scope, project_id FROM entities WHERE org_id = :o AND id = :i"),
            {"o": org_id, "i": entity_id},
        ).one()
        if row.scope == "org":
            audiences.setdefault(org_id, set()).add("*")
        elif row.scope == "project" and row.project_id is not None:
            audiences.setdefault(org_id, set()).add(row.project_id)
    for org_id, names in sorted(audiences.items()):
        conn.execute(
            sa.text(
                "UPDATE term_audiences SET fresh = false, armed_by = NULL"
                " WHERE org_id = :o AND audience = ANY(:a)"
            ),
            {"o": org_id, "a": sorted(names)},
        )


def downgrade() -> None:
    pass  # the normalised text and the new cut stay: both are what a write stores
