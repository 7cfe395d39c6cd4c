"""``sibyl:search.hits``: the rows of one page (a memory's fields, a passage's own text), as the
bound reader may read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.repo.readrule import readable

HITS_SQL = text(
    f"""/* sibyl:search.hits */
SELECT h.id, t.type AS memory_type, t.name, t.project_id, t.lifecycle, t.metadata,
       t.passage_kind, t.passage_total, t.passages_lossless,
       p.parent_id, p.passage_index, p.breadcrumb, p.start_offset,
       left(CASE WHEN p.id IS NULL THEN t.content ELSE p.content END, :preview_chars + 1)
           AS content_prefix,
       length(CASE WHEN p.id IS NULL THEN t.content ELSE p.content END) AS content_length
FROM unnest(CAST(:ids AS text[])) WITH ORDINALITY AS h(id, ord)
LEFT JOIN passages p ON p.org_id = :r_org AND p.id = h.id
JOIN entities t ON t.org_id = :r_org AND t.id = coalesce(p.parent_id, h.id)
WHERE {readable("t")}
  AND (p.id IS NULL OR p.parent_revision = t.revision)
ORDER BY h.ord"""
)


@dataclass(frozen=True)
class Hit:
    """The row of one hit: the memory's fields (a passage's parent's) and the hit's own text.

    ``content_prefix`` holds at most ``preview_chars + 1`` characters of the memory's body, or
    the passage's text; ``content_length`` is the full length.
    """

    id: str
    memory_type: str
    name: str
    project_id: str | None
    lifecycle: str
    metadata: dict[str, Any]
    passage_kind: str | None
    passage_total: int
    passages_lossless: bool
    parent_id: str | None
    passage_index: int | None
    breadcrumb: str | None
    content_prefix: str
    content_length: int
    start_offset: int | None = None
    """Where a passage's text begins in its parent's body (characters); None for a memory."""


async def hits(
    conn: AsyncConnection,
    *,
    reader_params: dict[str, object],
    ids: list[str],
    preview_chars: int,
) -> dict[str, Hit]:
    """The readable rows of ``ids`` (memories or current passages), by id."""
    if not ids:
        return {}
    rows = await conn.execute(
        HITS_SQL, {**reader_params, "ids": ids, "preview_chars": preview_chars}
    )
    return {
        r.id: Hit(
            id=r.id,
            memory_type=r.memory_type,
            name=r.name,
            project_id=r.project_id,
            lifecycle=r.lifecycle,
            metadata=dict(r.metadata),
            passage_kind=r.passage_kind,
            passage_total=r.passage_total,
            passages_lossless=r.passages_lossless,
            parent_id=r.parent_id,
            passage_index=r.passage_index,
            breadcrumb=r.breadcrumb,
            content_prefix=r.content_prefix,
            content_length=r.content_length,
            start_offset=r.start_offset,
        )
        for r in rows
    }
