"""`lace worker`: a process that runs the agents of every session of the database (or of the
named ones) until SIGINT or SIGTERM; and the workers `lace run --workers N` starts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

from lace.cli.board import board_of
from lace.cli.forked import fork_workers, supervise
from lace.cli.invocation import runtime_settings, workspace_of
from lace.cli.run import model_client, new_runtime
from lace.config import Settings
from lace.core.errors import LaceError
from lace.runtime.board import Board
from lace.runtime.databases import load_driver, when_reachable
from lace.runtime.public import DaemonThreads

GRACE_S = 10.0
"""How long a worker has to stop after SIGTERM before it is killed: it takes milliseconds, but
seconds on a swamped machine, and a killed worker leaves its agents held until its lease runs
out."""


def worker_command(args: argparse.Namespace) -> int:
    """Check the sessions named, then serve until a signal (with --for-run, as started by
    `lace run --workers`: the session stdin's first line names, until the end of stdin)."""
    settings = runtime_settings(args)
    workspace_of(args)
    signal.signal(signal.SIGTERM, _stopped_while_waiting)  # until _serve's loop takes it
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
    return asyncio.run(_serve(args, board, settings, roots))


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
        byte = os.read(sys.stdin.fileno(), 1)
        if not byte:
            raise SystemExit(0)
        line += byte
    session = line.decode(errors="replace").strip()
    if not session:  # Board.session("") is the latest session: name none rather than that
        raise LaceError("lace worker --for-run reads a session id on its first line of stdin")
    return session


def _stopped_while_waiting(_signum: int, _frame: object) -> None:
    """SIGTERM before the worker serves (while it waits for the run's session or for its
    database server, or starts its loop): stopped cleanly (it holds nothing yet)."""
    raise SystemExit(0)


async def _serve(args: argparse.Namespace, board: Board, settings: Settings,
                 roots: list[str]) -> int:
    from lace.runtime import Sharing

    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())  # a stuck tool thread cannot hold the exit
    main = asyncio.current_task()
    if main is None:
        raise RuntimeError("lace worker runs as asyncio's main task")
    for signum in (signal.SIGINT, signal.SIGTERM):  # once: a second would cut the shutdown
        loop.add_signal_handler(signum, lambda: main.cancelling() or main.cancel())
    if args.for_run:
        def read_stdin() -> None:
            if not os.read(sys.stdin.fileno(), 4096):  # the run that started it has ended
                loop.remove_reader(sys.stdin.fileno())
                main.cancel()

        loop.add_reader(sys.stdin.fileno(), read_stdin)
    try:
        client = model_client()  # its SDK imported before this process takes agents
        await asyncio.to_thread(client.warm_up, litellm_too=False)
        runtime = new_runtime(args, board, settings, client, Sharing(
            feed=board.change_feed(), share_work=True, sessions=frozenset(roots),
            serve_all=not roots, max_agents=args.max_agents))
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
    """The `lace worker` processes of one `lace run --workers N`: one `lace worker --processes
    N`, started first thing so that its start-up overlaps the run's, which forks them once the
    run names its session. They end with the run however it ends: stopped by it (SIGTERM, then
    SIGKILL after GRACE_S), or, should the run be killed, at the end of their stdin, a pipe
    from the run."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.ended_alone: list[subprocess.Popen[bytes]] | None = None
        """Those that had ended when the run first asked them to stop: the failures to name
        (one the run's own SIGTERM ended, however it ended, is not one)."""

    def start(self, args: argparse.Namespace, database_url: str, count: int) -> None:
        """Start `count` workers, with the run's workspace and tool flags (and its environment
        and folder, so its settings); they wait for `serve`."""
        argv = [sys.executable, "-m", "lace", "worker", "--processes", str(count),
                "--workspace", str(workspace_of(args)), "--for-run",
                *(["--yes"] if args.yes else []), *(["--read-only"] if args.read_only else [])]
        env = {**os.environ, "LACE_DB": database_url}  # not in argv: ps shows argv to anyone
        self.processes.append(subprocess.Popen(  # a group of its own: Ctrl+C is the run's
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, process_group=0))

    def serve(self, root_id: str) -> None:
        """Name the session to the workers (one that ended already is reported by `stop`)."""
        for process in self.processes:
            if process.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.write(f"{root_id}\n".encode())
                    process.stdin.flush()

    def abandon(self) -> None:
        """A run that ends before its session: the workers, given no session, are stopped at
        once (SIGTERM, and the end of their stdin); waited for (killed after GRACE_S)."""
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
            process.terminate()  # no session, nothing to finish: not worth its imports
            try:
                process.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()

    def terminate(self) -> None:
        """Ask every worker still running to stop (its running turns become interrupted)."""
        if self.ended_alone is None:
            self.ended_alone = [process for process in self.processes if process.poll() is not None]
        for process in self.processes:
            if process.poll() is None:
                process.terminate()

    async def stop(self) -> None:
        """Stop every worker and wait for it; kill those still running after GRACE_S; name
        those that had failed before."""
        self.terminate()
        deadline = time.monotonic() + GRACE_S
        while any(process.poll() is None for process in self.processes):
            if time.monotonic() > deadline:
                for process in self.processes:
                    if process.poll() is None:
                        process.kill()
                        process.wait()
                break
            await asyncio.sleep(0.01)
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
            if process in (self.ended_alone or ()) and process.returncode != 0:
                print(f"lace: worker pid {process.pid} ended with exit code "
                      f"{process.returncode}", file=sys.stderr)
        self.processes.clear()
