"""What a user waiting on a non-terminal sees (issue 14): no stretch of work is silent."""

from __future__ import annotations

import io
import time

from rich.console import Console

from app.cli import progress as cli_progress


def test_a_phase_that_advances_nothing_still_prints_a_line(monkeypatch):
    out = io.StringIO()  # not a terminal: plain lines, as in a pipe, CI or a log file
    monkeypatch.setattr(cli_progress, "console", Console(file=out, highlight=False))
    monkeypatch.setattr(cli_progress, "QUIET_SECONDS", 0.2)
    with cli_progress.progress("bulk write", 10) as advance:
        advance(3)
        time.sleep(1.0)  # a bulk statement running: nothing advances
    text = out.getvalue()
    assert any("bulk write: 3/10" in line for line in text.splitlines()), text
    assert "bulk write: 3 done in" in text
