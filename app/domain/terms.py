"""The full-text lane's query words and their weights (contract §2, §8; issue 12).

**Why fixed language statistics.** BM25 weighs a word by its rarity (inverse document frequency).
Counting documents in the service's own tables would let rows a reader cannot read change that
reader's ranks, scores and order (contract §2: absent ≡ denied holds for ranking too), and
per-audience counts would need a refresh job and could still go stale under a scope change. So
rarity comes from a fixed, maintained table of English word frequencies, the ``wordfreq``
package (its data ships inside the wheel; nothing is downloaded at run time): no row of any org
enters a weight, so two readers who see the same rows see the same ranks, whatever else is
stored. The cost: words common in one corpus but not in English (``python`` in the PEPs) weigh
more than a corpus count would give them (docs/search.md measures it).

**Weight of a word.** ``f`` = the word's frequency in English text (``wordfreq.word_frequency``,
at least :data:`MIN_FREQUENCY`; unknown words, such as identifiers, get that floor);
``p = min(1, f × WORDS_PER_DOCUMENT)`` approximates the share of documents of
:data:`WORDS_PER_DOCUMENT` words holding it, and the weight is the BM25 IDF
``ln(1 + (1 − p) / (p + MIN_FREQUENCY × WORDS_PER_DOCUMENT))``: 0 for a word in every document
(``the``), about 15 for an unknown word, about 7 for ``python``, 4 for ``table``.

**Words.** ``wordfreq.tokenize(text, "en")``: lower-cased words, punctuation dropped
(``pyproject.toml`` stays one word, ``build-related`` gives ``build`` and ``related``). Each word
once; those weighing under :data:`MIN_WEIGHT` are dropped (unless nothing else is left), and of
the rest the :data:`MAX_WORDS` rarest are kept, rarest first (ties: query order). The database
stems each word with the ``english`` configuration and drops its stop words.
"""

from __future__ import annotations

import math

import wordfreq

__all__ = ["MAX_WORDS", "MIN_FREQUENCY", "MIN_WEIGHT", "WORDS_PER_DOCUMENT", "weight", "words"]

MAX_WORDS = 12
"""At most this many words of a query reach the full-text lane (the rarest)."""
WORDS_PER_DOCUMENT = 150
"""The length, in words, of the document the IDF estimate assumes (a passage of ~1000 chars)."""
MIN_FREQUENCY = 1e-9
"""The frequency given to words the table does not know (rarer than any it lists)."""
MIN_WEIGHT = 0.05
"""Words weighing less (the commonest English words) are dropped when others are left."""


def weight(word: str) -> float:
    """The IDF weight of one lower-cased word (see the module docstring), ≥ 0."""
    f = max(wordfreq.word_frequency(word, "en"), MIN_FREQUENCY)
    p = min(1.0, f * WORDS_PER_DOCUMENT)
    return math.log(1.0 + (1.0 - p) / (p + MIN_FREQUENCY * WORDS_PER_DOCUMENT))


def words(text: str) -> list[tuple[str, float]]:
    """The query's words with their weights, rarest first: at most :data:`MAX_WORDS`, each once;
    an empty list when ``text`` holds no word."""
    seen: dict[str, float] = {}
    for token in wordfreq.tokenize(text, "en"):
        if token not in seen:
            seen[token] = weight(token)
    order = {w: i for i, w in enumerate(seen)}
    ranked = sorted(seen.items(), key=lambda kv: (-kv[1], order[kv[0]]))
    kept = [kv for kv in ranked if kv[1] >= MIN_WEIGHT] or ranked[:1]
    return kept[:MAX_WORDS]
