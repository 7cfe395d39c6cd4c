"""sibyl-pg: a relational-graph memory service for AI agents, on PostgreSQL.

Layers (each a package):

- ``app.core``: shared infrastructure (settings, engine and sessions, errors, embedded Postgres).
- ``app.domain``: the domain core: the read rule, the walk, the slice, span cutting, policies.
  It knows nothing of HTTP or MCP.
- ``app.repo``: every SQL statement (tables, the read-rule fragment, the walk's recursive CTE).
- ``app.importers``: NDJSON bulk import and the PEP corpus mapping.
- ``app.api`` (REST) and ``app.mcp`` (MCP): thin adapters over the same domain functions.
"""
