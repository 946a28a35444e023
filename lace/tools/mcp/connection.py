"""One MCP server's connection: an owner task holds the SDK's client open (so its task group is
entered and left in one task) from start to stop; calls come from any agent's task."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from lace.config import McpServer
from lace.core.errors import LaceError
from lace.tools.mcp.stderr_log import StderrLog
from lace.tools.process_groups import kept

State = Literal["stopped", "starting", "ready", "failed"]
STOP_GRACE_S = 10.0
"""Longest wait for the SDK to stop a server (it closes stdin, waits 2 s, then signals its
process group)."""
MAX_PAGES = 50
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
MESSAGE_TOO_BIG = -32099
"""The JSON-RPC error code of the answer lace puts in place of a message past the limit."""
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The longest message read from a server: an image of a few megabytes still arrives (and is
described, not shown); reading one costs lace a few times its size in memory."""


class ServerGoneError(LaceError):
    """The server stopped (its process died, or its connection closed) during a call."""


def first_cause(error: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio wraps errors of task groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def describe_failure(error: BaseException) -> str:
    """A start failure in one line: `command not found`, the HTTP status, the SDK's message."""
    cause = first_cause(error)
    if isinstance(cause, FileNotFoundError):
        return f"command not found: {cause.filename}"
    text = " ".join(str(cause).split()) or type(cause).__name__
    return text[:300]


def refuse_missing(command: str, cwd: str | None, env: Mapping[str, str]) -> None:
    """FileNotFoundError for a command that is not there, as starting it directly would raise
    (the keeper that starts it could only say so in the server's log)."""
    if "/" in command:
        found = shutil.which(os.path.join(cwd or ".", command))
    else:
        found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


@contextlib.asynccontextmanager
async def _stdio_transport(parameters: Any, log: StderrLog) -> AsyncIterator[Any]:
    """The server started over stdio with its stderr going to its log, its stdout read with a
    limit."""
    from lace.tools.mcp.stdio import capped_stdio

    try:
        async with capped_stdio(parameters, errlog=log.writer) as streams:
            log.started()
            yield streams
    finally:
        log.started()


class Connection:
    """A configured server, started and stopped by `McpServers`."""

    def __init__(self, name: str, config: McpServer) -> None:
        self.name, self.config = name, config
        self.state: State = "stopped"
        self.error: str | None = None
        self.listed: list[Any] = []
        """The server's tools (`mcp_types.Tool`) as it listed them when it started."""
        self.server_info: Any = None
        """What the server said it is (`Implementation`: name, title, version)."""
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._scope: Any = None
        self._stop = asyncio.Event()

    def _transport(self) -> Any:
        if self.config.url is not None:
            from lace.tools.mcp.http import capped_http

            return capped_http(self.config.url, self.config.headers)
        from mcp.client.stdio import StdioServerParameters, get_default_environment

        assert self.config.command is not None
        command = [self.config.command, *self.config.args]
        refuse_missing(command[0], self.config.cwd, get_default_environment() | self.config.env)
        keeper, *args = kept(command)  # the SDK starts it in a session of its own
        parameters = StdioServerParameters(command=keeper, args=args,
                                           env=dict(self.config.env), cwd=self.config.cwd)
        return _stdio_transport(parameters, StderrLog(self.name))

    async def _own(self, ready: asyncio.Future[list[Any]]) -> None:
        """Hold the client open from start to stop; report the tools listed, or the failure."""
        import anyio
        from mcp import Client

        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with Client(self._transport()) as client:
                    tools: list[Any] = []
                    cursor = None
                    for _ in range(MAX_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools += page.tools
                        cursor = page.next_cursor
                        if cursor is None:
                            break
                    self._client, self.server_info = client, client.server_info
                    ready.set_result(tools)
                    await self._stop.wait()
        except Exception as error:
            if not ready.done():
                ready.set_exception(error)
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(ServerGoneError("stopped while starting"))

    async def start(self, timeout: float) -> None:
        """Start the server and list its tools; on failure or timeout it is stopped and
        `state` is failed, with `error` saying why."""
        if self.state in ("ready", "starting"):
            return
        self.state, self.error, self._stop = "starting", None, asyncio.Event()
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"lace-mcp-{self.name}")
        done, _ = await asyncio.wait({ready}, timeout=timeout)
        if not done:
            await self.stop()
            self.state, self.error = "failed", (f"did not start within {timeout:g} s ([limits] "
                                                "mcp_start_timeout_s)")
        elif ready.exception() is not None:
            error = ready.exception()
            assert error is not None
            await self.stop()
            self.state, self.error = "failed", describe_failure(error)
        else:
            self.listed, self.state = ready.result(), "ready"

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The server's `CallToolResult`; ServerGoneError when the server went away, TimeoutError
        after `timeout` seconds, LaceError for any other protocol failure."""
        from mcp.shared.exceptions import MCPError

        client = self._client
        if client is None or self.state != "ready":
            raise ServerGoneError(f"it is {self.state}" + (f": {self.error}" if self.error else ""))
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as error:
            if error.code == REQUEST_TIMEOUT:
                raise TimeoutError from None
            if error.code == MESSAGE_TOO_BIG:
                raise LaceError(error.message) from None
            if error.code == CONNECTION_CLOSED:
                self.state, self.error = "failed", "its connection closed"
                raise ServerGoneError(error.message) from None
            raise LaceError(f"protocol error {error.code}: {error.message}") from None

    async def stop(self) -> None:
        """Stop the server (the SDK ends a stdio server's process group) and wait for it."""
        owner, self._owner = self._owner, None
        self._stop.set()
        if self._scope is not None and self._client is None:  # still starting: cut it short
            self._scope.cancel()
        if owner is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(owner), STOP_GRACE_S)
        self._scope, self.state = None, "stopped"
