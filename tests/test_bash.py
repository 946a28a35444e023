"""`bash` with real processes: output capped while it streams (memory stays bounded), and every
process a call started is gone when the call returns, times out, is cancelled (its agent
stopped), or lace exits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lace.config import Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.runtime import open_runtime
from lace.store import Store
from lace.tools.registry import ToolRegistry
from lace.tools.shell import OUTPUT_CAP, Bash
from lace.tools.workspace import WorkspaceResult
from tests.scripted import ScriptedModels, reply


async def bash(workspace: Path, command: str, timeout_s: float = 60) -> WorkspaceResult:
    tool = ToolRegistry().parse("bash", {"command": command, "timeout_s": timeout_s})
    assert isinstance(tool, Bash)
    return await tool.perform(workspace)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (reaped or not, a zombie runs nothing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


async def pids_written(path: Path, count: int) -> list[int]:
    """The pids a command wrote to `path`, once it wrote `count` of them."""
    async with asyncio.timeout(10):
        while len(lines := path.read_text().split() if path.exists() else []) < count:
            await asyncio.sleep(0.02)
    return [int(line) for line in lines]


async def all_gone(pids: list[int]) -> None:
    """Wait (bounded) until none of `pids` runs; raises TimeoutError if one survives (after
    killing the survivors, so a failing test leaves nothing behind). It takes about a second;
    the bound is generous because with other tests beside it (pytest-xdist) it once took 5 s."""
    try:
        async with asyncio.timeout(30):
            while any(alive(pid) for pid in pids):
                await asyncio.sleep(0.02)
    except TimeoutError:
        for pid in filter(alive, pids):
            os.kill(pid, signal.SIGKILL)
        raise


BACKGROUND = ("sleep 300 & echo $! >> {pids}; "
              "(trap '' TERM; exec sleep 300) & echo $! >> {pids}")
"""Two background children, the second deaf to SIGTERM."""


def test_output_keeps_head_and_tail(tmp_path: Path) -> None:
    result = asyncio.run(bash(tmp_path, "echo FIRST; seq 1 100000; echo LAST"))
    assert result.text.startswith("FIRST\n1\n2\n") and "characters cut" in result.text
    assert result.text.endswith("100000\nLAST\n[exit code 0]")
    assert len(result.text) < OUTPUT_CAP + 200


def test_memory_stays_bounded_under_200_mb_of_output(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import asyncio, resource, sys
        from pathlib import Path
        from lace.tools.registry import ToolRegistry

        async def main() -> None:
            tool = ToolRegistry().parse("bash", {"command": sys.argv[1], "timeout_s": 120})
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            result = await tool.perform(Path(sys.argv[2]))
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            print(before, after, len(result.text), result.text[-40:].replace("\\n", " "))

        asyncio.run(main())
    """)
    command = "head -c 200000000 /dev/zero | tr '\\0' 'x'; echo; echo END"
    done = subprocess.run([sys.executable, "-c", script, command, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    before_kib, after_kib, length, tail = done.stdout.split(maxsplit=3)
    assert tail.strip().endswith("END [exit code 0]")
    assert int(length) < OUTPUT_CAP + 200
    grown_mib = (int(after_kib) - int(before_kib)) / 1024
    assert grown_mib < 32, f"peak RSS grew by {grown_mib:.0f} MiB for 200 MB of output"


async def test_background_children_are_gone_when_the_call_returns(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    result = await bash(tmp_path, BACKGROUND.format(pids=pid_file) + "; echo started")
    assert result.text == "started\n[exit code 0]"
    await all_gone(await pids_written(pid_file, 2))


async def test_background_children_are_gone_when_the_call_is_cancelled(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    call = asyncio.create_task(bash(tmp_path, BACKGROUND.format(pids=pid_file)
                                    + "; echo $$ >> " + str(pid_file) + "; sleep 300"))
    pids = await pids_written(pid_file, 3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await all_gone(pids)


async def test_background_children_are_gone_after_a_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    result = await bash(tmp_path, BACKGROUND.format(pids=pid_file) + "; sleep 300",
                        timeout_s=1)
    assert result.is_error and "timeout" in result.text
    await all_gone(await pids_written(pid_file, 2))


LEAVING = {
    "sys.exit": "sys.exit(0)",
    "the lace script": "import lace.cli, lace.__main__ as script; lace.cli.main = lambda: 0; "
                       "script.entry()",
}
"""How a process leaves: by Python's exit (`atexit` runs), or as `lace` does (`os._exit`)."""


@pytest.mark.parametrize("leaving", LEAVING)
def test_background_children_are_gone_when_lace_exits_mid_call(tmp_path: Path,
                                                               leaving: str) -> None:
    """The call runs on a loop in a daemon thread (as a tool thread stuck at exit would); the
    process exits under it, so no `finally` of the call runs."""
    pid_file = tmp_path / "pids"
    script = textwrap.dedent("""
        import asyncio, sys, threading, time
        from pathlib import Path
        from lace.tools import process_groups
        from lace.tools.registry import ToolRegistry

        tool = ToolRegistry().parse("bash", {"command": sys.argv[1]})
        threading.Thread(target=asyncio.run, args=(tool.perform(Path(sys.argv[2])),),
                         daemon=True).start()
        pids = Path(sys.argv[3])
        while len(pids.read_text().split() if pids.exists() else []) < 3:
            time.sleep(0.02)
        while not process_groups._live_groups:  # the call's thread noted its group (under
            time.sleep(0.02)                   # load it may lag behind the command's output)
    """) + LEAVING[leaving]
    command = BACKGROUND.format(pids=pid_file) + f"; echo $$ >> {pid_file}; sleep 300"
    done = subprocess.run([sys.executable, "-c", script, command, str(tmp_path), str(pid_file)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    pids = [int(pid) for pid in pid_file.read_text().split()]
    asyncio.run(all_gone(pids))


async def test_an_agent_stopped_mid_call_leaves_no_process(store: Store, models: ScriptedModels,
                                                           tmp_path: Path) -> None:
    """The runtime's own path: stopping the agent cancels its turn, and with it the call."""
    pid_file = tmp_path / "pids"
    command = BACKGROUND.format(pids=pid_file) + f"; echo $$ >> {pid_file}; sleep 300"
    models.on("root", lambda messages: reply(None, ("bash", {"command": command})))
    settings = Settings(tools=ToolSettings(policy={"bash": "allow"}))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                           workspace=tmp_path)
    try:
        root = await runtime.start_session("go", "scripted/root")
        pids = await pids_written(pid_file, 3)
        await runtime.stop_agent(root.id, "enough")
        await all_gone(pids)
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_call_cancelled_while_its_command_starts_leaves_no_process(
        tmp_path: Path) -> None:
    """Cancelled at every early moment, while `bash` (under its keeper) is still being started
    among them, and just after it started a child: the command may already run its children
    before lace holds its process (a stop that lands then left them running)."""
    pid_file = tmp_path / "pids"
    command = f"sleep 300 & echo $! >> {pid_file}; sleep 300"
    for attempt in range(16):
        call = asyncio.create_task(Bash(command=command).perform(tmp_path))
        for _ in range(attempt % 8):
            await asyncio.sleep(0)
        if attempt >= 12:  # the keeper takes a few ms to start bash: wait for its child
            await pids_written(pid_file, attempt - 11)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(30):  # before the fix, asyncio's own cleanup hung here
                await call
    await asyncio.sleep(0.5)  # a command cancelled late may still be writing its pid
    pids = [int(line) for line in pid_file.read_text().split()] if pid_file.exists() else []
    assert pids, "no command ever started: the test did not reach the window it is for"
    await all_gone(pids)
