"""`bash`: a command in the workspace, output capped, exit code reported, and killed with its
whole process group at the timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from lace.tools.workspace import WorkspaceResult, WorkspaceTool

OUTPUT_CAP = 30_000


def capped(output: str) -> str:
    """Long output keeps its head and its tail."""
    if len(output) <= OUTPUT_CAP:
        return output
    half = OUTPUT_CAP // 2
    return (f"{output[:half]}\n… [{len(output) - OUTPUT_CAP:,} characters cut] …\n"
            f"{output[-half:]}")


class Bash(WorkspaceTool):
    """Run a bash command in the workspace folder. Output (stdout and stderr) is capped at
    30,000 characters; the command is killed with its process group after `timeout_s`."""

    name: ClassVar[str] = "bash"
    command: str = Field(min_length=1, max_length=20_000)
    timeout_s: float = Field(default=60, gt=0, le=600)

    async def perform(self, workspace: Path) -> WorkspaceResult:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", self.command, cwd=workspace, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        chunks: list[bytes] = []

        async def pump() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(65536):
                chunks.append(chunk)

        reader = asyncio.create_task(pump())
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout_s):
                await process.wait()
        except TimeoutError:
            timed_out = True
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await reader
            reader.cancel()
        text = capped(b"".join(chunks).decode(errors="replace")).rstrip("\n")
        if timed_out:
            return WorkspaceResult(f"{text}\n[killed after {self.timeout_s:g} s: timeout]"
                                   .lstrip("\n"), is_error=True)
        return WorkspaceResult(f"{text}\n[exit code {process.returncode}]".lstrip("\n"),
                               is_error=process.returncode != 0)


SHELL_TOOLS: tuple[type[WorkspaceTool], ...] = (Bash,)
