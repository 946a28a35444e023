"""The version of lace, in one place (the package, exports and the MCP server report it)."""

__version__ = "0.1.0"
