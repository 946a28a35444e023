"""The MCP servers a run uses: `[mcp_servers]` in lace's configuration and the workspace's
`.mcp.json` (the file Claude Code and Cursor read), with `${VAR}` and `${VAR:-default}` read
from the environment, and any key written in them masked like a provider key. A workspace's
`lace.toml` or `.mcp.json` may come with a repository the person did not write: its servers are
used only once the person trusts that folder as it is (`lace trust`, `lace.trust`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import ValidationError

from lace.config import McpServer, Settings
from lace.config.sources import project_folder
from lace.core.errors import LaceError
from lace.paths import add_credential_values, is_credential
from lace.trust import MCP_JSON, PROJECT_SETTINGS, parsed, project_of, trusted_bytes

SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")
"""A server name that no other shares tool names with: no `__` (server `a__b`'s tool `c`
would be `mcp__a__b__c`, server `a`'s tool `b__c`, and fall under `mcp__a__*`), no `_` at
an end, and no character replaced in tool names (`x.y` would be `x_y`)."""
MAX_SERVER_NAME = 48
"""So that `mcp__<server>__` fits in the 55 characters a long tool name keeps, and the
server's pattern (`"mcp__<server>__*" = "deny"`) covers every one of its tools."""
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
    """The keys a server's configuration holds: `env` entries named like credentials, headers
    that carry one (`Authorization`'s value and its token), and those in its URL (a password,
    a query parameter named like a credential)."""
    values = [value for name, value in server.env.items() if is_credential(name)]
    if server.url is not None:  # a key in the URL: `user:password@`, `?api_key=...`
        parts = urlsplit(server.url)
        values += [parts.password or ""] + [
            value for name, value in parse_qsl(parts.query)
            if is_credential(name.replace("-", "_"))]
    for name, value in server.headers.items():
        key = name.replace("-", "_")
        if key.lower() in ("authorization", "proxy_authorization") or is_credential(key):
            values += [value, value.partition(" ")[2]]
    return [value for value in values if value]


def _entries(path: Path, data: bytes) -> dict[str, object]:
    """The `mcpServers` of a `.mcp.json` file's bytes."""
    try:
        entries = json.loads(data).get("mcpServers") or {}
    except (ValueError, AttributeError) as error:
        raise LaceError(f"Cannot read {path}: {error}") from None
    except RecursionError:
        raise LaceError(f"Cannot read {path}: nested too deep") from None
    if not isinstance(entries, dict):
        raise LaceError(f"Cannot read {path}: mcpServers is not an object")
    return entries


def read_mcp_json(workspace: Path) -> tuple[dict[str, McpServer], list[str]]:
    """The servers of `<workspace>/.mcp.json` (`{"mcpServers": {NAME: {...}}}`) when the
    person trusts the workspace as it is (none otherwise), and a warning for each entry lace
    cannot use; a trusted file that is not JSON is an error."""
    path = workspace / MCP_JSON
    data = trusted_bytes(workspace, MCP_JSON)
    servers, warnings = {}, []
    for name, entry in (_entries(path, data) if data is not None else {}).items():
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


def untrusted_servers(workspace: Path) -> dict[str, McpServer | None]:
    """The servers of the workspace's `lace.toml` (`[mcp_servers]`) and `.mcp.json` while the
    person has not trusted them: each as written (never started, its variables unread), None
    for an entry lace could not use; none once they are trusted (then they are configured) or
    when they cannot be read."""
    written: dict[str, Any] = {}
    settings = project_of(project_folder(workspace))  # the nearest lace.toml's folder
    if PROJECT_SETTINGS in settings.files and not settings.trusted():
        with contextlib.suppress(LaceError):
            table = parsed(settings, PROJECT_SETTINGS).get("mcp_servers")
            written.update(table if isinstance(table, dict) else {})
    own = project_of(workspace)
    if MCP_JSON in own.files and not own.trusted():
        with contextlib.suppress(LaceError):
            found = _entries(workspace / MCP_JSON, own.files[MCP_JSON])
            written.update({name: entry for name, entry in found.items() if name not in written})
    servers: dict[str, McpServer | None] = {}
    for name, entry in written.items():
        try:
            servers[name] = McpServer.model_validate(entry)
        except ValidationError:
            servers[name] = None
    return servers


def configured_servers(settings: Settings, workspace: Path | None,
                       ) -> tuple[dict[str, McpServer], list[str]]:
    """Every server to use, by name (lace's configuration wins over `.mcp.json`), with
    variables read and their keys registered for masking; and warnings for those left out."""
    found, warnings = read_mcp_json(workspace) if workspace is not None else ({}, [])
    found.update(settings.mcp_servers)
    servers = {}
    for name, server in found.items():
        if not SERVER_NAME.fullmatch(name) or len(name) > MAX_SERVER_NAME:
            warnings.append(f"MCP server {name!r} left out: a server's name must be letters, "
                            "digits, - and single _ between them, at most "
                            f"{MAX_SERVER_NAME} characters (its tools are "
                            "mcp__<server>__<tool>)")
            continue
        try:
            servers[name] = expanded(server)
        except MissingVariableError as error:
            warnings.append(f"MCP server {name!r} left out: {error}")
            continue
        add_credential_values(secrets_of(servers[name]))
    return servers, warnings
