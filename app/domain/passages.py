"""Passage naming and ids, shared by the cutter's writer and every read path (contract §6)."""

from __future__ import annotations

import hashlib


def passage_id(org_id: str, parent_id: str, revision: int, index: int) -> str:
    """The id of span ``index`` of ``parent_id`` at ``revision``: minted per (parent, revision,
    index), so an edit re-mints every id and an old id is a 404, never different text.

    Shape: ``passage_`` + 16 hex digits of SHA-256 (64 bits; collisions are negligible).
    """
    digest = hashlib.sha256(
        f"{org_id}\x1f{parent_id}\x1f{revision}\x1f{index}".encode()
    ).hexdigest()
    return "passage_" + digest[:16]


def passage_name(parent_name: str, index: int, total: int | None, breadcrumb: str | None) -> str:
    """Display name of a span: ``<parent name> > <breadcrumb> [i/n]`` (no breadcrumb: no ``>``)."""
    position = f"[{index + 1}/{total}]" if total else f"[{index + 1}]"
    return f"{parent_name} > {breadcrumb} {position}" if breadcrumb else f"{parent_name} {position}"
