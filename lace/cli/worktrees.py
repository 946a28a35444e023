"""`lace worktrees`, `lace worktrees prune` and `lace merge`: a person looks at the helpers'
worktrees, merges a branch, and removes what is merged or abandoned (never unmerged work
without --force)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from lace.cli.board import board_of, open_store, print_json, say
from lace.core.agents import HALTED_STATUSES
from lace.core.errors import LaceError
from lace.core.ids import is_thread_id
from lace.core.tasks import ACTIVE_STATUSES
from lace.core.worktrees import Worktree
from lace.store import Tx
from lace.tools.merging import WorktreeState, prune_refusal, remove_worktree, state_of


def helper_working(tx: Tx, worktree: Worktree) -> bool:
    """Whether the worktree's helper may still write in it: its task is open and it is not
    stopped or failed."""
    agent = tx.agents.find(worktree.thread_id)
    if agent is None or agent.status in HALTED_STATUSES:
        return False
    task = tx.tasks.get(agent.created_for_task) if agent.created_for_task else None
    return task is not None and task.status in ACTIVE_STATUSES


def _describe(worktree: Worktree, state: WorktreeState, working: bool) -> str:
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
    with open_store(args).reading() as tx:
        rows = [(worktree, helper_working(tx, worktree))
                for worktree in tx.worktrees.all(include_pruned=args.all)]
    listed = [(worktree, state_of(worktree) if worktree.status != "pruned"
               else WorktreeState(None, 0, 0), working) for worktree, working in rows]
    if args.json:
        print_json([{**asdict(worktree), **asdict(state), "helper_working": working}
                    for worktree, state, working in listed])
    elif not listed:
        print("No worktrees. A helper gets one with isolation \"worktree\" (see the README).")
    for worktree, state, working in [] if args.json else listed:
        say(_describe(worktree, state, working), one_line=True)
    return 0


def prune_command(args: argparse.Namespace) -> int:
    """`lace worktrees prune [--force]`: remove merged and abandoned worktrees and branches."""
    store = open_store(args)
    with store.reading() as tx:
        rows = [(worktree, helper_working(tx, worktree)) for worktree in tx.worktrees.all()]
    kept = 0
    for worktree, working in rows:
        refusal = prune_refusal(worktree, state_of(worktree), helper_working=working,
                                force=args.force)
        if refusal is not None:
            kept += 1
            say(f"kept {worktree.thread_id}: {refusal}", one_line=True)
            continue
        remove_worktree(worktree)
        with store.transaction() as tx:
            tx.worktrees.set_status(worktree.thread_id, "pruned")
        say(f"pruned {worktree.thread_id}: {worktree.folder} and {worktree.branch} are gone",
            one_line=True)
    if not rows:
        print("No worktrees to prune.")
    return 0


def merge_command(args: argparse.Namespace) -> int:
    """`lace merge THREAD_ID [--squash]`, through the one tool path as the person."""
    if not is_thread_id(args.thread_id):
        raise LaceError(f"{args.thread_id!r} is not a thread id; `lace worktrees` lists them.")
    with board_of(args) as board:
        result = board.merge_worktree(args.thread_id, "squash" if args.squash else "merge")
    if result.is_error:
        say(f"lace: {result.text}", one_line=True, file=sys.stderr)
        return 1
    say(result.text)
    return 0
