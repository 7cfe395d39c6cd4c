"""Domain core: rules of the walk, slice, search and authorization; knows nothing of HTTP or MCP."""
