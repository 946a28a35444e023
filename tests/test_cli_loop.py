"""A command's event loop (`lace.cli.loop.run_async`) against a Ctrl+C that comes while the loop
is being built: `asyncio.run` printed a traceback then (a half-built loop's finalizer) and left
the command's coroutine unawaited, as `lace run --workers 2` did when Ctrl+C came at its start."""

from __future__ import annotations

import subprocess
import sys

INTERRUPTED_AS_THE_LOOP_IS_BUILT = """
import asyncio, os, selectors, signal

real = selectors.DefaultSelector

def interrupting():  # the loop's constructor asks for its selector: Ctrl+C comes now
    os.kill(os.getpid(), signal.SIGINT)
    return real()

selectors.DefaultSelector = interrupting
from lace.cli.loop import run_async

async def main():
    await asyncio.sleep(30)
    return "not interrupted"

try:
    print(run_async(main))
except KeyboardInterrupt:
    print("interrupted")
"""


def test_a_ctrl_c_while_the_loop_is_built_interrupts_the_command_and_prints_no_traceback(
) -> None:
    ran = subprocess.run([sys.executable, "-c", INTERRUPTED_AS_THE_LOOP_IS_BUILT],
                         capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "interrupted\n", "")
