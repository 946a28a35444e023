"""`lace worker`: a process that runs the agents of every session of the database (or of the
named ones) until SIGINT or SIGTERM; and the workers `lace run --workers N` starts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import NoReturn

from lace.cli.board import board_of
from lace.cli.forked import (
    STDIN,
    STOPPING,
    RunWorker,
    fork_for_run,
    fork_workers,
    stop_cleanly_before_serving,
    supervise,
)
from lace.cli.invocation import runtime_settings, workspace_of
from lace.cli.loop import once_on, run_async
from lace.cli.run import model_client, new_runtime
from lace.config import Settings
from lace.core.errors import LaceError
from lace.runtime.board import Board
from lace.runtime.databases import load_driver, when_reachable
from lace.runtime.public import DaemonThreads, GaveUpError

WATCH_S = 0.5
"""How often the run looks for a worker that ended (a waitpid each), to name it then."""
GRACE_S = 10.0
"""How long a worker has to stop after SIGTERM before it is killed: it takes milliseconds, but
seconds on a swamped machine, and a killed worker leaves its agents held until its lease runs
out."""


def worker_command(args: argparse.Namespace) -> int:
    """Check the sessions named, then serve until a signal (with --for-run, as started by
    `lace run --workers`: the session stdin's first line names, until the end of stdin)."""
    settings = runtime_settings(args)
    workspace_of(args)
    stop_cleanly_before_serving()  # while it waits for its session or its database server
    if args.processes > 1 or args.for_run:  # started before it serves: import meanwhile
        model_client().warm_up(litellm_too=False)
        load_driver(getattr(args, "db", None))
    if args.for_run:
        args.sessions = [_session_of_the_run()]
    board, roots = _board_and_sessions(args)
    if args.processes > 1:  # checked once, here; the workers fork with no connection open
        board.close()
        children = fork_workers(args.processes)
        if children:
            return supervise(children)
        board, roots = _board_and_sessions(args)
    return run_async(lambda: _serve(args, board, settings, roots))


def _board_and_sessions(args: argparse.Namespace) -> tuple[Board, list[str]]:
    """The board, once its server answers, and the sessions named (NotFoundError for one it
    does not hold)."""
    board = when_reachable(lambda: board_of(args, create=True), getattr(args, "db", None))
    try:
        return board, [board.session(root_id).id for root_id in args.sessions or []]
    except BaseException:
        board.close()
        raise


MAX_SESSION_LINE = 256


def _session_of_the_run() -> str:
    """The first line of stdin: the id of the session the run that started this worker has
    begun (stdin is its pipe). Read byte by byte, so that what follows, the pipe's end when the
    run ends, is left for every worker to see. The end before a line: the run ended first."""
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_SESSION_LINE:
        byte = os.read(STDIN, 1)
        if not byte:
            raise SystemExit(0)
        line += byte
    session = line.decode(errors="replace").strip()
    if not session:  # Board.session("") is the latest session: name none rather than that
        raise LaceError("lace worker --for-run reads a session id on its first line of stdin")
    return session


async def _serve(args: argparse.Namespace, board: Board, settings: Settings,
                 roots: list[str]) -> int:
    from lace.runtime import Sharing

    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())  # a stuck tool thread cannot hold the exit
    main = asyncio.current_task()
    if main is None:
        raise RuntimeError("lace worker runs as asyncio's main task")
    signalled = threading.Event()  # at once: the loop waits while the registration retries
    stop = once_on(STOPPING, main.cancel, came=signalled)
    if args.for_run:
        def read_stdin() -> None:
            if not os.read(STDIN, 4096):  # the run that started it has ended
                loop.remove_reader(STDIN)
                stop()

        loop.add_reader(STDIN, read_stdin)
    try:
        client = model_client()  # its SDK imported before this process takes agents
        await asyncio.to_thread(client.warm_up, litellm_too=False)
        try:
            runtime = new_runtime(args, board, settings, client, Sharing(
                feed=board.change_feed(), share_work=True, sessions=frozenset(roots),
                serve_all=not roots, max_agents=args.max_agents), stopping=signalled.is_set)
        except GaveUpError:  # stopped waiting for the server, as the signal asked
            return 0
        try:
            print(f"lace worker {runtime.process_id[:8]} (pid {os.getpid()}) runs the agents "
                  f"of {', '.join(roots) or 'every session'}", file=sys.stderr)
            await runtime.serve()
        finally:
            runtime.close()
    except asyncio.CancelledError:  # SIGINT or SIGTERM: stopped cleanly
        return 0
    return 0


