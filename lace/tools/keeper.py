"""Runs one command for lace and ends the command's whole process group when lace ends, even by
SIGKILL, when no code of lace runs: on Linux the kernel sends this keeper SIGHUP when lace dies
(a parent-death signal) and the keeper kills its group. lace starts it in a new session, so the
group is the keeper, the command and every process the command starts; lace's own ending of a
call still signals that group. A process that leaves the group (`setsid`) is still found: on
Linux the keeper is a child subreaper, so what the command started stays below it, and it kills
everything below it when the command ends, when lace dies, and (what left the group only) when
lace ends the call with SIGTERM. Standard library only: lace runs this file as a script
(`python -I -S keeper.py LACE_PID COMMAND [ARG...]`, about 15 ms of CPU), because a
parent-death signal set on the command itself would not reach the children it starts."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when the thread that started it ends."""
PR_SET_CHILD_SUBREAPER = 36
"""prctl(2): orphans below this process become its children, not init's: a command that left
the group (`setsid`) is still found among them."""
MAX_SWEEPS = 1000
RESET = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP)
"""Signals the command gets back at their defaults (Python ignores the first two, and this
keeper catches the third), as `subprocess` gives them."""


def end_group(_signal: int = 0, _frame: FrameType | None = None) -> None:
    """Kill everything this keeper started, the whole group and this keeper included."""
    sweep(escaped_only=False)
    os.killpg(0, signal.SIGKILL)


def end_escaped(_signal: int = 0, _frame: FrameType | None = None) -> None:
    """lace ends the call (SIGTERM to the group, SIGKILL after a grace): what left the group
    would get neither, so it is killed now; the group has its grace."""
    sweep(escaped_only=True)


def descendants() -> list[int]:
    """Every process below this keeper (Linux's `/proc/PID/task/TID/children`; none elsewhere)."""
    found, pending = [], [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    below = [int(child) for child in children.read().split()]
            except OSError:
                continue
            below = [child for child in below if not _is_dead(child)]
            found += below
            pending += below
    return found


def _is_dead(pid: int) -> bool:
    """Whether `pid` is gone or a zombie (dead, not yet reaped: nothing to kill; the command's
    own is reaped by `main`)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def sweep(*, escaped_only: bool) -> None:
    """SIGKILL the processes below this keeper (those outside its group, or all), again until
    none is left: the orphans of a killed one come to this subreaper and are found next."""
    group = os.getpgrp()
    for _ in range(MAX_SWEEPS):
        left = [pid for pid in descendants() if not escaped_only or _group_of(pid) != group]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def die_with_parent() -> None:
    """Ask Linux for SIGHUP when lace dies, and for the orphans of what this keeper starts
    (other systems have neither: lace's exit and its ending of each call still end the
    group)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)


def main(argv: list[str]) -> int:
    lace_pid, command = int(argv[0]), argv[1:]
    if os.getpgrp() != os.getpid():  # lace starts it leading a session: never end another group
        os.setsid()
    signal.signal(signal.SIGHUP, end_group)
    signal.signal(signal.SIGTERM, end_escaped)
    die_with_parent()
    if os.getppid() != lace_pid:  # lace died before the signal was asked for
        end_group()
    try:
        pid = os.posix_spawnp(command[0], command, os.environ,
                              setsigdef=(*RESET, signal.SIGTERM))
    except OSError as error:
        print(f"lace: cannot start {command[0]}: {error.strerror}", file=sys.stderr)
        return 127
    null = os.open(os.devnull, os.O_RDWR)  # the command alone holds its pipes: their ends
    os.dup2(null, 0)                       # close when it (and what it started) is gone
    os.dup2(null, 1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    sweep(escaped_only=False)  # the call ends with the command: nothing it started stays
    if code < 0:  # killed by a signal: end the same way, so lace sees what the command saw
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
