"""The evaluation's cache of vectors: the same corpora are embedded run after run, and the model
is deterministic, so each (model, text) vector is kept in a SQLite file (not the service's
database: a file of the evaluation's own)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence

from app.core.embedder import Embedder


class CachedEmbedder:
    """An embedder whose vectors are kept in a SQLite file by (model, text) digest: the
    evaluation embeds the same corpora run after run, and the model is deterministic."""

    def __init__(self, base: Embedder, path: os.PathLike[str] | str) -> None:
        import sqlite3

        self.base = base
        self.name = base.name
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS v (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
        self._lock = threading.Lock()

    def _key(self, text: str) -> bytes:
        return hashlib.blake2b(f"{self.name}\0{text}".encode(), digest_size=16).digest()

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """The cached vectors of ``texts``; the others from the model, then cached."""
        import array

        keys = [self._key(t) for t in texts]
        with self._lock:
            found: dict[bytes, list[float]] = {}
            for k in set(keys):
                row = self._db.execute("SELECT v FROM v WHERE k = ?", (k,)).fetchone()
                if row is not None:
                    found[k] = array.array("f", row[0]).tolist()
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            fresh = self.base.encode([texts[i] for i in missing])
            with self._lock:
                for i, v in zip(missing, fresh, strict=True):
                    found[keys[i]] = v
                    self._db.execute(
                        "INSERT OR REPLACE INTO v VALUES (?, ?)",
                        (keys[i], array.array("f", v).tobytes()),
                    )
                self._db.commit()
        return [found[k] for k in keys]
