"""Load, short form (issue 9): 32 clients mixing reads and writes against ``sibyl-pg serve``.

The service runs as a subprocess on a free loopback port, bound to the test database; the load
(:mod:`app.bench.load`) runs in an org of its own for ``SIBYL_LOAD_SECONDS`` (default 8 s):
zero errors, zero lost writes (every acknowledged write is read back as acknowledged), and the
latency percentiles are printed. The long form is ``make bench-load`` (60 s, its own database).
"""

from __future__ import annotations

import os
from typing import Any

from app.bench.load import CLIENTS, SHORT_SECONDS, run_load, seed, served


async def test_32_clients_mixing_reads_and_writes_no_error_no_lost_write(
    engine: Any, database_url: str
) -> None:
    seconds = float(os.environ.get("SIBYL_LOAD_SECONDS", SHORT_SECONDS))
    world = await seed(engine)
    with served(database_url) as base:
        report = await run_load(base, world, clients=CLIENTS, seconds=seconds)
    print("\n" + report.render())
    assert report.requests > CLIENTS * 5, "the load barely ran"
    assert not report.errors, report.errors[:10]
    assert report.acked and report.edges, "no write was acknowledged"
    assert not report.lost, report.lost[:10]
