"""The MCP server: one server object (results, listing, progress) and its transports."""
