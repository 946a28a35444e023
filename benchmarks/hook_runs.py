"""The cost of one hook run: lace's way (`sh -c` under its keeper, in a process group of its
own, stdin written, both streams read and capped, the group ended) against the floor of a bare
`sh -c` started by asyncio with the same pipes; and an event's hooks run as the tool path runs
them, for a tool the matcher names and for one it does not (with no hooks configured at all,
the tool path builds and runs nothing).

    python -m benchmarks.hook_runs [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchmarks.common import percentile, table
from lace.config.hooks import HookCommand, HookMatcher
from lace.runtime.hook_process import run_hook
from lace.runtime.hooks import HookRunner


async def bare_sh(command: str, stdin: bytes) -> None:
    """The floor: `sh -c` with the same pipes, no keeper, no group to end."""
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    await process.communicate(stdin)


async def timed(runs: int, work: Callable[[], Awaitable[object]]) -> list[float]:
    """Milliseconds of each of `runs` runs, after one warm-up."""
    await work()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        await work()
        times.append((time.perf_counter() - began) * 1000)
    return times


async def main(runs: int) -> None:
    stdin = b'{"hook_event_name": "PreToolUse", "tool_name": "bash"}'
    command = "cat > /dev/null"
    folder = Path(tempfile.mkdtemp())
    environment = dict(os.environ)
    runner = HookRunner({"PreToolUse": [
        HookMatcher(matcher="bash", hooks=[HookCommand(command=command)])]}, folder)
    cases = {
        "bare sh -c (asyncio, same pipes)": lambda: bare_sh(command, stdin),
        "lace run_hook (keeper, group, caps)": lambda: run_hook(
            command, stdin, cwd=folder, environment=environment, timeout_s=60),
        "lace PreToolUse, one matching hook": lambda: runner.run(
            "PreToolUse", "lace_20261128_abcdef", {"tool_name": "bash"}, subject="bash"),
        "lace PreToolUse, no hook matches": lambda: runner.run(
            "PreToolUse", "lace_20261128_abcdef", {"tool_name": "file_read"},
            subject="file_read"),
    }
    rows = []
    for name, work in cases.items():
        times = await timed(runs, work)
        rows.append((name, f"{percentile(times, 0.5):.2f}", f"{percentile(times, 0.95):.2f}"))
    print(f"{runs} runs each, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(table(["case", "p50 ms", "p95 ms"], rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    asyncio.run(main(parser.parse_args().runs))