class Workers:
    """The workers of one `lace run --workers N`, forked from the run first thing, once it
    imported what they need, so that their start-up overlaps the run's and costs no imports of
    their own (`fork_for_run`); each serves the session the run names on its stdin. They end
    with the run however it ends: stopped by it (SIGTERM, then SIGKILL after GRACE_S), or,
    should the run be killed, at the end of their stdin (and, on Linux, by the signal its
    death sends them)."""

    def __init__(self) -> None:
        self.processes: list[RunWorker] = []
        self._codes: dict[int, int] = {}  # the exit code of each worker reaped
        self._named: set[int] = set()  # the failures named already
        self._watching: asyncio.Task[None] | None = None
        self.ended_alone: list[int] | None = None
        """The pids of those that had ended when the run first asked them to stop: the
        failures to name (one the run's own SIGTERM ended, however it ended, is not one)."""

    def start(self, args: argparse.Namespace, database_url: str, count: int) -> None:
        """Fork `count` workers, with the run's workspace and tool flags (and its environment
        and folder, so its settings, and the database in LACE_DB: a URL never goes on a
        command line); they wait for `serve`."""
        argv = ["worker", "--workspace", str(workspace_of(args)), "--for-run",
                *(["--yes"] if args.yes else []), *(["--read-only"] if args.read_only else [])]
        model_client().warm_up(litellm_too=False)
        load_driver(database_url)
        forked = fork_for_run(count)
        if forked is None:
            os.environ["LACE_DB"] = database_url
            _serve_then_exit(argv)
        self.processes = forked

    def serve(self, root_id: str) -> None:
        """Name the session to the workers, then reap and name each that fails as it ends,
        until `stop` (in the run's event loop). Ctrl+Z stops them with the run from before
        any of them serves (a worker may be serving before this process runs its next line)."""
        if not self.processes:
            return
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTSTP, self._suspend_together)
        for process in self.processes:
            with contextlib.suppress(OSError):  # it ended: its pipe has no reader
                os.write(process.stdin, f"{root_id}\n".encode())
        self._watching = loop.create_task(self._name_as_they_end(), name="lace-run-workers")

    def _suspend_together(self) -> None:
        """Ctrl+Z: the workers, in process groups of their own, stop with the run, and go on
        when it does (`fg`), instead of calling models meanwhile. The run stops itself as the
        terminal would have (SIGTSTP's own action, sent to this thread: it stops before
        anything after it runs)."""
        loop = asyncio.get_running_loop()
        running = self._reap()
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        loop.remove_signal_handler(signal.SIGTSTP)
        try:
            signal.pthread_kill(threading.get_ident(), signal.SIGTSTP)
        finally:
            loop.add_signal_handler(signal.SIGTSTP, self._suspend_together)
            for pid in running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    async def _name_as_they_end(self) -> None:
        while self._reap():
            self._name_failures(list(self._codes))
            await asyncio.sleep(WATCH_S)
        self._name_failures(list(self._codes))

    def _name_failures(self, pids: list[int]) -> None:
        """One line on stderr for each of `pids` that failed, unless named already."""
        for pid in pids:
            if self._codes[pid] != 0 and pid not in self._named:
                self._named.add(pid)
                print(f"lace: worker pid {pid} ended with exit code {self._codes[pid]}",
                      file=sys.stderr)

    def abandon(self) -> None:
        """A run that ends before its session: the workers, given no session, are stopped at
        once (SIGTERM, and the end of their stdin); waited for (killed after GRACE_S)."""
        self._close_stdin()
        self.terminate()
        self._wait(GRACE_S)
        self.processes.clear()

    def terminate(self) -> None:
        """Ask every worker still running to stop (its running turns become interrupted):
        one that fails from now on is not named (the run stopped it)."""
        if self._watching is not None:
            self._watching.cancel()
        self._reap()
        if self.ended_alone is None:
            self.ended_alone = list(self._codes)
        for process in self.processes:
            if process.pid not in self._codes:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    async def stop(self) -> None:
        """Stop every worker and wait for it; kill those still running after GRACE_S; name
        those that had failed before (once: a run stops them before it reports, and again as
        it leaves)."""
        if not self.processes:
            return
        self.terminate()
        deadline = time.monotonic() + GRACE_S
        while self._reap() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._wait(0)
        self._close_stdin()
        self._name_failures(self.ended_alone or [])
        self.processes.clear()

    def _reap(self) -> list[int]:
        """Collect the exit code of each worker that ended; the pids of those still running."""
        running = []
        for process in self.processes:
            if process.pid in self._codes:
                continue
            code = _exit_code(process.pid, os.WNOHANG)
            if code is None:
                running.append(process.pid)
            else:
                self._codes[process.pid] = code
        return running

    def _wait(self, grace_s: float) -> None:
        """Wait for every worker, killing those still running after `grace_s`."""
        deadline = time.monotonic() + grace_s
        while (running := self._reap()) and time.monotonic() < deadline:
            time.sleep(0.01)
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._codes[pid] = _exit_code(pid, 0) or 0

    def _close_stdin(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                os.close(process.stdin)


def _exit_code(pid: int, options: int) -> int | None:
    """The exit code of worker `pid` (-N when signal N ended it), None while it runs (with
    WNOHANG); 0 when another wait reaped it first."""
    try:
        found, status = os.waitpid(pid, options)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status) if found else None


def _serve_then_exit(argv: list[str]) -> NoReturn:
    """In a forked worker: run `lace worker` with `argv` as the command line does, then leave
    at once, as `lace` does (`leave`)."""
    from lace.cli import leave, main

    try:
        code = main(argv)
    except SystemExit as stopped:  # stopped while it waited for the session (or its end)
        code = stopped.code if isinstance(stopped.code, int) else int(stopped.code is not None)
    except BaseException:  # as Python would show it, had the worker been a program of its own
        traceback.print_exc()
        code = 1
    try:
        leave(code)
    finally:  # never back into the run's code, whatever leaving met
        os._exit(code)
