"""The MCP servers of one lace process, shared by all its agents: started in parallel (with a
timeout) before an agent's first model request, a server that failed left out and tried again
later, one that died restarted once, all stopped when lace exits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from lace.config import Limits, McpServer
from lace.core.errors import LaceError
from lace.core.secrets import mask
from lace.core.tool_sets import mcp_tool_name
from lace.paths import credential_values
from lace.tools.base import ToolError, ToolResult
from lace.tools.mcp.connection import Connection, ServerGoneError
from lace.tools.mcp.results import (
    MAX_SERVER_CHARACTERS,
    MAX_SERVER_TOOLS,
    ServerTool,
    adapted_schema,
    described,
    result_text,
)

Warn = Callable[[str], None]
BOARD_SERVER = ("lace", "lace task board")
"""The name and title `lace mcp serve` gives itself."""


def _ignore(_text: str) -> None:
    """A warning nobody listens to."""


class McpServers:
    """Every configured server of the process, and the tools of those that are running."""

    def __init__(self, servers: dict[str, McpServer], limits: Limits, warn: Warn = _ignore,
                 warnings: Sequence[str] = ()) -> None:
        self._warnings = list(warnings)
        """Told on the first `ready`, once someone listens (servers left out of the
        configuration)."""
        self.connections = {name: Connection(name, config) for name, config in servers.items()}
        self.limits, self.warn = limits, warn
        self.tools: dict[str, ServerTool] = {}
        self.left_out: dict[str, list[str]] = {}
        """Per server, the tools not offered and why (a schema too big to send)."""
        self._failed_at: dict[str, float] = {}
        self._restarted_at: dict[str, float] = {}
        self._starts: dict[str, asyncio.Task[None]] = {}
        self._restarts: dict[str, asyncio.Future[bool]] = {}
        self._first: asyncio.Task[None] | None = None
        self._closed = False

    async def ready(self) -> list[ServerTool]:
        """The tools of the running servers. The first call starts every server and waits for
        them all (at most `mcp_start_timeout_s`); later calls start again, in the background,
        the servers that failed more than `mcp_retry_s` ago."""
        if self._closed:
            return []
        if self._first is None:
            for warning in self._warnings:
                self.warn(warning)
            self._first = asyncio.ensure_future(self._start_all(list(self.connections)))
        await asyncio.shield(self._first)
        due = [name for name, at in self._failed_at.items()
               if time.monotonic() - at >= self.limits.mcp_retry_s and name not in self._starts]
        for name in due:
            self._in_background(name)
        return list(self.tools.values())

    def _in_background(self, name: str) -> None:
        task = asyncio.create_task(self._start_all([name]), name=f"lace-mcp-start-{name}")
        self._starts[name] = task
        task.add_done_callback(lambda _: self._starts.pop(name, None))

    async def _start_all(self, names: list[str]) -> None:
        await asyncio.gather(*(self._start(name) for name in names))

    async def _start(self, name: str) -> None:
        connection = self.connections[name]
        await connection.start(self.limits.mcp_start_timeout_s)
        if self._closed:
            await connection.stop()
            return
        if connection.state != "ready":
            self._failed_at[name] = time.monotonic()
            self.warn(f"MCP server {name} failed to start: {connection.error}; its tools are "
                      f"left out, and it is tried again in {self.limits.mcp_retry_s:g} s")
            return
        self._failed_at.pop(name, None)
        info = connection.server_info
        if info is not None and (info.name, info.title) == BOARD_SERVER:
            await connection.stop()
            connection.state, connection.error = "failed", (
                "lace's own board (lace mcp serve): its tools are left out, since agents "
                "act on the board with their own task tools, not as the person")
            self.warn(f"MCP server {name} is {connection.error}")
            return
        self._offer(name, connection.listed)

    def _offer(self, server: str, listed: list[Any]) -> None:
        """Name the server's tools for agents and adapt their schemas."""
        self._withdraw(server)
        self.left_out[server] = []
        offered, size = 0, 0
        cut: list[str] = []
        for tool in listed:
            parameters = adapted_schema(tool.input_schema)
            if parameters is None:
                self.left_out[server].append(f"{tool.name} (its input schema is too big or too "
                                             "deeply nested to send)")
                continue
            name = mcp_tool_name(server, tool.name, self.tools)
            read_only = bool(tool.annotations and tool.annotations.read_only_hint)
            offer = ServerTool(name=name, server=server, tool=tool.name,
                               description=described(tool.description, server, tool.name),
                               parameters=parameters, read_only=read_only)
            size += len(json.dumps(offer.definition(), default=str))
            if cut or offered >= MAX_SERVER_TOOLS or size > MAX_SERVER_CHARACTERS:
                cut.append(str(tool.name))  # and every later one: the same tools every run
                continue
            self.tools[name], offered = offer, offered + 1
        for reason in self.left_out[server]:
            self.warn(f"MCP server {server}: tool {reason} is left out")
        if cut:
            shown = ", ".join(cut[:3]) + (", ..." if len(cut) > 3 else "")
            self.left_out[server].append(
                f"{len(cut)} more tools ({shown}: one server offers at most "
                f"{MAX_SERVER_TOOLS} tools and {MAX_SERVER_CHARACTERS:,} characters of "
                "definitions, which every request carries)")
            self.warn(f"MCP server {server}: {self.left_out[server][-1]} are left out")

    def _withdraw(self, server: str) -> None:
        for name in [name for name, tool in self.tools.items() if tool.server == server]:
            del self.tools[name]

    def _server_of(self, name: str) -> str | None:
        """The configured server whose tools' names begin like `name`."""
        matching = [server for server in self.connections
                    if name.startswith(mcp_tool_name(server, ""))]
        return max(matching, key=len) if matching else None

    async def find(self, name: str) -> ServerTool | None:
        """The tool named `name`, waiting first for a start of its server under way (a retry
        or a restart), so a call made meanwhile is not lost."""
        server = self._server_of(name)
        if name not in self.tools and server is not None:
            under_way = self._starts.get(server) or self._restarts.get(server)
            if under_way is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(under_way)
        return self.tools.get(name)

    def unavailable(self, name: str) -> str:
        """Why `name` is not a tool now: its server failed, or no server offers it."""
        server = self._server_of(name)
        connection = None if server is None else self.connections[server]
        if connection is not None and connection.error and "lace's own board" in \
                connection.error:
            return f"MCP server {server} is {connection.error}."
        if connection is not None and connection.state != "ready":
            return (f"MCP server {server} is not running ({connection.error or 'stopped'}); "
                    f"it is tried again within {self.limits.mcp_retry_s:g} s. Do without it "
                    "for now.")
        return f"Unknown tool {name!r}: no running MCP server offers it."

    async def call(self, tool: ServerTool, arguments: dict[str, Any]) -> ToolResult:
        """Call one tool; every failure is a tool result naming the server (never raised)."""
        where = f"MCP server {tool.server}, tool {tool.tool}"
        timeout = self.limits.mcp_call_timeout_s
        try:
            result = await self.connections[tool.server].call(tool.tool, arguments, timeout)
        except TimeoutError:
            return ToolResult.failure(ToolError(
                f"{where}: no answer within {timeout:g} s ([limits] mcp_call_timeout_s)."))
        except ServerGoneError as error:
            restarted = await self._restart(tool.server)
            return ToolResult.failure(ToolError(
                f"{where}: the server stopped during the call ({error}). "
                + ("lace restarted it; call again if the call is safe to repeat."
                   if restarted else "It is left out for now.")))
        except LaceError as error:
            return ToolResult.failure(ToolError(f"{where}: {error}"))
        text = mask(result_text(result), credential_values())
        if result.is_error:
            return ToolResult(f"{where} returned an error: {text}", is_error=True,
                              kind="McpToolError")
        return ToolResult(text)

    async def _restart(self, server: str) -> bool:
        """Restart a server that died, once (calls that saw it die together share the
        restart): one that dies again within `mcp_retry_s` of its restart is left out until
        the retry after that."""
        if server not in self._restarts:
            self._restarts[server] = asyncio.ensure_future(self._restart_once(server))
            self._restarts[server].add_done_callback(lambda _: self._restarts.pop(server, None))
        return await asyncio.shield(self._restarts[server])

    async def _restart_once(self, server: str) -> bool:
        connection = self.connections[server]
        self._withdraw(server)
        await connection.stop()
        if self._closed:
            return False
        last = self._restarted_at.get(server)
        if last is not None and time.monotonic() - last < self.limits.mcp_retry_s:
            self._failed_at[server] = time.monotonic()
            self.warn(f"MCP server {server} died again; left out, tried again in "
                      f"{self.limits.mcp_retry_s:g} s")
            return False
        self._restarted_at[server] = time.monotonic()
        self.warn(f"MCP server {server} stopped; restarting it")
        await self._start(server)
        return self.connections[server].state == "ready"

    async def stop(self) -> None:
        """Stop every server (and any start under way); nothing starts again afterwards."""
        self._closed = True
        pending = [task for task in (self._first, *self._starts.values(),
                                     *self._restarts.values()) if task is not None]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.gather(*(connection.stop() for connection in self.connections.values()))
        self.tools.clear()
