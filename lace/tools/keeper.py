"""Runs one command for lace and ends the command's whole process group when lace ends, even by
SIGKILL, when no code of lace runs: on Linux the kernel sends this keeper SIGHUP when lace dies
(a parent-death signal) and the keeper kills its group. lace starts it in a new session, so the
group is the keeper, the command and every process the command starts; lace's own ending of a
call still signals that group. Standard library only: lace runs this file as a script
(`python -I -S keeper.py LACE_PID COMMAND [ARG...]`, about 15 ms of CPU), because a
parent-death signal set on the command itself would not reach the children it starts."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when the thread that started it ends."""
RESET = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP)
"""Signals the command gets back at their defaults (Python ignores the first two, and this
keeper catches the third), as `subprocess` gives them."""


def end_group(_signal: int = 0, _frame: FrameType | None = None) -> None:
    """Kill the whole group, this keeper included."""
    os.killpg(0, signal.SIGKILL)


def die_with_parent() -> None:
    """Ask Linux for SIGHUP when lace dies (other systems have no such signal: lace's exit and
    its ending of each call still end the group)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGHUP)


def main(argv: list[str]) -> int:
    lace_pid, command = int(argv[0]), argv[1:]
    if os.getpgrp() != os.getpid():  # lace starts it leading a session: never end another group
        os.setsid()
    signal.signal(signal.SIGHUP, end_group)
    die_with_parent()
    if os.getppid() != lace_pid:  # lace died before the signal was asked for
        end_group()
    try:
        pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=RESET)
    except OSError as error:
        print(f"lace: cannot start {command[0]}: {error.strerror}", file=sys.stderr)
        return 127
    null = os.open(os.devnull, os.O_RDWR)  # the command alone holds its pipes: their ends
    os.dup2(null, 0)                       # close when it (and what it started) is gone
    os.dup2(null, 1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way, so lace sees what the command saw
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
