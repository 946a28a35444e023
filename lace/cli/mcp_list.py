"""`lace mcp list`: the MCP servers lace would use here (`[mcp_servers]` and `.mcp.json`),
each started as a run would start it, whether it started, and its tools with their policy."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from lace.cli.board import print_json, say
from lace.cli.run import with_tool_flags, workspace_of
from lace.config import McpServer, Settings, ToolSettings, load_settings
from lace.core.errors import LaceError
from lace.core.secrets import mask
from lace.paths import credential_values
from lace.tools.mcp.configured import configured_servers
from lace.tools.mcp.servers import McpServers

EXIT_SERVER_FAILED = 1


def mcp_help_command(_args: argparse.Namespace) -> int:
    """`lace mcp` with no action."""
    raise LaceError("choose an action: lace mcp list, lace mcp serve (see lace mcp --help)")


def transport_of(config: McpServer) -> str:
    """How lace reaches a server: its command line, or its URL (keys masked)."""
    if config.url is not None:
        shown = f"streamable HTTP {config.url}"
    else:
        shown = " ".join([config.command or "", *config.args])
    return mask(shown, credential_values())


async def _listed(servers: McpServers, tools: ToolSettings) -> list[dict[str, Any]]:
    """Start every server (as a run would, in parallel) and describe each."""
    try:
        await servers.ready()
        listed = []
        for name, connection in servers.connections.items():
            offered = [tool for tool in servers.tools.values() if tool.server == name]
            listed.append({
                "name": name, "transport": transport_of(connection.config),
                "started": connection.state == "ready", "error": connection.error,
                "tools": [{"name": tool.name, "tool": tool.tool, "read_only": tool.read_only,
                           "policy": tools.policy_for(tool.name, read_only_hint=tool.read_only),
                           "description": tool.description} for tool in offered],
                "left_out": servers.left_out.get(name, [])})
        return listed
    finally:
        await servers.stop()


def list_servers(settings: Settings, args: argparse.Namespace) -> tuple[list[dict[str, Any]],
                                                                          list[str]]:
    """Every server with its tools, and the warnings met on the way (entries left out)."""
    warnings: list[str] = []
    servers, skipped = configured_servers(settings, workspace_of(args))
    warnings += skipped
    running = McpServers(servers, settings.limits, warnings.append)
    return asyncio.run(_listed(running, settings.tools)), warnings


def mcp_list_command(args: argparse.Namespace) -> int:
    """`lace mcp list`: exit 1 when a server did not start."""
    settings = with_tool_flags(load_settings(), args)
    listed, warnings = list_servers(settings, args)
    for warning in warnings:
        if not any(warning.startswith(f"MCP server {s['name']} failed") for s in listed):
            say(f"lace: warning: {warning}", one_line=True, file=sys.stderr)
    if args.json:
        print_json(listed)
    elif not listed:
        print("No MCP servers configured: add [mcp_servers.NAME] to lace.toml, or an "
              ".mcp.json to the workspace.")
    for server in [] if args.json else listed:
        status = (f"{len(server['tools'])} tool(s)" if server["started"]
                  else f"failed to start: {server['error']}")
        say(f"{server['name']}  ({server['transport']})  {status}", one_line=True)
        for tool in server["tools"]:
            summary = tool["description"].split("] ", 1)[-1]
            say(f"  {tool['name']}  [{tool['policy']}]  {summary[:100]}", one_line=True)
        for reason in server["left_out"]:
            say(f"  left out: {reason}", one_line=True)
    return 0 if all(server["started"] for server in listed) else EXIT_SERVER_FAILED
