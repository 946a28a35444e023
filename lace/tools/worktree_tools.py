"""`worktree_merge`: a creator (or a person, through `lace merge`) merges a helper's branch
into the branch the helper started from."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from lace.core.assignee import HUMAN
from lace.core.errors import PermissionDeniedError
from lace.core.ids import is_thread_id
from lace.core.worktrees import merged
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError
from lace.tools.merging import Strategy, merge_worktree


class WorktreeMerge(Tool):
    """Merge the branch of a helper you created (its own git worktree) into the branch it
    started from: "merge" makes a merge commit, "squash" one plain commit. A conflict is
    reported with its files and changes nothing."""

    name: ClassVar[str] = "worktree_merge"
    thread_id: str = Field(min_length=1, max_length=200,
                           description="The helper's thread id (its branch is lace/<thread id>).")
    strategy: Strategy = "merge"

    def run(self, tx: Tx, context: ToolContext) -> str:
        if not is_thread_id(self.thread_id):
            raise ToolError(f"{self.thread_id!r} is not a thread id (like "
                            "lace_20260101_abc123.1).")
        worktree = tx.worktrees.get(self.thread_id)
        agent = tx.agents.get(self.thread_id)
        if context.thread_id not in (HUMAN, agent.parent_thread_id):
            raise PermissionDeniedError(
                f"Only {worktree.thread_id}'s creator ({agent.parent_thread_id}) or a person "
                f"may merge {worktree.branch}; you are {context.thread_id}.")
        if worktree.status == "pruned":
            raise ToolError(f"{worktree.branch} was pruned; there is nothing left to merge.")
        task = tx.tasks.get(agent.created_for_task) if agent.created_for_task else None
        title = task.title if task is not None else f"work of {worktree.thread_id}"
        done = merge_worktree(worktree, strategy=self.strategy, actor=context.thread_id,
                              title=title)
        tx.worktrees.set_status(worktree.thread_id, "merged", merged_commit=done.commit,
                                merged_head=done.head)
        return merged(worktree.branch, worktree.base_branch, done.commit, self.strategy)


WORKTREE_TOOLS: tuple[type[Tool], ...] = (WorktreeMerge,)
