"""The worker processes `lace worker --processes N` forks after its one start-up, and the
process that forked them: it forwards SIGINT and SIGTERM to them, names each that fails as it
ends, and exits with the first failure's code; each of them stops when it dies (on Linux)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when the process that forked it ends."""


def fork_workers(count: int) -> list[int]:
    """Fork `count` worker processes that share this one's imports (the model SDK and the
    database driver: a second of a core per process, a core the agents could use): their pids
    in this process, the supervisor, and [] in each worker. This process has no thread and no
    connection open (its board is closed), so a fork is safe; SIGINT and SIGTERM are held until
    each side has its own handlers."""
    stopping = {signal.SIGINT, signal.SIGTERM}
    children: list[int] = []
    supervisor = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    try:
        for _ in range(count):
            if (pid := os.fork()) == 0:
                _stops_with(supervisor)
                return []  # a worker, with the handlers it had: stopped cleanly while it starts
            children.append(pid)
        for signum in stopping:
            signal.signal(signum, lambda _signum, _frame: _stop(children))
        return children
    except OSError:  # no more processes: stop those already forked
        _stop(children)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)


def _stops_with(supervisor: int) -> None:
    """On Linux a forked worker gets SIGTERM when its supervisor dies, even killed (elsewhere
    the end of stdin stops those `lace run` started, and a person the others)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # it died before this worker asked
        raise SystemExit(0)


def _stop(children: list[int]) -> None:
    """Ask each forked worker to stop (SIGTERM: its running turns become interrupted)."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def supervise(children: list[int]) -> int:
    """Wait for every forked worker, naming each that fails as it ends; the exit code is the
    first failure's (128 + N for a worker killed by signal N), else 0."""
    code = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # none left to wait for (reaped elsewhere): nothing to name
            break
        if pid not in children:
            continue
        children.remove(pid)  # no signal for a pid the system may give another process
        ended = os.waitstatus_to_exitcode(status)
        if ended:
            print(f"lace: worker pid {pid} ended with exit code {ended}", file=sys.stderr)
            code = code or (ended if ended > 0 else 128 - ended)
    return code
