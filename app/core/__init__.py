"""Shared infrastructure: settings, database engine, errors, logs, embedded Postgres, the reader
and the policy table (the lowest layer: imports nothing else of the app)."""
