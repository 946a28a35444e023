"""The helpers' worktrees as a person looks after them (`lace worktrees`, `lace worktrees
prune`, `lace merge`): each with its git state and whether its helper may still write in it."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from lace.core.agents import HALTED_STATUSES
from lace.core.tasks import ACTIVE_STATUSES
from lace.core.worktrees import Worktree
from lace.runtime.board import Board
from lace.store import Tx
from lace.tools.merging import WorktreeState, prune_refusal, remove_worktree, state_of


@dataclass(frozen=True)
class WorktreeView:
    """A worktree, its git state (empty once pruned) and whether its helper still works."""

    worktree: Worktree
    state: WorktreeState
    helper_working: bool


@dataclass(frozen=True)
class Pruned:
    """What pruning did with one worktree: removed it, or kept it and why."""

    worktree: Worktree
    refusal: str | None


def helper_working(tx: Tx, worktree: Worktree) -> bool:
    """Whether the worktree's helper may still write in it: its task is open and it is not
    stopped or failed."""
    agent = tx.agents.find(worktree.thread_id)
    if agent is None or agent.status in HALTED_STATUSES:
        return False
    task = tx.tasks.get(agent.created_for_task) if agent.created_for_task else None
    return task is not None and task.status in ACTIVE_STATUSES


def list_worktrees(board: Board, *, include_pruned: bool = False) -> list[WorktreeView]:
    """Every worktree, oldest first, with its state read from git."""
    with board.store.reading() as tx:
        rows = [(worktree, helper_working(tx, worktree))
                for worktree in tx.worktrees.all(include_pruned=include_pruned)]
    return [WorktreeView(worktree, state_of(worktree) if worktree.status != "pruned"
                         else WorktreeState(None, 0, 0), working)
            for worktree, working in rows]


def _mark_pruned(tx: Tx, *, thread_id: str) -> None:
    tx.worktrees.set_status(thread_id, "pruned")


def prune_worktrees(board: Board, *, force: bool = False) -> Iterator[Pruned]:
    """Remove merged and abandoned worktrees and their branches (unmerged work only with
    `force`), one at a time, saying what became of each as it goes."""
    with board.store.reading() as tx:
        rows = [(worktree, helper_working(tx, worktree)) for worktree in tx.worktrees.all()]
    for worktree, working in rows:
        refusal = prune_refusal(worktree, state_of(worktree), helper_working=working,
                                force=force)
        if refusal is None:
            remove_worktree(worktree)
            board.store.write(functools.partial(_mark_pruned, thread_id=worktree.thread_id))
        yield Pruned(worktree, refusal)

