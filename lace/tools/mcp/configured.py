"""The MCP servers a run uses: `[mcp_servers]` in lace's configuration and the workspace's
`.mcp.json` (the file Claude Code and Cursor read), with `${VAR}` and `${VAR:-default}` read
from the environment, and any key written in them masked like a provider key."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import ValidationError

from lace.config import McpServer, Settings
from lace.core.errors import LaceError
from lace.paths import add_credential_values, is_credential

MCP_JSON = ".mcp.json"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingVariableError(LaceError):
    """A `${VAR}` with no value and no default."""


def expand(text: str) -> str:
    """`text` with `${VAR}` (and `${VAR:-default}`) replaced from the environment."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is None and default is None:
            raise MissingVariableError(f"${{{name}}} is not set")
        return found if found is not None else default

    return _VARIABLE.sub(value, text)


def expanded(server: McpServer) -> McpServer:
    """The server with every `${VAR}` read; a MissingVariableError when one is unset."""
    return server.model_copy(update={
        "command": expand(server.command) if server.command else None,
        "args": [expand(arg) for arg in server.args],
        "env": {name: expand(value) for name, value in server.env.items()},
        "cwd": expand(server.cwd) if server.cwd else None,
        "url": expand(server.url) if server.url else None,
        "headers": {name: expand(value) for name, value in server.headers.items()}})


def secrets_of(server: McpServer) -> list[str]:
    """The keys a server's configuration holds: `env` entries named like credentials, and
    headers that carry one (`Authorization`'s value and its token)."""
    values = [value for name, value in server.env.items() if is_credential(name)]
    for name, value in server.headers.items():
        key = name.replace("-", "_")
        if key.lower() in ("authorization", "proxy_authorization") or is_credential(key):
            values += [value, value.partition(" ")[2]]
    return [value for value in values if value]


def read_mcp_json(workspace: Path) -> tuple[dict[str, McpServer], list[str]]:
    """The servers of `<workspace>/.mcp.json` (`{"mcpServers": {NAME: {...}}}`), and a warning
    for each entry lace cannot use; a file that is not JSON is an error."""
    path = workspace / MCP_JSON
    if not path.is_file():
        return {}, []
    try:
        entries = json.loads(path.read_text()).get("mcpServers") or {}
    except (OSError, ValueError, AttributeError) as error:
        raise LaceError(f"Cannot read {path}: {error}") from None
    if not isinstance(entries, dict):
        raise LaceError(f"Cannot read {path}: mcpServers is not an object")
    servers, warnings = {}, []
    for name, entry in entries.items():
        try:
            if isinstance(entry, dict) and entry.get("type") == "sse":
                raise LaceError("type sse is not supported (streamable HTTP is: type http)")
            servers[name] = McpServer.model_validate(entry)
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in problem["loc"])
            warnings.append(f"MCP server {name!r} in {path} left out: "
                            + (f"{where}: " if where else "") + problem["msg"])
        except LaceError as error:
            warnings.append(f"MCP server {name!r} in {path} left out: {error}")
    return servers, warnings


def configured_servers(settings: Settings, workspace: Path | None,
                       ) -> tuple[dict[str, McpServer], list[str]]:
    """Every server to use, by name (lace's configuration wins over `.mcp.json`), with
    variables read and their keys registered for masking; and warnings for those left out."""
    found, warnings = read_mcp_json(workspace) if workspace is not None else ({}, [])
    found.update(settings.mcp_servers)
    servers = {}
    for name, server in found.items():
        try:
            servers[name] = expanded(server)
        except MissingVariableError as error:
            warnings.append(f"MCP server {name!r} left out: {error}")
            continue
        add_credential_values(secrets_of(servers[name]))
    return servers, warnings
