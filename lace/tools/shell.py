"""`bash`: a command in the workspace, run without lace's credentials, its output capped while it
streams, its exit code reported; every process it started is killed when the call ends, however
it ends (returned, timed out, cancelled, or lace exiting or killed: `lace.tools.process_groups`)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
from collections import deque
from typing import ClassVar

from pydantic import Field

from lace.config import load_settings
from lace.paths import withheld_from_tools
from lace.tools.process_groups import kept, signal_group, track_group, untrack_group
from lace.tools.workspace import WorkspaceResult, WorkspaceTool

OUTPUT_CAP = 30_000
GRACE_S = 0.5
"""How long a process group has between SIGTERM and SIGKILL."""


class CappedOutput:
    """Text kept while it streams: the first and the last `cap // 2` characters, whatever the
    total, so memory stays bounded."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self.half = cap // 2
        self.head: list[str] = []
        self.head_length = 0
        self.tail: deque[str] = deque()
        self.tail_length = 0
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, data: bytes, *, final: bool = False) -> None:
        """Take more bytes (UTF-8, split anywhere); `final` flushes a cut character."""
        text = self._decoder.decode(data, final=final)
        self.total += len(text)
        room = self.half - self.head_length
        if room > 0:
            self.head.append(text[:room])
            self.head_length += len(self.head[-1])
            text = text[room:]
        if text:
            self.tail.append(text)
            self.tail_length += len(text)
            while self.tail_length - len(self.tail[0]) >= self.half:
                self.tail_length -= len(self.tail.popleft())

    def text(self) -> str:
        """Everything, or the head and the tail with how much was cut between them."""
        head, tail = "".join(self.head), "".join(self.tail)
        if self.total <= 2 * self.half:
            return head + tail
        cut = self.total - 2 * self.half
        return f"{head}\n… [{cut:,} characters cut] …\n{tail[-self.half:]}"


class _Collector(asyncio.SubprocessProtocol):
    """Feeds the command's output into a `CappedOutput` as it arrives; notes when the command
    exits and when its output closes (which a background child can hold open)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.output = CappedOutput()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.output.add(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.closed.done():
            self.output.add(b"", final=True)
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def end_group(group: int) -> None:
    """SIGTERM to the whole group, then SIGKILL to what is left after `GRACE_S`, even if this
    wait is itself cancelled."""
    try:
        if not signal_group(group, signal.SIGTERM):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GRACE_S):
                while signal_group(group, 0):
                    await asyncio.sleep(0.02)
    finally:
        signal_group(group, signal.SIGKILL)
        untrack_group(group)


def tool_environment(pass_env: list[str]) -> dict[str, str]:
    """lace's environment without credentials or database settings, except those named in
    `[tools.bash] pass_env`."""
    passed = set(pass_env)
    return {name: value for name, value in os.environ.items()
            if name in passed or not withheld_from_tools(name)}


class Bash(WorkspaceTool):
    """Run a bash command in the workspace folder. Output (stdout and stderr) is capped at
    30,000 characters; the command is killed with its process group after `timeout_s`."""

    name: ClassVar[str] = "bash"
    command: str = Field(min_length=1, max_length=20_000)
    timeout_s: float = Field(default=60, gt=0, le=600)

    async def perform(self, workspace: os.PathLike[str]) -> WorkspaceResult:
        environment = tool_environment(load_settings().tools.bash.pass_env)
        loop = asyncio.get_running_loop()
        starting = asyncio.ensure_future(loop.subprocess_exec(
            lambda: _Collector(loop), *kept(["bash", "-c", self.command]), cwd=workspace,
            env=environment, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True))
        try:  # the command may run (and start children) before the spawn returns: a cancel
            transport, collector = await asyncio.shield(starting)  # then ends its whole group
        except asyncio.CancelledError:
            started, _ = await starting
            try:
                await end_group(started.get_pid())
            finally:
                started.close()
            raise
        group = transport.get_pid()  # a new session: its leader (the keeper) names the group
        track_group(group)
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout_s):
                await collector.exited
        except TimeoutError:
            timed_out = True
        finally:
            try:
                await end_group(group)
                with contextlib.suppress(TimeoutError):  # every writer is gone: it closes
                    async with asyncio.timeout(1):
                        await asyncio.shield(collector.closed)
            finally:
                transport.close()
        text = collector.output.text().rstrip("\n")
        if timed_out:
            return WorkspaceResult(f"{text}\n[killed after {self.timeout_s:g} s: timeout]"
                                   .lstrip("\n"), is_error=True)
        code = transport.get_returncode()
        return WorkspaceResult(f"{text}\n[exit code {code}]".lstrip("\n"), is_error=code != 0)


SHELL_TOOLS: tuple[type[WorkspaceTool], ...] = (Bash,)
