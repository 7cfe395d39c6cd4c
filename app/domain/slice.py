"""``fetch_slice``: widen one memory into the window of spans it was cut into (rule: slice-window).

Rules: the parent is authorized before any span is served (even a named span); absent, denied,
outside ``project``, and a passage id of an older revision are one and the same 404. The window
starts at the first span for a memory, and centres on a named span at position p:
start = p − (window−1)//2, clamped to [0, max(n − window, 0)]. The character budget is one for
the whole window, spent in order; a span that straddles it is cut like a preview (at whitespace,
``...``), and later spans come back empty with ``truncated: true``. ``covers_parent`` is true only
when the returned spans are the full current set of a lossless prose (or declared) cut and none
was truncated; evidence spans never claim it. A memory never cut comes back whole as one
pseudo-passage (``sliced: false``); it covers its parent unless the budget cut it (a conservative
reading, rule: covers-parent-honest).
"""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import policy
from app.core.errors import NotFound
from app.core.reader import Reader
from app.domain.passages import passage_name
from app.domain.preview import preview_prefix
from app.domain.schemas import SlicePassage, SliceRequest, SliceResponse
from app.domain.validation import normalize_project, require_id
from app.repo import slice as slice_repo

_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_TRAILING = re.compile(r"[ \t]+\n")


def compact(body: str) -> str:
    """A body with trailing spaces removed and runs of blank lines folded to one blank line."""
    return _BLANK_RUNS.sub("\n\n", _TRAILING.sub("\n", body)).strip()


def window_start(named_index: int | None, total: int, window: int) -> int:
    """First span index of the window (rule: slice-window)."""
    if named_index is None:
        return 0
    start = named_index - (window - 1) // 2
    return max(0, min(start, max(total - window, 0)))


def _spend(text: str, full_length: int, remaining: int) -> tuple[str, bool, int]:
    """Cut one span's text to the remaining budget; return (text, truncated, new remaining)."""
    if full_length <= remaining:
        return text, False, remaining - full_length
    if remaining <= 3:
        return "", True, 0
    cut, _ = preview_prefix(text, full_length, remaining - 3)
    return cut, True, 0


async def fetch_slice(
    conn: AsyncConnection, reader: Reader, request: SliceRequest
) -> SliceResponse:
    """Return the window of spans around ``request.entity_id`` as ``reader`` may see it.

    Bounds are clamped (window 1..64, default 3; content_max_chars 0..50000, default 18000) and
    the applied window is echoed. Raises ``BadRequest`` (400) for a blank ``entity_id`` or a bad
    ``project`` name, ``NotFound`` (404, "Entity not found") for anything the reader cannot read.
    """
    entity_id = require_id(request.entity_id, field="entity_id")
    project = normalize_project(request.project)
    size = policy.WINDOW.clamp(request.window)
    budget = policy.SLICE_CHARS.clamp(request.content_max_chars)

    parent = await slice_repo.target(
        conn, reader_params=reader.params(), entity_id=entity_id, project=project
    )
    if parent is None:
        raise NotFound()

    if parent.passage_total == 0:
        body = compact(parent.body or "")
        content, truncated, _ = _spend(body[: budget + 1], len(body), budget)
        return SliceResponse(
            entity_id=entity_id,
            parent_id=parent.id,
            parent_name=parent.name,
            parent_type=parent.type,
            passages=[
                SlicePassage(
                    id=parent.id,
                    name=parent.name,
                    content=content,
                    passage_index=None,
                    passage_total=None,
                    breadcrumb=None,
                    truncated=truncated,
                )
            ],
            window=size,
            content_max_chars=budget,
            sliced=False,
            total=1,
            window_start=None,
            passage_total=None,
            covers_parent=not truncated,
            project_id=parent.project_id,
            content_chars=len(content),
        )

    start = window_start(parent.named_index, parent.passage_total, size)
    spans = await slice_repo.window(
        conn,
        reader_params=reader.params(),
        parent_id=parent.id,
        revision=parent.revision,
        start=start,
        size=size,
        budget=budget,
    )
    remaining = budget
    passages: list[SlicePassage] = []
    any_truncated = False
    for span in spans:
        content, truncated, remaining = _spend(span.content_prefix, span.content_length, remaining)
        any_truncated = any_truncated or truncated
        passages.append(
            SlicePassage(
                id=span.id,
                name=passage_name(
                    parent.name, span.passage_index, parent.passage_total, span.breadcrumb
                ),
                content=content,
                passage_index=span.passage_index,
                passage_total=parent.passage_total,
                breadcrumb=span.breadcrumb,
                truncated=truncated,
            )
        )
    covers = (
        parent.passage_kind in ("prose", "declared")
        and parent.passages_lossless
        and start == 0
        and len(passages) == parent.passage_total
        and not any_truncated
    )
    return SliceResponse(
        entity_id=entity_id,
        parent_id=parent.id,
        parent_name=parent.name,
        parent_type=parent.type,
        passages=passages,
        window=size,
        content_max_chars=budget,
        sliced=True,
        total=len(passages),
        window_start=start,
        passage_total=parent.passage_total,
        covers_parent=covers,
        project_id=parent.project_id,
        content_chars=sum(len(p.content) for p in passages),
    )
