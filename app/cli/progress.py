"""What the command line shows while a user waits (rule: no-silent-wait): announced steps and
progress.

Everything goes to standard error (standard output stays for what a command prints, e.g. a key).
On a terminal, steps are styled lines and progress is a ``rich`` bar; elsewhere (a pipe, CI, a
log file) the same steps are plain lines and progress is a line at every tenth of the work, and
at least every :data:`QUIET_SECONDS` seconds, so no stretch of work is silent.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")

QUIET_SECONDS = 5.0
"""On a non-terminal, a progress line is printed after at most this many seconds of work, even
while nothing advances (a heartbeat thread)."""

MIN_GAP_SECONDS = 1.0
"""On a non-terminal, progress lines are at least this far apart (a quick job prints one line)."""

console = Console(stderr=True, highlight=False, soft_wrap=True)


def step(message: str) -> None:
    """Announce a step that is starting (``› migrating the database``)."""
    console.print(f"[bold cyan]›[/] {message}")


@contextmanager
def progress(label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress display for ``total`` units of work; yields ``advance(n)``.

    On a terminal: a ``rich`` bar (label, bar, done/total, elapsed). Elsewhere: a line
    ``label: done/total`` at every tenth of ``total`` (at most one a second) and after
    :data:`QUIET_SECONDS` without one, then a last line with the elapsed time.
    """
    if console.is_terminal:
        bar = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        with bar:
            task = bar.add_task(label, total=total)

            def advance_bar(n: int = 1) -> None:
                bar.update(task, advance=n)

            yield advance_bar
        return
    started = last = time.monotonic()
    done = 0
    tenth = max((total or 0) // 10, 1)
    lock = threading.Lock()
    finished = threading.Event()

    def say(now: float) -> None:
        nonlocal last
        last = now
        of = f"/{total}" if total else ""
        console.print(f"  {label}: {done}{of} ({now - started:.0f} s)")

    def advance(n: int = 1) -> None:
        nonlocal done
        with lock:
            before, done = done, done + n
            now = time.monotonic()
            crossed = before // tenth != done // tenth and now - last >= MIN_GAP_SECONDS
            if crossed or now - last >= QUIET_SECONDS:
                say(now)

    def heartbeat() -> None:
        # a phase that advances nothing for a while (a bulk write, a VACUUM) still says so
        while not finished.wait(QUIET_SECONDS / 2):
            with lock:
                now = time.monotonic()
                if now - last >= QUIET_SECONDS:
                    say(now)

    beat = threading.Thread(target=heartbeat, name=f"progress: {label}", daemon=True)
    beat.start()
    try:
        yield advance
    finally:
        finished.set()
        beat.join()
    console.print(f"  {label}: {done} done in {time.monotonic() - started:.0f} s")


HEARTBEAT_SECONDS = 2.0
"""A phased display (:class:`PhaseProgress`) is never silent longer: on a terminal the bar
redraws its elapsed time four times a second; elsewhere a line is printed after this long
without one."""


class PhaseProgress:
    """The display of a job in named phases (an import: reading, writing, search statistics,
    vacuum), each with a count of units when known; a context manager. On a terminal: one
    ``rich`` bar per phase (label, bar, done/total, elapsed), the finished ones kept. Elsewhere:
    a line when a phase starts, at every tenth of it (at most one a second), after
    :data:`HEARTBEAT_SECONDS` without a line, and when it ends, with its elapsed time."""

    def __init__(self, *, heartbeat_s: float = HEARTBEAT_SECONDS) -> None:
        self.heartbeat_s = heartbeat_s
        self.terminal = console.is_terminal
        self.lock = threading.Lock()
        self.label = ""
        self.total: int | None = None
        self.done = 0
        self.started = self.last = time.monotonic()
        self.finished = threading.Event()
        self.bar: Progress | None = None
        self.task: Any = None
        self.beat: threading.Thread | None = None

    def __enter__(self) -> PhaseProgress:
        if self.terminal:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                refresh_per_second=4,
            )
            self.bar.start()
        else:
            self.beat = threading.Thread(target=self._heartbeat, name="progress", daemon=True)
            self.beat.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._end_phase(stopped=exc_type is not None)
        self.finished.set()
        if self.beat is not None:
            self.beat.join()
        if self.bar is not None:
            self.bar.stop()

    def _say(self, now: float, suffix: str = "") -> None:
        self.last = now
        done = f"{self.done}/{self.total} " if self.total else ""
        console.print(f"  {self.label}: {done}({now - self.started:.0f} s){suffix}")

    def _end_phase(self, *, stopped: bool = False) -> None:
        """End the running phase: done, or ``stopped`` (an error or Ctrl-C ended the job: the
        phase is not shown as complete)."""
        with self.lock:
            if not self.label:
                return
            elapsed = time.monotonic() - self.started
            if stopped:
                console.print(f"  {self.label}: stopped after {elapsed:.1f} s")
            elif self.bar is not None and self.task is not None:
                self.bar.update(
                    self.task, completed=self.total or self.done, total=self.total or self.done or 1
                )
            elif self.bar is None:
                console.print(f"  {self.label}: done in {elapsed:.1f} s")
            self.label = ""

    def phase(self, label: str, total: int | None) -> None:
        """Start phase ``label`` of ``total`` units (None: unknown); the last one ends."""
        self._end_phase()
        with self.lock:
            self.label, self.total, self.done = label, total, 0
            self.started = time.monotonic()
            if self.bar is not None:
                self.task = self.bar.add_task(label, total=total)
            else:
                self._say(self.started)

    def advance(self, n: int) -> None:
        """``n`` more units of the running phase are done."""
        with self.lock:
            before, self.done = self.done, self.done + n
            if self.bar is not None:
                self.bar.update(self.task, advance=n)
                return
            now = time.monotonic()
            tenth = max((self.total or 0) // 10, 1)
            if before // tenth != self.done // tenth and now - self.last >= MIN_GAP_SECONDS:
                self._say(now)

    def _heartbeat(self) -> None:
        while not self.finished.wait(self.heartbeat_s / 4):
            with self.lock:
                now = time.monotonic()
                if self.label and now - self.last >= self.heartbeat_s:
                    self._say(now)


def port_in_use(host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound (another server listens there).

    Binds with ``SO_REUSEADDR`` as uvicorn does, so a port left in TIME_WAIT counts as free.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
