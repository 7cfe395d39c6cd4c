"""The ``sibyl-pg`` command line: an adapter over the service layer, like REST and MCP."""
