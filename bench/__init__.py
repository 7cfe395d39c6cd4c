"""The benchmark: a synthetic org at scale, the service's read verbs measured side by
side with a naive path-enumerating walk, and REST end to end under concurrency.

- :mod:`bench.generate`: ``sibyl-pg bench generate``, the deterministic synthetic org, loaded
  with ``COPY``;
- :mod:`bench.baseline`: the baseline walk (kept only here, never used by the service);
- :mod:`bench.run`: ``sibyl-pg bench run`` / ``make bench``, measurements, JSON and chart;
- :mod:`bench.database`: the benchmark's own database (never the test database).

``docs/benchmark.md`` explains the method and holds the latest figures.
"""
