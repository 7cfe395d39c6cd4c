"""Chunks: the pieces of a search document that get one vector each (the semantic lane).

A sentence embedding model matches a question best against a piece about the length of a
sentence or a short paragraph, so every search document (a current passage, or a memory never
cut) is cut further, by these rules:

1. Blocks: the text's paragraphs (runs of lines between blank lines); a line that starts a list
   item (``-``, ``*``, ``+`` or ``1.``) or a heading (``#``) starts a block of its own, so each
   turn of a chat transcript or each bullet is one. The lines of a block are joined by spaces
   (hard-wrapped prose reads as one sentence run). Fenced code blocks are left out: their text
   is matched by the full-text lane.
2. A block longer than :data:`CHUNK_CHARS` is split at sentence ends (``.``, ``!``, ``?``
   followed by a space), then at spaces, into pieces of at most that many characters.
3. Consecutive blocks shorter than :data:`MIN_CHUNK_CHARS` are joined (a heading with the
   sentence under it) while the result stays within :data:`CHUNK_CHARS`.

A memory's name is a chunk of its own (the memory's document), so a question about what a memory
is called meets it. At most :data:`MAX_CHUNKS` chunks per document (the first ones).
"""

from __future__ import annotations

import re

CHUNK_CHARS = 400
MIN_CHUNK_CHARS = 80
MAX_CHUNKS = 48

_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)]|#{1,6})\s")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _blocks(text: str) -> list[str]:
    blocks: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            if current:
                blocks.append(current)
                current = []
            continue
        if fenced:
            continue
        if not line.strip():
            if current:
                blocks.append(current)
                current = []
            continue
        if _ITEM.match(line) and current:
            blocks.append(current)
            current = []
        current.append(line.strip())
    if current:
        blocks.append(current)
    return [" ".join(b) for b in blocks]


def _split(block: str) -> list[str]:
    if len(block) <= CHUNK_CHARS:
        return [block]
    out: list[str] = []
    piece = ""
    for sentence in _SENTENCE_END.split(block):
        words = [sentence] if len(sentence) <= CHUNK_CHARS else sentence.split(" ")
        for part in words:
            candidate = f"{piece} {part}".strip() if piece else part
            if len(candidate) <= CHUNK_CHARS:
                piece = candidate
            else:
                if piece:
                    out.append(piece)
                piece = part[:CHUNK_CHARS]
    if piece:
        out.append(piece)
    return out


def chunks(text: str) -> list[str]:
    """The chunks of ``text`` (see the module docstring), in order; none for a text without
    words."""
    pieces = [p for block in _blocks(text) for p in _split(block)]
    merged: list[str] = []
    for piece in pieces:
        if (
            merged
            and len(merged[-1]) < MIN_CHUNK_CHARS
            and len(merged[-1]) + 1 + len(piece) <= CHUNK_CHARS
        ):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return [m for m in merged if any(c.isalnum() for c in m)][:MAX_CHUNKS]
