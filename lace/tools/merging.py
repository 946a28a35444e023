"""Merging a helper's branch into the branch it started from, and pruning worktrees. A merge
is computed with `git merge-tree --write-tree` (no working tree touched) and the target moves
only when it is clean: by `git merge --ff-only` where it is checked out, else `update-ref`
checked against its old value. A conflict changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lace.core.shown import named_few
from lace.core.worktrees import Worktree, commit_message, conflict, identity
from lace.tools.base import ToolError
from lace.tools.git import (
    changed_paths,
    checked_out_at,
    commit_of,
    git_text,
    is_ancestor,
    run_git,
)

Strategy = Literal["merge", "squash"]


@dataclass(frozen=True)
class WorktreeState:
    """A worktree as git sees it now: its branch head (None: never created), commits not in
    its base branch, and files changed but not committed in its folder."""

    head: str | None
    unmerged_commits: int
    uncommitted: int

    @property
    def has_unmerged_work(self) -> bool:
        return self.unmerged_commits > 0 or self.uncommitted > 0


def state_of(worktree: Worktree) -> WorktreeState:
    """What a worktree holds that its base branch does not."""
    repository = worktree.repository
    head = commit_of(repository, f"refs/heads/{worktree.branch}")
    target = commit_of(repository, f"refs/heads/{worktree.base_branch}")
    unmerged = 0
    if head is not None:
        merge_kept = worktree.status == "merged" and target is not None \
            and worktree.merged_commit is not None \
            and is_ancestor(repository, worktree.merged_commit, target)
        since = worktree.merged_head if merge_kept else target  # a merge undone is not one
        unmerged = int(git_text(repository, ["rev-list", "--count",
                                             f"{since or worktree.base_commit}..{head}"]))
    folder = Path(worktree.folder)
    uncommitted = len(changed_paths(folder)) if (folder / ".git").exists() else 0
    return WorktreeState(head, unmerged, uncommitted)


@dataclass(frozen=True)
class Merged:
    """What a merge made: the base branch's new commit, and the branch head it merged."""

    commit: str
    head: str


def merge_worktree(worktree: Worktree, *, strategy: Strategy, actor: str, title: str) -> Merged:
    """Merge (or squash) the helper's branch into its base branch. A conflict, a dirty target
    or nothing to merge is a ToolError and leaves both branches and every working tree as
    they were."""
    repository, branch, target = worktree.repository, worktree.branch, worktree.base_branch
    head = commit_of(repository, f"refs/heads/{branch}")
    old = commit_of(repository, f"refs/heads/{target}")
    if head is None or head == worktree.base_commit:
        raise ToolError(f"{branch} has no commits to merge (its helper committed nothing yet).")
    if head == worktree.merged_head:
        raise ToolError(f"{branch} is merged already (nothing new on it since).")
    if old is None:
        raise ToolError(f"The branch {target} that {branch} started from no longer exists.")
    if is_ancestor(repository, head, old):
        raise ToolError(f"{branch} is already merged into {target}.")
    place = checked_out_at(repository, target)
    if place is not None:
        dirty = changed_paths(place, untracked=False)
        if dirty:
            raise ToolError(f"{target} is checked out in {place} with uncommitted changes "
                            f"({', '.join(dirty[:5])}); commit or stash them, then merge "
                            "again. Nothing was changed.")
    done = run_git(repository, ["merge-tree", "--write-tree", "--name-only", "--no-messages",
                                old, head], ok_codes=(0, 1))
    lines = done.stdout.splitlines()
    if done.returncode == 1:
        raise ToolError(conflict(branch, target, [line for line in lines[1:] if line]))
    if place is not None:
        refuse_files_in_the_way(place, target, branch, written=run_git(
            repository, ["diff", "--name-only", "-z", old, lines[0]]).stdout.split("\0"))
    parents = ["-p", old] if strategy == "squash" else ["-p", old, "-p", head]
    message = commit_message(title, f"Squashed from {branch}.") if strategy == "squash" \
        else commit_message(f"Merge {branch} into {target}: {title}", "")
    commit = run_git(repository, ["commit-tree", lines[0], *parents, "-m", message],
                     extra_env=identity(actor)).stdout.strip()
    if place is not None:
        run_git(place, ["merge", "--ff-only", "--no-overwrite-ignore", "--quiet", commit],
                extra_env=identity(actor))
    else:
        run_git(repository, ["update-ref", "-m", f"lace: merge {branch}",
                             f"refs/heads/{target}", commit, old], extra_env=identity(actor))
    return Merged(commit, head)


def refuse_files_in_the_way(place: Path, target: str, branch: str, written: list[str]) -> None:
    """Refuse, naming them, the files the merge would write in `place` over ones git does not
    track there (untracked or ignored, such as a person's `.env`), which git would refuse to
    overwrite or overwrite silently."""
    untracked = run_git(place, ["ls-files", "--others", "--directory", "-z"]).stdout
    entries = {entry for entry in untracked.split("\0") if entry}
    folders = tuple(entry for entry in entries if entry.endswith("/"))
    in_the_way = [path for path in written
                  if path and (path in entries or path.startswith(folders))]
    if in_the_way:
        listed = named_few(in_the_way, 5)
        raise ToolError(f"Merging {branch} would overwrite {listed} in {place}, which git does "
                        f"not track on {target}; move {'it' if len(in_the_way) == 1 else 'them'} "
                        "away, then merge again. Nothing was changed.")


def prune_refusal(worktree: Worktree, state: WorktreeState, *, force: bool) -> str | None:
    """Why `lace worktrees prune` keeps a worktree for the work git shows in it, or None when
    it is merged or holds nothing (with `force`, whatever it holds). Whether its helper still
    works is decided in the write that marks it pruned."""
    if force:
        return None
    if state.uncommitted:
        return f"{state.uncommitted} uncommitted file(s) in {worktree.folder}"
    if state.unmerged_commits:
        return (f"{state.unmerged_commits} unmerged commit(s) on {worktree.branch} "
                f"(lace merge {worktree.thread_id}, or --force to delete them)")
    return None


def remove_worktree(worktree: Worktree) -> None:
    """Delete the worktree's folder and its branch (the caller decided it may)."""
    folder = Path(worktree.folder)
    if folder.exists():
        run_git(worktree.repository, ["worktree", "remove", "--force", str(folder)])
    run_git(worktree.repository, ["worktree", "prune"])
    if commit_of(worktree.repository, f"refs/heads/{worktree.branch}") is not None:
        run_git(worktree.repository, ["branch", "--quiet", "-D", worktree.branch])
