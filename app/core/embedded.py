"""The embedded PostgreSQL used when no ``DATABASE_URL`` is set (rule: command-line).

It is the ``pgserver`` package's PostgreSQL 16, run from ``<data_dir>/pg`` over a Unix socket in
that folder, and left running after the process exits so that later commands reuse it.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path


def embedded_url(pgdata: Path) -> str:
    """Start (or reuse) the embedded server in ``pgdata``; return its ``postgresql://`` URL.

    The URL names the ``postgres`` database over the socket in ``pgdata``. Raises whatever
    ``pgserver`` raises when the server cannot start (its log is in ``pgdata``).
    """
    pgdata.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    running = (pgdata / "postmaster.pid").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(pgdata, cleanup_mode=None)
        url = str(server.get_uri())
    if pgdata not in _announced:  # once a process: a CLI command says which server it used
        _announced.add(pgdata)
        how = "running" if running else "started; it keeps running after this command"
        print(
            f"no DATABASE_URL: using the embedded PostgreSQL in {pgdata} ({how})",
            file=sys.stderr,
        )
    return url


_announced: set[Path] = set()
