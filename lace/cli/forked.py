"""The worker processes `lace worker --processes N` forks after its one start-up, and the
process that forked them: it forwards SIGINT and SIGTERM to them, names each that fails as it
ends, and exits with the first failure's code; each of them stops when it dies (on Linux).
And those `lace run --workers N` forks from itself (`fork_for_run`)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from typing import NamedTuple

STDIN, STDOUT, STDERR = 0, 1, 2
"""The descriptors a worker `lace run` forks reads its session from, writes nothing to, and
says what it does on: the only ones it keeps."""
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when the process that forked it ends."""
STOPPING = frozenset({signal.SIGINT, signal.SIGTERM})
"""The signals that stop a worker cleanly (exit code 0), whenever they come: a person's
Ctrl+C, or someone's `kill` (-INT as -TERM)."""


def stop_cleanly_before_serving() -> None:
    """Until a worker serves (its loop then takes them), `STOPPING` signals stop it at once
    with exit code 0: it holds nothing yet."""
    for signum in STOPPING:
        signal.signal(signum, _stopped_before_serving)


def _stopped_before_serving(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def fork_workers(count: int) -> list[int]:
    """Fork `count` worker processes that share this one's imports (the model SDK and the
    database driver: a second of a core per process, a core the agents could use): their pids
    in this process, the supervisor, and [] in each worker. This process has no thread and no
    connection open (its board is closed), so a fork is safe; SIGINT and SIGTERM are held until
    each side has its own handlers."""
    stopping = set(STOPPING)
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


class RunWorker(NamedTuple):
    """A worker `lace run --workers` forked: its pid, and the write end of its stdin."""

    pid: int
    stdin: int


def fork_for_run(count: int) -> list[RunWorker] | None:
    """Fork the `count` workers of `lace run --workers` from the run itself, once it imported
    what they need (the model SDK, the database driver: the second of a core each `lace
    worker` process spent on them): the workers in the run, None in each worker. Each gets a
    process group of its own (Ctrl+C is the run's), its stdin a pipe from the run (the
    session's id, then its end when the run ends), and /dev/null as its stdout. The run has
    no other thread yet, and no connection open, so a fork is safe."""
    if threading.active_count() > 1:
        raise RuntimeError("lace forks its workers before it starts a thread")
    stopping = set(STOPPING)
    pipes = [os.pipe() for _ in range(count)]
    run = os.getpid()
    forked: list[RunWorker] = []
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    try:
        for read, write in pipes:
            if (pid := os.fork()) == 0:
                _become_run_worker(read, pipes, run, stopping)
                return None
            forked.append(RunWorker(pid, write))
    except OSError:  # no more processes: stop those already forked
        _stop([worker.pid for worker in forked])
        raise
    finally:
        if os.getpid() == run:
            for read, write in pipes:
                os.close(read)
                if write not in {worker.stdin for worker in forked}:
                    os.close(write)
            _unblock_or_end(stopping, forked)
    return forked


def _unblock_or_end(stopping: set[signal.Signals], forked: list[RunWorker]) -> None:
    """Let the signals held while the run forked arrive; should one end the run (Ctrl+C:
    KeyboardInterrupt), end every worker first: none has a session, nor anything to finish."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
    except BaseException:
        for worker in forked:
            os.close(worker.stdin)
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker.pid, 0)
        raise


def _become_run_worker(stdin: int, pipes: list[tuple[int, int]], run: int,
                       stopping: set[signal.Signals]) -> None:
    """In a worker the run just forked: its process group, stdin, stdout and stderr, and no
    other descriptor: no end of the other workers' pipes (each must see its own end when the
    run ends), none the run inherited (a lock file, the write end of a pipe someone waits on
    for its end: the run's alone, as a child it execs would not get them); the run opened
    nothing else before it forked. Then the `stopping` signals the fork held, which stop it
    cleanly from then on (not as they would stop the run: SIGINT is not Ctrl+C here, the
    worker being in a process group of its own). It never goes back into the run's code: a
    failure here, or the run already dead, ends it."""
    try:
        os.setpgid(0, 0)
        if stdin != STDIN:  # by number: the run's own may be closed (sys.stdin None, `<&-`)
            os.dup2(stdin, STDIN)
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != STDOUT:  # or closed (`>&-`), where an end of a pipe may sit now
            os.dup2(devnull, STDOUT)
        if STDERR in {end for ends in pipes for end in ends}:  # the run had none (`2>&-`)
            os.dup2(devnull, STDERR)
        os.closerange(STDERR + 1, _descriptors_at_most())
        _stops_with(run)
        stop_cleanly_before_serving()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
    except SystemExit:
        os._exit(0)
    except BaseException:
        os._exit(1)


def _descriptors_at_most() -> int:
    """One more than the highest descriptor this process may have open (its limit)."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = -1
    return limit if limit > STDERR else 256  # what subprocess assumes when it cannot tell


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
