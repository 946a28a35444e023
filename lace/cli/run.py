"""`lace run`: start (or continue) a session and run its agents until they are quiet."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from lace.cli.board import board_of
from lace.cli.invocation import runtime_settings, workspace_of
from lace.cli.loop import once_on, run_async
from lace.cli.output import print_json, report, say
from lace.cli.progress import progress_printer
from lace.config import Settings
from lace.core.agents import CUT_OFF_STATUSES
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.runtime.databases import database_url, when_reachable
from lace.runtime.outcome import EXIT_QUIET

if TYPE_CHECKING:
    from lace.cli.worker import Workers
    from lace.llm.client import RoutingClient
    from lace.llm.types import ModelClient
    from lace.runtime import Runtime, Sharing
    from lace.runtime.board import Board

EXIT_TIMEOUT = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
NOT_WITH_DETACH = {
    "continue_thread": ("--continue", "it starts a new session"),
    "workers": ("--workers", "`lace worker` processes run the agents"),
    "timeout": ("--timeout", "use lace wait SESSION --timeout S"),
    "yes": ("--yes", "give it to the `lace worker` that runs the agents"),
    "read_only": ("--read-only", "give it to the `lace worker` that runs the agents"),
}
"""The flags of `lace run` that act on the process running the agents, which `--detach` is
not: each refused with why."""


def run_command(args: argparse.Namespace) -> int:
    """Validate everything first (nothing is written for a bad command), then run."""
    if args.continue_thread is None and not args.prompt:
        raise LaceError("give a prompt: lace run \"PROMPT\" (or lace run --continue THREAD_ID)")
    detach = getattr(args, "detach", False)  # `lace resume` calls this too, without it
    if detach:
        _refuse_with_detach(args)
    settings = runtime_settings(args)
    model = usable_model(args.model or settings.model)
    from lace.cli.worker import Workers
    from lace.llm.openai_client import served_directly

    workers, count = Workers(), int(getattr(args, "workers", 0))  # `lace resume`: none
    if count:  # refused with --detach; forked from here once it imported the SDK
        workers.start(args, database_url(getattr(args, "db", None)), count)
    elif served_directly(model):  # as the client will route it: only these need the SDK
        from lace.llm.openai_sdk import start_import

        start_import()  # half a second of CPU, meanwhile
    try:
        board = board_of(args, create=args.continue_thread is None)
        if detach:
            return _detach(board, args, model)
        if args.continue_thread:
            board.get_thread(args.continue_thread)
        started: list[str] = []  # the session's id, once there is one
        try:
            return run_async(lambda: _run(args, board, model, settings, started, workers))
        except KeyboardInterrupt:
            print(f"lace: {_resumable('interrupted', started)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except asyncio.CancelledError:  # SIGTERM: stopped as cleanly as by Ctrl+C
            print(f"lace: {_resumable('terminated', started)}", file=sys.stderr)
            return EXIT_TERMINATED
    finally:
        workers.abandon()  # those the run did not stop: it ended before its session


def usable_model(model: str) -> str:
    """`model`, once checked callable here (LaceError, one line, when not), with a note on
    stderr when it looks mistyped."""
    from lace.llm.checks import check_model

    provider, name = parse_model(model)
    note_unlisted_model(model)
    problem = check_model(provider, name)
    if problem:
        raise LaceError(problem)
    return model


def note_unlisted_model(model: str) -> None:
    """One line on stderr when `provider/model` looks mistyped, naming the nearest models
    litellm's table lists (nothing is refused: a model may be newer than the table)."""
    from lace.llm.checks import unlisted_model_note

    provider, name = parse_model(model)
    note = unlisted_model_note(provider, name)
    if note:
        say(f"lace: note: {note}", one_line=True, file=sys.stderr)


def _resumable(how: str, started: list[str]) -> str:
    """The session a stopped run leaves and how to go on with it (none yet: nothing to)."""
    if not started:
        return f"{how} before a session started; nothing to resume"
    return f"{how} session {started[0]}; resume with lace run --continue {started[0]}"


def model_client() -> RoutingClient:
    """The client every lace process calls models with."""
    from lace.llm.client import default_client

    return default_client()


def new_runtime(args: argparse.Namespace, board: Board, settings: Settings,
                client: ModelClient, sharing: Sharing | None = None, *,
                root_reported: bool = False, stopping: Callable[[], bool] = lambda: False,
                ) -> Runtime:
    """The runtime of `lace run`, `lace worker` and `lace mcp serve`, narrating on stderr;
    `sharing` says how it shares the database with other processes, `root_reported` that the
    command reports a root's failure itself, `stopping` when to stop waiting out a server's
    outage as the process registers."""
    from lace.llm.checks import check_model
    from lace.runtime import ALONE, open_runtime

    runtime = open_runtime(board.store, settings, client, check_model=check_model,
                           workspace=workspace_of(args), sharing=sharing or ALONE,
                           stopping=stopping)
    from lace.runtime.databases import shown_database

    db = getattr(args, "db", None)  # named again in the commands that answer (no password)
    runtime.subscribe(progress_printer(
        root_reported=root_reported, approval_timeout_s=settings.limits.approval_timeout_s,
        db_flag=f" --db {shlex.quote(shown_database(database_url(db)))}" if db else ""))
    return runtime


