"""A scripted ACP client (the SDK's client side) that starts `lace acp` as an editor would, on
the real stdio transport, and records what lace sends it."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from asyncio.streams import FlowControlMixin
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

from tests.lace_forks import LACE, lace_popen
from tests.processes import lace_env

Choice = Callable[[Any], str | None]
"""Which permission option the editor picks for a request (None: it cancels the request)."""


@dataclass
class Editor:
    """The client side: records every update and permission request; answers permission
    requests with `choose`."""

    choose: Choice = lambda _request: "allow_once"
    updates: list[Any] = field(default_factory=list)
    asked: list[Any] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    fs: bool = False
    """It announces fs/read_text_file and fs/write_text_file."""
    buffers: dict[str, str] = field(default_factory=dict)
    """Its open files by absolute path (unsaved text the disk does not have)."""
    fs_calls: list[tuple[str, str]] = field(default_factory=list)

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **_: Any) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        self.changed.set()
        option = self.choose(tool_call)
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=option))

    async def read_text_file(self, session_id: str, path: str, **_: Any) -> Any:
        self.fs_calls.append(("read", path))
        if path not in self.buffers:
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **_: Any) -> Any:
        self.fs_calls.append(("write", path))
        self.buffers[path] = content
        return WriteTextFileResponse()

    def of_kind(self, kind: str) -> list[Any]:
        return [update for update in self.updates if update.session_update == kind]

    def text(self) -> str:
        return "".join(update.content.text for update in self.of_kind("agent_message_chunk"))

    async def until(self, holds: Callable[[], bool], timeout: float = 60) -> None:
        """Wait (with a deadline) until `holds()`; then assert it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not holds() and loop.time() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)
        assert holds()


@contextlib.asynccontextmanager
async def lace_acp(editor: Editor, home: Path, *argv: str,
                   **env: str) -> AsyncIterator[tuple[Any, Any]]:
    """`python -m lace acp *argv` on `home` (forked from the test's fork server; still its own
    process on real pipes), its stderr in `home`-stderr.log, initialized; yields the
    connection and the process. Its end is the SDK's: stdin closed, then a 2 s grace, then
    SIGTERM, then SIGKILL."""
    home.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"{home.name}-stderr.log").open("ab") as log, lace_popen(
            [*LACE, "acp", *argv], env=lace_env(home, **env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log) as process:
        try:
            reader, writer = await _pipe_streams(process)
            conn = ClientSideConnection(editor, writer, reader)
            try:
                answer = await asyncio.wait_for(conn.initialize(
                    protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=editor.fs,
                                                  write_text_file=editor.fs))),
                    60)
                assert answer.protocol_version == 1
                yield conn, process
            finally:
                await conn.close()
                writer.close()
        finally:
            await _ended(process)


async def _pipe_streams(process: subprocess.Popen[bytes],
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert process.stdin is not None and process.stdout is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), process.stdout)
    transport, protocol = await loop.connect_write_pipe(FlowControlMixin, process.stdin)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _ended(process: subprocess.Popen[bytes]) -> None:
    for stop in (None, process.terminate, process.kill):
        if stop is not None:
            stop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(process.wait, 2)
            return
    await asyncio.to_thread(process.wait)


async def prompt(conn: Any, session_id: str, text: str, timeout: float = 90) -> Any:
    return await asyncio.wait_for(conn.prompt(session_id=session_id,
                                              prompt=[text_block(text)]), timeout)
