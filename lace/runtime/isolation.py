"""The runtime's side of helper worktrees: the workspace each agent's tools act in (its
worktree, created at first use, with the same protection), and the commit of its work when it
completes its task, which the completion message then names."""

from __future__ import annotations

from lace.core.errors import LaceError
from lace.core.records import Task
from lace.core.worktrees import Worktree, pruned_work
from lace.runtime.database import AsyncStore
from lace.store import Tx
from lace.tools.workspace import Workspace, off_loop
from lace.tools.worktrees import commit_work, materialized, nearest_worktree


async def worktree_of(db: AsyncStore, thread_id: str) -> Worktree | None:
    """The worktree a thread works in (None: the runtime's workspace); NoWorkspace (a tool
    error) when a person pruned it. Read as a workspace call is resolved, before hooks and
    approvals: prune keeps a worktree while its helper is in a turn, so it holds until the
    call runs."""
    return await db.read(lambda tx: nearest_worktree(tx, thread_id))


async def workspace_in(base: Workspace, worktree: Worktree | None) -> Workspace:
    """The workspace of a thread working in `worktree` (created at first use), else `base`."""
    if worktree is None:
        return base
    folder = await off_loop(lambda: materialized(worktree))
    return Workspace(folder, base.protection.inside(folder))


async def workspace_of(db: AsyncStore, base: Workspace, thread_id: str) -> Workspace:
    """The workspace of a thread: the nearest worktree of it or its ancestors, else `base`;
    NoWorkspace (a tool error) when a person pruned that worktree."""
    return await workspace_in(base, await worktree_of(db, thread_id))


def _completing(tx: Tx, thread_id: str, task_id: str) -> tuple[Worktree, Task] | None:
    """The thread's own worktree and the task it is about to complete, if both."""
    worktree = tx.worktrees.find(thread_id)
    if worktree is None:
        return None
    try:
        task = tx.tasks.get(task_id)
    except LaceError:
        return None
    if task.assigned_to != thread_id or task.status == "completed":
        return None
    return worktree, task


async def with_committed_work(db: AsyncStore, thread_id: str, task_id: str,
                              result: str) -> str:
    """`result`, followed by what the helper's worktree holds once its work is committed on
    its branch (or why it could not be, or that a person pruned it); `result` alone when the
    thread has no worktree."""
    found = await db.read(lambda tx: _completing(tx, thread_id, task_id))
    if found is None:
        return result
    worktree, task = found
    if worktree.status == "pruned":
        return f"{result}\n\n{pruned_work(worktree.branch)}"
    try:
        work = await off_loop(lambda: commit_work(worktree, task.title, result))
    except (LaceError, OSError) as error:
        return (f"{result}\n\nWorktree: the work on {worktree.branch} could not be committed "
                f"({error}); it is still in {worktree.folder}.")
    return f"{result}\n\n{work.describe(worktree)}"
