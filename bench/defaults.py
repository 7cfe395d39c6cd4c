"""Default sizes of the benchmark (kept apart so the command line imports nothing heavy)."""

from __future__ import annotations

DEFAULT_ENTITIES = 200_000  # `make bench`: must finish in under 10 minutes on 2 cores
DEFAULT_EDGES = 1_600_000
DEFAULT_SEED = 42
DEFAULT_ORG = "org_bench"
QUICK_ENTITIES = 20_000  # `bench run --quick`
QUICK_EDGES = 160_000
LARGE_ENTITIES = 1_000_000  # the documented large run, and the scale of the benchmark's targets
LARGE_EDGES = 8_000_000
