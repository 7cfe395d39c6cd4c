"""How many random cases the randomized tests try: fewer in ``make test``, all of them in
``make test-thorough`` (``SIBYL_TEST_THOROUGH=1``).

``make test`` runs on every change and in CI and must stay short (issue 14: under 6 minutes on 2
cores); the thorough run is for changes to the walk, the span cutter or the previews, and runs
the same tests with the larger counts they had before. The default cases are a prefix of the
thorough ones where the test numbers them (the walk oracle's graphs 0-99 of 0-199), so a failure
seen in the thorough run on a low number is seen by ``make test`` too.
"""

from __future__ import annotations

import os

THOROUGH = os.environ.get("SIBYL_TEST_THOROUGH", "") not in ("", "0")


def cases(default: int, thorough: int) -> int:
    """``thorough`` under ``SIBYL_TEST_THOROUGH=1``, else ``default``."""
    return thorough if THOROUGH else default
