"""The statements of ``fetch_slice`` (rule: slice-window): resolve the target, then read one window.

Both run in one repeatable-read transaction, so the parent and its spans come from one snapshot.
The parent is authorized (the read rule) before any span is read, even when a span is named.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

TARGET_SQL = text(
    f"""/* sibyl:fetch_slice.target */
SELECT t.id, t.name, t.type, t.project_id, t.revision, t.passage_kind, t.passage_total,
       t.passages_lossless, p.passage_index AS named_index,
       CASE WHEN t.passage_total = 0 THEN t.content END AS body
FROM (SELECT CAST(:entity_id AS text) AS asked) q
LEFT JOIN passages p ON p.org_id = :r_org AND p.id = q.asked
JOIN entities t ON t.org_id = :r_org AND t.id = coalesce(p.parent_id, q.asked)
WHERE {readable("t")}
  AND (CAST(:project AS text) IS NULL OR t.project_id = :project)
  AND (p.id IS NULL OR p.parent_revision = t.revision)"""
)

WINDOW_SQL = text(
    f"""/* sibyl:fetch_slice.window */
SELECT p.id, p.passage_index, p.breadcrumb,
       left(p.content, :budget + 1) AS content_prefix, length(p.content) AS content_length
FROM passages p
JOIN entities t ON t.org_id = p.org_id AND t.id = p.parent_id
WHERE p.org_id = :r_org AND p.parent_id = :parent_id AND p.parent_revision = :revision
  AND p.passage_index >= :start
  AND {readable("t")}
ORDER BY p.passage_index
LIMIT :window"""
)


@dataclass(frozen=True)
class SliceTarget:
    """The authorized parent memory of a slice request, and the span that was named (if any)."""

    id: str
    name: str
    type: str
    project_id: str | None
    revision: int
    passage_kind: str | None
    passage_total: int
    passages_lossless: bool
    named_index: int | None
    body: str | None


@dataclass(frozen=True)
class SpanRow:
    """One stored span of the window (content cut to at most budget + 1 characters)."""

    id: str
    passage_index: int
    breadcrumb: str | None
    content_prefix: str
    content_length: int


async def target(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    entity_id: str,
    project: str | None,
) -> SliceTarget | None:
    """The readable parent of ``entity_id`` (a memory or a current passage), or None (→ 404)."""
    row = (
        await conn.execute(
            TARGET_SQL,
            {**reader_params, "entity_id": entity_id, "project": project},
        )
    ).first()
    if row is None:
        return None
    return SliceTarget(**row._mapping)


async def window(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    parent_id: str,
    revision: int,
    start: int,
    size: int,
    budget: int,
) -> list[SpanRow]:
    """Up to ``size`` spans of ``parent_id`` at ``revision`` from index ``start``, in order."""
    rows = await conn.execute(
        WINDOW_SQL,
        {
            **reader_params,
            "parent_id": parent_id,
            "revision": revision,
            "start": start,
            "window": size,
            "budget": budget,
        },
    )
    return [SpanRow(**r._mapping) for r in rows]
