"""sibyl-pg: a relational-graph memory service for AI agents, on PostgreSQL.

Layers (each a package; a module imports only its own layer and those above it in this list,
checked by tests/test_layers.py):

- ``app.core``: shared infrastructure (settings, engine, errors, logs, the embedded PostgreSQL,
  the reader, the policy table).
- ``app.repo``: every SQL statement (tables, the read-rule fragment, the hop arms, the walk).
- ``app.domain``: the rules (search, slice, context, writes, validation); no SQL, no HTTP or MCP.
- ``app.service``: units of work (authentication, one transaction per verb, faults mapped to
  errors), the verbs that authenticate in their statement (expand, explain, doctor) and the
  background workers; ``app.importers``: NDJSON bulk import and the PEP corpus, on this layer.
- ``app.api`` (REST), ``app.mcp`` (MCP), ``app.cli`` (the ``sibyl-pg`` command) and ``app.ui``
  (the explorer's page): thin adapters over the same service functions.

The benchmark (``bench``) and the evaluation (``evaluation``) are packages of their own beside
``app``: dev tools the service never imports.
"""
