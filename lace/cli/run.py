"""`lace run`: start (or continue) a session and run its agents until they are quiet."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lace.cli.board import open_store, print_json, say
from lace.cli.progress import progress_printer
from lace.config import Settings, load_settings
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.store import Store
from lace.tools.workspace import DaemonThreads

EXIT_QUIET, EXIT_ROOT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3


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


def run_command(args: argparse.Namespace) -> int:
    """Validate everything first (nothing is written for a bad command), then run."""
    if args.continue_thread is None and not args.prompt:
        raise LaceError("give a prompt: lace run \"PROMPT\" (or lace run --continue THREAD_ID)")
    settings = with_tool_flags(load_settings(), args)
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


async def _run(args: argparse.Namespace, store: Store, model: str, settings: Any) -> int:
    from lace.llm.checks import check_model
    from lace.llm.client import LiteLLMClient
    from lace.runtime.supervisor import Supervisor

    # A thread that never returns (a tool stuck in a system call) must not keep the process
    # alive after a timeout or Ctrl+C: asyncio.run and Python's exit wait for pool threads.
    asyncio.get_running_loop().set_default_executor(DaemonThreads())
    supervisor = Supervisor(store=store, client=LiteLLMClient(), settings=settings,
                            check_model=check_model, workspace=workspace_of(args))
    supervisor.bus.subscribe(progress_printer())
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
        try:
            async with asyncio.timeout(args.timeout):
                await supervisor.run_until_quiet(root_id)
        except asyncio.CancelledError:  # Ctrl+C: stop cleanly, resumable with --continue
            await supervisor.stop()
            raise
        except TimeoutError:
            cut = await supervisor.stop()
            print(f"lace: timed out after {args.timeout}s; {len(cut)} turn(s) marked interrupted; "
                  f"resume with lace run --continue {root_id}", file=sys.stderr)
            return EXIT_TIMEOUT
        return _report(store, root_id, args.json)
    finally:
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
