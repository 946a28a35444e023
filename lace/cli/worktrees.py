"""`lace worktrees`, `lace worktrees prune` and `lace merge`: a person looks at the helpers'
worktrees, merges a branch, and removes what is merged or abandoned (never unmerged work
without --force)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from lace.cli.board import board_of
from lace.cli.output import print_json, report, say
from lace.core.errors import LaceError
from lace.core.ids import is_thread_id
from lace.runtime.worktrees import (
    WorktreeView,
    list_worktrees,
    prune_worktrees,
)


def _describe(view: WorktreeView) -> str:
    worktree, state, working = view.worktree, view.state, view.helper_working
    status = worktree.status if worktree.status != "active" else (
        "working" if working else "done" if state.has_unmerged_work else "empty")
    parts = [f"{state.unmerged_commits} unmerged commit(s)"] if state.unmerged_commits else []
    if state.uncommitted:
        parts.append(f"{state.uncommitted} uncommitted file(s)")
    detail = f"  ({', '.join(parts)})" if parts else ""
    return (f"{worktree.thread_id}  {status}  {worktree.branch} → {worktree.base_branch}"
            f"{detail}  {worktree.folder}")


def worktrees_command(args: argparse.Namespace) -> int:
    """`lace worktrees` (and `lace worktrees prune`)."""
    with board_of(args) as board:
        listed = list_worktrees(board, include_pruned=args.all)
    if args.json:
        print_json([{**asdict(view.worktree), **asdict(view.state),
                     "helper_working": view.helper_working} for view in listed])
    elif not listed:
        print("No worktrees. A helper gets one with isolation \"worktree\" "
              "(see docs/worktrees.md).")
    for view in [] if args.json else listed:
        say(_describe(view), one_line=True)
    return 0


def prune_command(args: argparse.Namespace) -> int:
    """`lace worktrees prune [--force]`: remove merged and abandoned worktrees and branches."""
    pruned = []
    with board_of(args) as board:
        for done in prune_worktrees(board, force=args.force):
            worktree = done.worktree
            pruned.append({"thread_id": worktree.thread_id, "folder": worktree.folder,
                           "branch": worktree.branch, "pruned": done.refusal is None,
                           "kept_because": done.refusal})
            if args.json:
                continue
            if done.refusal is not None:
                say(f"kept {worktree.thread_id}: {done.refusal}", one_line=True)
                continue
            say(f"pruned {worktree.thread_id}: {worktree.folder} and {worktree.branch} are "
                "gone", one_line=True)
    if args.json:
        print_json(pruned)
    elif not pruned:
        print("No worktrees to prune.")
    return 0


def merge_command(args: argparse.Namespace) -> int:
    """`lace merge THREAD_ID [--squash]`, through the one tool path as the person."""
    if not is_thread_id(args.thread_id):
        raise LaceError(f"{args.thread_id!r} is not a thread id; `lace worktrees` lists them.")
    strategy = "squash" if args.squash else "merge"
    with board_of(args) as board:
        result = board.merge_worktree(args.thread_id, strategy)
    if result.is_error:
        say(f"lace: {result.text}", one_line=True, file=sys.stderr)
        return 1
    report(args, {"thread_id": args.thread_id, "strategy": strategy, "message": result.text},
           result.text)
    return 0
