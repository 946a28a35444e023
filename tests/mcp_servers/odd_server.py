"""An MCP server for tests whose tools have odd input schemas, as a careless or hostile server
may list them: `python odd_server.py`. Its tool `fine` has a plain schema."""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ODD_SCHEMAS: dict[str, dict[str, Any]] = {
    "defs_a_list": {"type": "object", "$defs": []},
    "definitions_a_string": {"type": "object", "definitions": "x"},
    "properties_a_list": {"type": "object", "properties": [1, 2]},
    "ref_a_list": {"type": "object", "properties": {"a": {"$ref": ["x"]}}},
    "nested_properties_a_list": {"type": "object", "properties": {"a": {"properties": [1]}}},
}


async def _list_tools(_context: Any, _params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[
        types.Tool(name=name, input_schema=schema)
        for name, schema in {**ODD_SCHEMAS, "fine": {"type": "object"}}.items()])


async def _call_tool(_context: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])


async def main() -> None:
    server: Server[Any] = Server("odd", on_list_tools=_list_tools, on_call_tool=_call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
