"""MCP servers as one more source of tools: configured servers, their connections, and their
results; the `mcp` SDK is imported only when a server is configured."""
