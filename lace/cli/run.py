"""`lace run`: start (or continue) a session and run its agents until they are quiet."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lace.cli.board import open_store, print_json, say
from lace.cli.progress import progress_printer
from lace.config import Settings, load_settings
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.store import Store
from lace.tools.workspace import DaemonThreads

if TYPE_CHECKING:
    from lace.llm.client import RoutingClient
    from lace.llm.types import ModelClient
    from lace.runtime.supervisor import Supervisor

EXIT_QUIET, EXIT_ROOT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
EXIT_TERMINATED = 128 + signal.SIGTERM


def workspace_of(args: argparse.Namespace) -> Path:
    """`--workspace DIR` (which must exist), else the folder lace was started in."""
    chosen = Path(getattr(args, "workspace", None) or Path.cwd()).expanduser().resolve()
    if not chosen.is_dir():
        raise LaceError(f"--workspace {chosen} is not a folder.")
    return chosen


def with_tool_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """The settings with `--yes` / `--read-only` applied to the tool policy."""
    tools = settings.tools.overridden(allow_all=getattr(args, "yes", False),
                                      read_only=getattr(args, "read_only", False))
    return settings.model_copy(update={"tools": tools})


def runtime_settings(args: argparse.Namespace) -> Settings:
    """The settings of a process that runs agents: every fallback model checked as a spawn's
    would be, and `--yes` / `--read-only` applied."""
    from lace.llm.checks import check_model

    return with_tool_flags(load_settings(check_model=check_model), args)


def run_command(args: argparse.Namespace) -> int:
    """Validate everything first (nothing is written for a bad command), then run."""
    if args.continue_thread is None and not args.prompt:
        raise LaceError("give a prompt: lace run \"PROMPT\" (or lace run --continue THREAD_ID)")
    settings = runtime_settings(args)
    model = args.model or settings.model
    provider, name = parse_model(model)
    from lace.llm.checks import check_model

    problem = check_model(provider, name)
    if problem:
        raise LaceError(problem)
    store = open_store(args)
    if args.continue_thread:
        with store.reading() as tx:
            tx.get_thread(args.continue_thread)
    try:
        return asyncio.run(_run(args, store, model, settings))
    except KeyboardInterrupt:
        print("lace: interrupted; resume with lace run --continue", file=sys.stderr)
        return 130
    except asyncio.CancelledError:  # SIGTERM: stopped as cleanly as by Ctrl+C
        print("lace: terminated; resume with lace run --continue", file=sys.stderr)
        return EXIT_TERMINATED


def model_client() -> RoutingClient:
    """The client every lace process calls models with."""
    from lace.llm.client import default_client

    return default_client()


def new_supervisor(args: argparse.Namespace, store: Store, settings: Settings,
                   client: ModelClient, **sharing: Any) -> Supervisor:
    """The runtime of `lace run` and `lace worker`, narrating on stderr; `sharing` says how
    it shares the database with other processes (see `Supervisor`)."""
    from lace.llm.checks import check_model
    from lace.runtime.supervisor import Supervisor

    supervisor = Supervisor(store=store, client=client, settings=settings,
                            check_model=check_model, workspace=workspace_of(args), **sharing)
    supervisor.bus.subscribe(progress_printer())
    return supervisor


async def _run(args: argparse.Namespace, store: Store, model: str, settings: Any) -> int:
    from lace.cli.worker import Workers
    from lace.runtime.worker import change_feed

    # A thread that never returns (a tool stuck in a system call) must not keep the process
    # alive after a timeout or Ctrl+C: asyncio.run and Python's exit wait for pool threads.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())
    main = asyncio.current_task()
    if main is not None:  # SIGTERM ends the run as Ctrl+C does: turns interrupted, servers stopped
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    workers_wanted = getattr(args, "workers", 0)  # `lace resume` runs with none
    sharing = {"feed": change_feed(store), "share_work": True} if workers_wanted else {}
    supervisor = new_supervisor(args, store, settings, model_client(), **sharing)
    workers = Workers()
    try:
        if args.continue_thread:
            root_id = root_of(args.continue_thread)
            resumed = await supervisor.resume(root_id)
            if resumed:
                print(f"Resuming {len(resumed)} interrupted agent(s): {', '.join(resumed)}",
                      file=sys.stderr)
            if args.prompt:
                await supervisor.send(args.continue_thread, args.prompt)
        else:
            root_id = (await supervisor.start_session(args.prompt, model)).id
            print(f"Session {root_id}", file=sys.stderr)
        workers.start(args, store.database.url, root_id, workers_wanted)
        try:
            async with asyncio.timeout(args.timeout):
                await supervisor.run_until_quiet(root_id)
        except asyncio.CancelledError:  # Ctrl+C: stop cleanly, resumable with --continue
            workers.terminate()
            await supervisor.stop()
            raise
        except TimeoutError:
            workers.terminate()
            await supervisor.stop()
            await workers.stop()
            cut = await supervisor.db.read(
                lambda tx: tx.count_agents_in(root_id, ("interrupted",)))
            print(f"lace: timed out after {args.timeout}s; {cut} turn(s) marked interrupted; "
                  f"resume with lace run --continue {root_id}", file=sys.stderr)
            return EXIT_TIMEOUT
        await workers.stop()
        return _report(store, root_id, args.json)
    finally:
        await workers.stop()
        await supervisor.stop_servers()
        supervisor.close()


def _report(store: Store, root_id: str, as_json: bool) -> int:
    with store.reading() as tx:
        root = tx.get_agent(root_id)
        answers = [event.data["message"].get("content") for event in tx.thread_events(root_id)
                   if event.type == "agent_message"]
        answer = next((text for text in reversed(answers) if text), None)
        agents = tx.session_agents(root_id)
        tasks, _ = tx.query_tasks(root_id, include_closed=True)
    if as_json:
        print_json({
            "session": root_id, "answer": answer, "root_status": root.status,
            "threads": [asdict(agent) for agent in agents],
            "tasks": [asdict(task) for task in tasks],
            "usage": {"tokens_in": sum(a.tokens_in for a in agents),
                      "tokens_out": sum(a.tokens_out for a in agents),
                      "cost_usd": sum(a.cost_usd for a in agents)},
        })
    elif answer:
        say(answer)
    return EXIT_ROOT_FAILED if root.status == "error" else EXIT_QUIET
