"""`lace mcp list`: the MCP servers lace would use here (`[mcp_servers]` and `.mcp.json`),
each started as a run would start it, whether it started, and its tools with their policy."""

from __future__ import annotations

import argparse
import sys

from lace.cli.invocation import with_tool_flags, workspace_of
from lace.cli.output import print_json, say
from lace.config import load_settings
from lace.core.errors import LaceError
from lace.core.shown import shown_briefly
from lace.runtime.mcp_servers import list_servers

EXIT_SERVER_FAILED = 1
SHOWN_CHARACTERS = 200
"""Of a server's name, how it is reached and its status, in a listing (`--json` has them whole):
a repository's lace.toml or .mcp.json may hold a command of a megabyte."""


def mcp_help_command(_args: argparse.Namespace) -> int:
    """`lace mcp` with no action."""
    raise LaceError("choose an action: lace mcp list, lace mcp serve (see lace mcp --help)")


def mcp_list_command(args: argparse.Namespace) -> int:
    """`lace mcp list`: exit 1 when a server did not start."""
    settings = with_tool_flags(load_settings(workspace=workspace_of(args)), args)
    listed, warnings = list_servers(settings, workspace_of(args))
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
                  else f"pending: not started until you trust it ({server['trust_with']})"
                  if server["status"] == "pending" else f"failed to start: {server['error']}")
        name, transport = (shown_briefly(server[part], SHOWN_CHARACTERS)
                           for part in ("name", "transport"))
        say(f"{name}  ({transport})  {shown_briefly(status, SHOWN_CHARACTERS)}", one_line=True)
        for tool in server["tools"]:
            summary = tool["description"].split("] ", 1)[-1]
            say(f"  {tool['name']}  [{tool['policy']}]  {summary[:100]}", one_line=True)
        for reason in server["left_out"]:
            say(f"  left out: {reason}", one_line=True)
    failed = any(server["status"] == "failed" for server in listed)
    return EXIT_SERVER_FAILED if failed else 0