async def _run(args: argparse.Namespace, board: Board, model: str, settings: Any,
               started: list[str], workers: Workers) -> int:
    from lace.runtime import Sharing
    from lace.runtime.public import DaemonThreads

    # A thread that never returns (a tool stuck in a system call) must not keep the process
    # alive after a timeout or Ctrl+C: asyncio.run and Python's exit wait for pool threads.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())
    main = asyncio.current_task()
    signalled = threading.Event()  # at once: the loop waits while the registration retries
    if main is not None:  # SIGTERM ends the run as Ctrl+C does: turns interrupted, servers stopped
        once_on([signal.SIGTERM], main.cancel, came=signalled)
    sharing = Sharing(feed=board.change_feed(), share_work=True) if workers.processes else None
    from lace.runtime.public import GaveUpError

    try:
        runtime = new_runtime(args, board, settings, model_client(), sharing, root_reported=True,
                              stopping=signalled.is_set)
    except GaveUpError:  # stopped waiting for the server, as SIGTERM asked
        raise asyncio.CancelledError from None
    asking = _ask_on_the_terminal(runtime)
    try:
        if args.continue_thread:
            root_id = root_of(args.continue_thread)
            started.append(root_id)
            resumed = await runtime.resume(root_id)
            if resumed:
                print(f"Resuming {len(resumed)} interrupted agent(s): {', '.join(resumed)}",
                      file=sys.stderr)
            if args.prompt:
                await runtime.send(args.continue_thread, args.prompt)
        else:
            root_id = (await runtime.start_session(args.prompt, model)).id
            started.append(root_id)
            print(f"Session {root_id}", file=sys.stderr)
        workers.serve(root_id)
        try:
            async with asyncio.timeout(args.timeout):
                await _run_until_quiet_everywhere(runtime, board, root_id)
        except asyncio.CancelledError:  # Ctrl+C: stop cleanly, resumable with --continue
            workers.terminate()
            await runtime.stop()
            raise
        except TimeoutError:
            workers.terminate()
            await runtime.stop()
            await workers.stop()
            cut = await runtime.read(
                lambda tx: tx.agents.count_in(root_id, CUT_OFF_STATUSES))
            print(f"lace: timed out after {args.timeout}s; {cut} turn(s) marked interrupted; "
                  f"resume with lace run --continue {root_id}", file=sys.stderr)
            return EXIT_TIMEOUT
        await workers.stop()
        return _report(board, root_id, args.json)
    finally:
        if asking is not None:
            asking.cancel()
        await workers.stop()
        await runtime.stop_servers()
        runtime.close()


LOOK_AGAIN_S = 2.0
"""How often a run whose session another lace process also runs looks for work to take over
(an agent whose holder's lease ran out)."""


async def _run_until_quiet_everywhere(runtime: Runtime, board: Board, root_id: str) -> None:
    """Run the session's agents until the session is quiet on the whole board. Work another
    live lace process holds (its lease) is waited for, as `lace wait` does, and taken over
    when that process's lease runs out; without this a `--continue` of a session another
    process runs said at once that it ended without an answer, and exited 1."""
    told: list[bool] = []

    def waiting() -> None:
        if not told:
            told.append(True)
            print(f"Session {root_id} is also run by another lace process; waiting for it "
                  "(Ctrl+C stops waiting, not the other process)", file=sys.stderr)

    while True:
        await runtime.run_until_quiet(root_id)
        if await board.until_quiet(root_id, LOOK_AGAIN_S, waiting):
            return


def _ask_on_the_terminal(runtime: Runtime) -> asyncio.Task[None] | None:
    """When a person started the run at a terminal, approval requests are asked there too."""
    if sys.stdin is None or not sys.stdin.isatty():  # `<&-`: no stdin at all
        return None
    from lace.cli.asking import TerminalAnswers

    answers = TerminalAnswers(runtime)
    runtime.subscribe(answers)
    return asyncio.create_task(answers.serve(), name="lace-terminal-answers")


def _report(board: Board, root_id: str, as_json: bool) -> int:
    outcome = when_reachable(lambda: board.outcome(root_id), board.url)
    if as_json:
        print_json({
            "session": root_id, "answer": outcome.answer, "root_status": outcome.root.status,
            "threads": [asdict(agent) for agent in outcome.agents],
            "tasks": [asdict(task) for task in outcome.tasks],
            "usage": outcome.usage(),
        })
    elif outcome.answer:
        say(outcome.answer)
    if outcome.problem:
        say(f"lace: {outcome.problem}", one_line=True, file=sys.stderr)
    return outcome.exit_code


def _refuse_with_detach(args: argparse.Namespace) -> None:
    """One line for the first flag given that only a process running agents could use."""
    for dest, (flag, instead) in NOT_WITH_DETACH.items():
        if getattr(args, dest, None):
            raise LaceError(f"{flag} does not go with --detach: {instead}")


def _detach(board: Board, args: argparse.Namespace, model: str) -> int:
    """`lace run --detach`: write the session and its prompt, run no agent, and print the id
    alone on stdout (`{"session": ID}` with --json). Its agents work in the workspace: a worker
    on this host started there (or with --workspace) runs them."""
    workspace = workspace_of(args)
    root_id = board.start_session(args.prompt, model, workspace, warn=lambda text: say(
        f"! {text}", one_line=True, file=sys.stderr)).id
    board.close()
    report(args, {"session": root_id}, root_id)
    print(f"Session {root_id} waits for a worker: lace worker (or lace worker --session "
          f"{root_id}) on this database, on this host, with --workspace {workspace} (or run "
          f"there) runs its agents; lace wait {root_id} prints its answer.", file=sys.stderr)
    return EXIT_QUIET
