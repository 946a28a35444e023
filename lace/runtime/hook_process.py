"""One hook command run: `sh -c COMMAND` under lace's keeper in a process group of its own, the
event's JSON on stdin, lace's environment without credentials (as for `bash`), its stdout and
stderr read as they come and capped, and the whole group killed past its timeout; whatever the
command does, this returns (a timed-out or crashed hook is an outcome, never an exception)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from lace.tools.process_groups import kept, track_group
from lace.tools.shell import end_group

OUTPUT_CAP = 100_000
"""Bytes kept of a hook's stdout, and of its stderr; the rest is read and dropped."""
DRAIN_S = 1.0
"""How long the output may take to close once the group is ended."""


@dataclass(frozen=True)
class HookRun:
    """What one command did: its exit code (None when killed past its timeout or when it
    could not start), its output (capped) and whether it was cut."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


class _Capped:
    def __init__(self) -> None:
        self.data = bytearray()
        self.truncated = False

    async def read_all(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = OUTPUT_CAP - len(self.data)
            self.data += chunk[:max(room, 0)]
            self.truncated = self.truncated or len(chunk) > room

    def text(self) -> str:
        return self.data.decode(errors="replace")


async def run_hook(command: str, stdin: bytes, *, cwd: Path, environment: dict[str, str],
                   timeout_s: float) -> HookRun:
    """Run `command` once; see the module's docstring."""
    try:
        process = await asyncio.create_subprocess_exec(
            *kept(["sh", "-c", command]), cwd=cwd, env=environment,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as error:
        return HookRun(None, "", f"cannot start the hook: {error}")
    group = process.pid
    track_group(group)
    out, err = _Capped(), _Capped()
    assert process.stdout is not None and process.stderr is not None
    readers = asyncio.gather(out.read_all(process.stdout), err.read_all(process.stderr))
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await _feed(process, stdin)
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        await end_group(group)
        with contextlib.suppress(TimeoutError, OSError):  # every writer is gone: they close
            async with asyncio.timeout(DRAIN_S):
                await asyncio.shield(readers)
        if not readers.done():
            readers.cancel()
        with contextlib.suppress(ProcessLookupError, TimeoutError):
            async with asyncio.timeout(DRAIN_S):
                await process.wait()
    return HookRun(None if timed_out else process.returncode, out.text(), err.text(),
                   timed_out=timed_out, truncated=out.truncated or err.truncated)


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    """Write the event to the hook's stdin and close it; a hook that never reads it is fine."""
    assert process.stdin is not None
    try:
        process.stdin.write(data)
        await process.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        process.stdin.close()
