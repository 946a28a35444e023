"""`lace stop`, `lace resume` and `lace session end`: a person controls agents' lifetime."""

from __future__ import annotations

import argparse
import sys

from lace.cli.board import board_of
from lace.cli.output import report, say
from lace.core.text import printable
from lace.runtime.person import end_session, resume_stopped, stop_subtree


def stop_command(args: argparse.Namespace) -> int:
    """`lace stop THREAD_ID`: stop an agent and its subtree (a running process notices before
    its next model call)."""
    with board_of(args) as board:
        stopped = stop_subtree(board, args.thread_id, f"{args.reason} (by human)")
    report(args, {"thread_id": args.thread_id, "stopped": stopped}, printable(
        f"Stopped {len(stopped)} agent(s): {', '.join(stopped)}" if stopped
        else f"{args.thread_id} and its subtree were already stopped.", one_line=True))
    return 0


def session_end_command(args: argparse.Namespace) -> int:
    """`lace session end ROOT_ID`: stop every agent of the session; nothing is deleted."""
    with board_of(args) as board:
        root, stopped = end_session(board, args.root_id,
                                    f"session ended: {args.reason} (by human)")
    report(args, {"session": root.id, "stopped": stopped}, printable(
        f"Session {root.id} ended; {len(stopped)} agent(s) stopped.", one_line=True))
    return 0


def resume_command(args: argparse.Namespace) -> int:
    """`lace resume THREAD_ID`: the agent continues its conversation; the session then runs
    until it is quiet, as `lace run --continue` does."""
    with board_of(args) as board:
        resume_stopped(board, args.thread_id)
    say(f"Resumed {args.thread_id}", one_line=True, file=sys.stderr)
    from lace.cli.run import run_command

    run_args = argparse.Namespace(**{**vars(args), "continue_thread": args.thread_id,
                                     "prompt": None, "model": None, "timeout": args.timeout,
                                     "json": args.json})
    return run_command(run_args)
