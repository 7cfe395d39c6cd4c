"""Passage naming and ids, shared by the cutter's writer and every read path (rule:
stale-passage-is-404)."""

from __future__ import annotations

import hashlib


def passage_id(parent_id: str, revision: int, index: int, text: str) -> str:
    """The id of span ``index`` of ``parent_id`` at ``revision`` holding ``text``.

    Minted per (parent, revision, index) and the span's text, so an edit re-mints every id, an
    old id is a 404 rather than silently different text, and a memory deleted and re-created
    with other text never revives an old id. Shape: ``passage_`` + 16 hex digits of SHA-256.
    Ids are unique per org (the key is (org_id, id)), so the org takes no part in the hash.
    """
    digest = hashlib.sha256(f"{parent_id}\x1f{revision}\x1f{index}\x1f{text}".encode()).hexdigest()
    return "passage_" + digest[:16]


def passage_name(parent_name: str, index: int, total: int | None, breadcrumb: str | None) -> str:
    """Display name of a span: ``<parent name> > <breadcrumb> [i/n]`` (no breadcrumb: no ``>``)."""
    position = f"[{index + 1}/{total}]" if total else f"[{index + 1}]"
    return f"{parent_name} > {breadcrumb} {position}" if breadcrumb else f"{parent_name} {position}"
