"""What a user waiting on a non-terminal sees (issue 14): no stretch of work is silent."""

from __future__ import annotations

import contextlib
import io
import time

import pytest
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


def test_a_job_stopped_by_ctrl_c_does_not_say_done(monkeypatch):
    """A trial's Ctrl-C during the writing phase printed 'writing: done in 0.4 s' (nothing had
    been written). A phase an exception ends says it stopped; one that ended says done."""
    for stop in (True, False):
        out = io.StringIO()
        monkeypatch.setattr(cli_progress, "console", Console(file=out, highlight=False))
        expected = pytest.raises(KeyboardInterrupt) if stop else contextlib.nullcontext()
        with expected, cli_progress.PhaseProgress() as display:
            display.phase("writing", 10)
            display.advance(4)
            if stop:
                raise KeyboardInterrupt
        text = out.getvalue()
        assert ("writing: stopped after" in text) == stop, text
        assert ("writing: done in" in text) == (not stop), text
