"""MCP servers the tests run as subprocesses (stdio) or on 127.0.0.1 (streamable HTTP)."""
