"""The statements of ``search`` and ``context`` (rule: search-lanes), one module per stage of the
pipeline in :mod:`app.domain.search`:

- :mod:`~app.repo.search.words`: ``sibyl:search.words``, a query's words and the reader's counts;
- :mod:`~app.repo.search.fulltext`: ``sibyl:search.fulltext``, the full-text lane;
- :mod:`~app.repo.search.exact`: ``sibyl:search.exact``, the exact lane;
- :mod:`~app.repo.search.semantic`: ``sibyl:search.semantic``, the semantic lane (pgvector);
- :mod:`~app.repo.search.spans`: ``sibyl:search.spans``, a memory's best spans (focus);
- :mod:`~app.repo.search.promote`: ``sibyl:search.promote``, a result's strongest neighbour;
- :mod:`~app.repo.search.hits`: ``sibyl:search.hits``, the rows of a page.

Every statement embeds the read rule on the ``entities`` row (a passage: its parent's) in the
arm that finds a row, before any cap, rank or page, and binds every value as a parameter.
"""

from app.repo.search.exact import ExactHit, exact
from app.repo.search.fulltext import Bounds, Scoring, TextHit, fulltext
from app.repo.search.hits import Hit, hits
from app.repo.search.promote import Neighbor, promoted
from app.repo.search.spans import FOCUS_TEXT_CHARS, Focus, Span, spans
from app.repo.search.words import Lexeme, ParsedWord, ReaderCounts, lookup_words

__all__ = [
    "FOCUS_TEXT_CHARS",
    "Bounds",
    "ExactHit",
    "Focus",
    "Hit",
    "Lexeme",
    "Neighbor",
    "ParsedWord",
    "ReaderCounts",
    "Scoring",
    "Span",
    "TextHit",
    "exact",
    "fulltext",
    "hits",
    "lookup_words",
    "promoted",
    "spans",
]
