"""The MCP servers a run would use in a workspace (`[mcp_servers]` and `.mcp.json`), each
started as a run starts it and described with its tools and their policy (`lace mcp list`)."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import Any

from lace.config import McpServer, Settings, ToolSettings
from lace.core.secrets import mask
from lace.paths import credential_values
from lace.tools.mcp.configured import configured_servers, secrets_of, untrusted_servers
from lace.tools.mcp.servers import McpServers

__all__ = ["list_servers", "transport_of"]


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
                "status": "started" if connection.state == "ready" else "failed",
                "started": connection.state == "ready", "error": connection.error,
                "tools": [{"name": tool.name, "tool": tool.tool, "read_only": tool.read_only,
                           "policy": tools.policy_for(tool.name, read_only_hint=tool.read_only),
                           "description": tool.description} for tool in offered],
                "left_out": servers.left_out.get(name, [])})
        return listed
    finally:
        await servers.stop()


def list_servers(settings: Settings, workspace: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every server with its tools, and the warnings met on the way (entries left out)."""
    warnings: list[str] = []
    servers, skipped = configured_servers(settings, workspace)
    warnings += skipped
    running = McpServers(servers, settings.limits, warnings.append)
    return asyncio.run(_listed(running, settings.tools)) + _pending(settings, workspace), \
        warnings


def _pending(settings: Settings, workspace: Path) -> list[dict[str, Any]]:
    """The servers of an `.mcp.json` that waits for the person's trust, described as written
    and never started."""
    trust = f"lace trust {shlex.quote(str(workspace))}"
    return [{"name": name, "transport": _pending_transport(server),
             "status": "pending", "started": False, "error": None, "trust_with": trust,
             "tools": [], "left_out": []}
            for name, server in untrusted_servers(workspace).items()
            if name not in settings.mcp_servers]


def _pending_transport(server: McpServer | None) -> str:
    """How an untrusted entry would be reached, with the keys it writes itself masked (a
    password or token in its URL, an `Authorization` header) as they are once it is trusted."""
    if server is None:
        return "(unusable entry)"
    return mask(transport_of(server), secrets_of(server))
