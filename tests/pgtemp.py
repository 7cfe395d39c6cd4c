"""A throwaway PostgreSQL server for the fault tests (issue 9): never the machine's shared one.

It runs the PostgreSQL binaries the ``pgserver`` package ships (a dependency of the project, so
they are there on every machine), in a temporary folder, listening on a free loopback port, with
durability switched off (``fsync=off``: the data is thrown away). As root, the server runs as the
unprivileged ``pgserver`` OS user, as ``pgserver`` itself does (PostgreSQL refuses to run as root).

The test controls its life: :meth:`start`, :meth:`stop` (``fast``: the server tells each client
it is shutting down; ``immediate``: a crash, clients see their sockets close), :meth:`freeze` /
:meth:`thaw` (SIGSTOP / SIGCONT on every process of the server: it neither answers nor closes
anything), and :meth:`destroy`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import psutil
from pgserver._commands import POSTGRES_BIN_PATH

OS_USER = "pgserver"
SERVER_OPTIONS = (
    "-c fsync=off -c full_page_writes=off -c synchronous_commit=off "
    "-c shared_buffers=16MB -c max_connections=40"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    """One PostgreSQL cluster in a temporary folder, on 127.0.0.1:``port``, user ``postgres``."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sibyl-pgtemp-"))
        self.pgdata = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

            try:
                ensure_user_exists(OS_USER)
            except subprocess.CalledProcessError:
                # another process (a test worker, an embedded server) added the user meanwhile
                import pwd

                pwd.getpwnam(OS_USER)
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_prefix_permissions(self.root)
            shutil.chown(self.root, OS_USER, OS_USER)
            self.user = OS_USER
        self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--no-sync")

    @property
    def url(self) -> str:
        """The ``postgresql://`` URL of the ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        # Output goes to files, never to pipes: a started postmaster inherits them and a pipe
        # would keep the call waiting for it.
        with tempfile.TemporaryFile("w+") as out:
            done = subprocess.run(
                [str(POSTGRES_BIN_PATH / program), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                user=self.user,
                cwd=self.root,
                timeout=timeout,
                check=False,
            )
            if done.returncode != 0:
                out.seek(0)
                log = self.log.read_text() if self.log.exists() else ""
                raise RuntimeError(f"{program} failed: {out.read()}\n{log[-2000:]}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} {SERVER_OPTIONS}"
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``, ``immediate`` or ``smart``) and wait until it is gone."""
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60", "stop")

    def _processes(self) -> list[psutil.Process]:
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return []
        try:
            postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
            return [postmaster, *postmaster.children(recursive=True)]
        except (psutil.NoSuchProcess, ValueError):
            return []

    def _signal(self, sig: signal.Signals) -> None:
        for process in self._processes():
            # a backend listed a moment ago may have ended since (a closed connection)
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)

    def freeze(self) -> None:
        """SIGSTOP every process of the server: connections stay open, nothing answers."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT every process of the server."""
        self._signal(signal.SIGCONT)

    def destroy(self) -> None:
        """Stop the server if it runs (thawing it first) and delete its folder."""
        self.thaw()
        if self._processes():
            try:
                self.stop("immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                for process in self._processes():
                    process.kill()
        shutil.rmtree(self.root, ignore_errors=True)
