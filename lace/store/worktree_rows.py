"""Row verbs of the `worktrees` table: a helper's worktree is recorded in the transaction that
spawns it, and marked merged or pruned by the verbs that do so. No git here."""

from __future__ import annotations

import os

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.errors import NotFoundError
from lace.core.worktrees import Worktree, WorktreeOrigin, branch_for
from lace.store import schema
from lace.store.prepared import Prepared
from lace.store.rows import Rows

_worktrees = schema.worktrees
_OF_THREAD = Prepared(sa.select(_worktrees).where(
    _worktrees.c.thread_id == sa.bindparam("thread")))  # asked at every task_complete


class WorktreeRows(Rows):
    """Each writing helper's worktree: where it is, its branch, and where it merges back."""

    def insert(self, thread_id: str, origin: WorktreeOrigin) -> Worktree:
        """Record the worktree of a helper just spawned (git creates it at its first use)."""
        now = now_iso()
        worktree = Worktree(thread_id=thread_id, repository=origin.repository,
                            folder=os.path.join(origin.folders, thread_id),
                            branch=branch_for(thread_id), base_branch=origin.base_branch,
                            base_commit=origin.base_commit, status="active",
                            merged_commit=None, merged_head=None, created_at=now,
                            updated_at=now)
        self._execute(_worktrees.insert().values(**vars(worktree)))
        return worktree

    def find(self, thread_id: str) -> Worktree | None:
        """The worktree of a thread, if it has one."""
        row = _OF_THREAD.first(self.raw, {"thread": thread_id})
        return None if row is None else Worktree(**row)

    def nearest(self, thread_id: str) -> Worktree | None:
        """The worktree a thread works in, pruned or not: its own, else its nearest
        ancestor's (a helper without one shares its creator's); None: it has none above it."""
        parts = thread_id.split(".")
        for end in range(len(parts), 0, -1):  # one indexed lookup a level: most are 1 or 2
            worktree = self.find(".".join(parts[:end]))
            if worktree is not None:
                return worktree
        return None

    def get(self, thread_id: str) -> Worktree:
        """The worktree of a thread, or NotFoundError."""
        worktree = self.find(thread_id)
        if worktree is None:
            raise NotFoundError(f"{thread_id!r} has no worktree; `lace worktrees` lists them.")
        return worktree

    def all(self, *, include_pruned: bool = False) -> list[Worktree]:
        """Every worktree, oldest first."""
        statement = sa.select(_worktrees).order_by(_worktrees.c.created_at,
                                                   _worktrees.c.thread_id)
        if not include_pruned:
            statement = statement.where(_worktrees.c.status != "pruned")
        return [Worktree(**row._mapping) for row in self._execute(statement)]

    def set_status(self, thread_id: str, status: str, *,
                   merged_commit: str | None = None,
                   merged_head: str | None = None) -> None:
        """Mark a worktree merged (with the commit that did it and the branch head it merged)
        or pruned."""
        values: dict[str, str] = {"status": status, "updated_at": now_iso()}
        if merged_commit is not None and merged_head is not None:
            values.update(merged_commit=merged_commit, merged_head=merged_head)
        self._execute(_worktrees.update().where(_worktrees.c.thread_id == thread_id)
                      .values(**values))
