"""`lace stop`, `lace resume` and `lace session end`: a person controls agents' lifetime."""

from __future__ import annotations

import argparse
import sys

from lace.cli.board import open_store, say
from lace.core.errors import LaceError


def stop_command(args: argparse.Namespace) -> int:
    """`lace stop THREAD_ID`: stop an agent and its subtree (a running process notices before
    its next model call)."""
    store = open_store(args)
    with store.transaction() as tx:
        tx.agents.get(args.thread_id)
        stopped = tx.lifecycle.stop_subtree(args.thread_id, reason=f"{args.reason} (by human)",
                                   by_person=True)
    say(f"Stopped {len(stopped)} agent(s): {', '.join(stopped)}" if stopped
        else f"{args.thread_id} and its subtree were already stopped.", one_line=True)
    return 0


def session_end_command(args: argparse.Namespace) -> int:
    """`lace session end ROOT_ID`: stop every agent of the session; nothing is deleted."""
    store = open_store(args)
    with store.transaction() as tx:
        root = tx.threads.get_session(args.root_id)
        stopped = tx.lifecycle.stop_subtree(
            root.id, reason=f"session ended: {args.reason} (by human)", by_person=True)
    say(f"Session {root.id} ended; {len(stopped)} agent(s) stopped.", one_line=True)
    return 0


def resume_command(args: argparse.Namespace) -> int:
    """`lace resume THREAD_ID`: the agent continues its conversation; the session then runs
    until it is quiet, as `lace run --continue` does."""
    store = open_store(args)
    with store.transaction() as tx:
        if not tx.lifecycle.resume(args.thread_id):
            status = tx.agents.get(args.thread_id).status
            raise LaceError(f"{args.thread_id} is {status}, not stopped: nothing to resume.")
    say(f"Resumed {args.thread_id}", one_line=True, file=sys.stderr)
    from lace.cli.run import run_command

    run_args = argparse.Namespace(**{**vars(args), "continue_thread": args.thread_id,
                                     "prompt": None, "model": None, "timeout": args.timeout,
                                     "json": False})
    return run_command(run_args)
