"""Shared infrastructure: settings, database engine and sessions, errors, embedded Postgres."""
