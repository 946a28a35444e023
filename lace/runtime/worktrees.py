"""The helpers' worktrees as a person looks after them (`lace worktrees`, `lace worktrees
prune`, `lace merge`): each with its git state and whether a helper may still write in it.
Pruning decides in the write that marks a worktree pruned, so a helper resumed meanwhile keeps
it, and a helper whose worktree is marked pruned is refused before git removes the folder."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from lace.core.agents import BUSY_STATUSES, HALTED_STATUSES
from lace.core.records import Agent
from lace.core.tasks import OPEN_STATUSES
from lace.core.worktrees import Worktree
from lace.runtime.board import Board
from lace.store import Tx
from lace.tools.git import GitError
from lace.tools.merging import WorktreeState, prune_refusal, remove_worktree, state_of


@dataclass(frozen=True)
class WorktreeView:
    """A worktree, its git state (empty once pruned) and whether a helper still works in it."""

    worktree: Worktree
    state: WorktreeState
    helper_working: bool


@dataclass(frozen=True)
class Pruned:
    """What pruning did with one worktree: removed it, or kept it and why."""

    worktree: Worktree
    refusal: str | None


def _may_write(tx: Tx, agent: Agent) -> bool:
    """Whether an agent may still act: not stopped or failed, and in (or cut off in) a turn or
    holding an open task (a stopped one a person resumed holds its blocked task)."""
    if agent.status in HALTED_STATUSES:
        return False
    if agent.status in BUSY_STATUSES:
        return True
    return any(tx.tasks.get(task_id).status in OPEN_STATUSES
               for task_id in (agent.created_for_task, agent.current_task) if task_id)


def helper_working(tx: Tx, worktree: Worktree) -> bool:
    """Whether a helper may still write in the worktree: its own, or one below it that shares
    it (with no worktree of its own)."""
    for agent in tx.agents.subtree(worktree.thread_id):
        place = tx.worktrees.nearest(agent.thread_id)
        if place is not None and place.thread_id == worktree.thread_id \
                and _may_write(tx, agent):
            return True
    return False


def list_worktrees(board: Board, *, include_pruned: bool = False) -> list[WorktreeView]:
    """Every worktree, oldest first, with its state read from git."""
    with board.store.reading() as tx:
        rows = [(worktree, helper_working(tx, worktree))
                for worktree in tx.worktrees.all(include_pruned=include_pruned)]
    return [WorktreeView(worktree, state_of(worktree) if worktree.status != "pruned"
                         else WorktreeState(None, 0, 0), working)
            for worktree, working in rows]


def _mark_pruned(tx: Tx, *, thread_id: str) -> str | None:
    """Mark the worktree pruned unless a helper still works in it (or it is pruned already):
    why it is kept, else None."""
    worktree = tx.worktrees.get(thread_id)
    if worktree.status == "pruned":
        return "another `lace worktrees prune` pruned it meanwhile"
    if helper_working(tx, worktree):
        return f"its helper is still working (lace stop {thread_id} first)"
    tx.worktrees.set_status(thread_id, "pruned")
    return None


def _unmark_pruned(tx: Tx, *, thread_id: str, status: str) -> None:
    """Put back the status a worktree had before prune marked it (it is kept after all)."""
    if tx.worktrees.get(thread_id).status == "pruned":
        tx.worktrees.set_status(thread_id, status)


def _pruned(board: Board, worktree: Worktree, *, force: bool) -> str | None:
    """Prune one worktree: why it is kept, else None once git removed it. Its git state is
    read before (most are kept for it, with no write) and again once it is marked pruned,
    when no helper can write in it any more: work a helper woken meanwhile added is kept."""
    refusal = prune_refusal(worktree, state_of(worktree), force=force) or board.store.write(
        functools.partial(_mark_pruned, thread_id=worktree.thread_id))
    if refusal is not None:
        return refusal
    try:
        refusal = prune_refusal(worktree, state_of(worktree), force=force)
        if refusal is None:
            remove_worktree(worktree)
            return None
    except GitError as error:
        refusal = f"git could not remove it ({error}); it is kept, {worktree.status} as before."
    board.store.write(functools.partial(_unmark_pruned, thread_id=worktree.thread_id,
                                        status=worktree.status))
    return refusal


def prune_worktrees(board: Board, *, force: bool = False) -> Iterator[Pruned]:
    """Remove merged and abandoned worktrees and their branches (unmerged work only with
    `force`; never where a helper still works), one at a time, saying what became of each as
    it goes. Each is marked pruned before git removes it; if git fails, it is as it was."""
    with board.store.reading() as tx:
        worktrees = tx.worktrees.all()
    for worktree in worktrees:
        yield Pruned(worktree, _pruned(board, worktree, force=force))
