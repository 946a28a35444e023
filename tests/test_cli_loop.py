"""A command's event loop (`lace.cli.loop.run_async`) against a Ctrl+C or SIGTERM that comes
while the loop is being built: `asyncio.run` printed a traceback then (a half-built loop's
finalizer) and left the command's coroutine unawaited, as `lace run --workers 2` and its
workers did when stopped at their start; and against a signal another thread takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

INTERRUPTED_AS_THE_LOOP_IS_BUILT = """
import asyncio, os, selectors, signal, sys

signum = getattr(signal, sys.argv[1])
if signum == signal.SIGTERM:  # as a forked worker waiting for its session has it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
real = selectors.DefaultSelector

def interrupting():  # the loop's constructor asks for its selector: the signal comes now
    os.kill(os.getpid(), signum)
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
except SystemExit as stopped:
    print(f"stopped {stopped.code}")
"""


@pytest.mark.parametrize(("signame", "told"), [("SIGINT", "interrupted"), ("SIGTERM", "stopped 3")])
def test_a_stopping_signal_while_the_loop_is_built_stops_the_command_and_prints_no_traceback(
        signame: str, told: str) -> None:
    """Ctrl+C, or SIGTERM where a handler ends the process (a forked worker's before it
    serves: it raised SystemExit inside the loop's constructor, as `lace run --workers` stopped
    it), waits until the loop is whole and the command runs."""
    ran = subprocess.run([sys.executable, "-c", INTERRUPTED_AS_THE_LOOP_IS_BUILT, signame],
                         capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, f"{told}\n", "")


SIGNALLED_ON_ANOTHER_THREAD = """
import asyncio, signal, threading, time
from lace.cli.loop import once_on, run_async

async def main():
    once_on([signal.SIGTERM], asyncio.current_task().cancel)
    # the loop waits in its selector with nothing due for 60 s; the signal is taken by
    # another thread (as `kill` of a thread's id, htop's on a thread's row, delivers it)
    def on_this_thread():  # once the loop waits; then it goes on with its own work
        time.sleep(1)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        time.sleep(60)

    threading.Thread(target=on_this_thread, daemon=True).start()
    started = time.monotonic()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:  # at once, or only as the loop woke for its sleep's end
        return "stopped" if time.monotonic() - started < 30 else "stopped as the sleep ended"
    return "slept on"

print(run_async(main))
"""


def test_a_stopping_signal_taken_by_another_thread_wakes_the_loop() -> None:
    """A handler of Python's own runs on the main thread only: unless the signal's wakeup
    descriptor wakes the loop, it waits in its selector until something else is due."""
    ran = subprocess.run([sys.executable, "-c", SIGNALLED_ON_ANOTHER_THREAD],
                         capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "stopped\n", "")


SIGNALLED_DURING_A_READ_IN_C = """
import asyncio, ctypes, os, signal, threading, time
from lace.cli.loop import once_on, run_async

libc = ctypes.CDLL(None, use_errno=True)

async def main():
    once_on([signal.SIGTERM], asyncio.current_task().cancel)
    reading, writing = os.pipe()
    got = []

    def read_in_c():  # as a library's C code reads, in a thread of its own
        buffer = ctypes.create_string_buffer(1)
        got.append((libc.read(reading, buffer, 1), ctypes.get_errno()))

    thread = threading.Thread(target=read_in_c)
    thread.start()
    time.sleep(0.5)  # it waits in read(2)
    signal.pthread_kill(thread.ident, signal.SIGTERM)
    time.sleep(0.5)
    os.write(writing, b"x")
    thread.join()
    return got

print(run_async(main))
"""


def test_a_stopping_signal_does_not_cut_a_system_call_of_another_thread() -> None:
    """As asyncio's own handlers do (SA_RESTART): the read goes on and gets its byte,
    instead of failing with EINTR in code that may not try again."""
    ran = subprocess.run([sys.executable, "-c", SIGNALLED_DURING_A_READ_IN_C],
                         capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "[(1, 0)]\n", "")
