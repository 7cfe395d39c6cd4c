"""The MCP adapter: the service's read verbs as tools for agents (rule: same-verbs-both-surfaces).

- :mod:`app.mcp.server` builds the ``MCPServer`` and its tools. Each tool is a thin adapter: it
  builds the very pydantic request model REST uses, runs the very domain function REST runs
  through :func:`app.service.session.run_read`, and returns the very response model, so the two
  surfaces cannot drift.
- :mod:`app.mcp.http` serves it over streamable HTTP at ``/mcp`` inside the REST app, behind the
  same ``Authorization: Bearer <key>`` check as REST.
- :mod:`app.mcp.stdio` serves it over stdio (``sibyl-pg mcp``) for the key in
  ``SIBYL_PG_API_KEY``.

The domain core imports nothing from here.
"""
