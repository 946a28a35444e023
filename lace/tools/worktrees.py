"""One git worktree per writing helper: where it starts (checked when it is spawned), the
folder it is created in at its first use (under `$LACE_HOME/worktrees/`, never inside a
working tree), the work committed on its branch when it completes its task, and the worktree
each agent's tools act in (its own, else its nearest ancestor's)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from lace.core.ids import is_thread_id
from lace.core.shown import named_few
from lace.core.worktrees import (
    Worktree,
    WorktreeOrigin,
    commit_message,
    completed_work,
    identity,
    no_workspace,
)
from lace.paths import lace_home, private_folder
from lace.store import Tx
from lace.tools.base import ToolContext, ToolError
from lace.tools.git import (
    changed_paths,
    commit_of,
    current_branch,
    diffstat,
    git_text,
    main_tree,
    run_git,
    top_level,
)

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
SHOWN_PATHS = 5


def _lock(repository: str) -> threading.Lock:
    """One lock per repository: git's own lock files refuse two worktree changes at once."""
    with _locks_guard:
        return _locks.setdefault(repository, threading.Lock())


class NoWorkspace(ToolError):
    """The worktree a thread worked in was pruned: it has no workspace, and never falls back
    to its creator's or the person's."""


def nearest_worktree(tx: Tx, thread_id: str) -> Worktree | None:
    """The worktree a thread's tools act in: its own, else its nearest ancestor's (a helper
    without one shares its creator's); None: the workspace. NoWorkspace when a person pruned
    that worktree."""
    if not is_thread_id(thread_id):
        return None
    worktree = tx.worktrees.nearest(thread_id)
    if worktree is not None and worktree.status == "pruned":
        raise NoWorkspace(no_workspace(worktree.thread_id, worktree.branch,
                                       own=worktree.thread_id == thread_id))
    return worktree


def is_lace_file(path: str) -> bool:
    """Whether a changed path is lace's own (`lace.toml`, `.mcp.json`, `.lace*`), which a
    helper does not need and which does not hold a spawn back."""
    parts = path.split("/")
    return parts[-1] in ("lace.toml", ".mcp.json") or any(
        part.startswith(".lace") for part in parts)


def worktree_folders(repository: Path) -> Path:
    """Where this repository's worktrees go: `$LACE_HOME/worktrees/<name>-<hash>`, refused
    when that is inside the repository's working tree (file tools could not tell them apart)."""
    real = Path(os.path.realpath(repository))
    home = Path(os.path.realpath(lace_home()))
    folders = home / "worktrees" / f"{real.name}-{hashlib.sha256(bytes(real)).hexdigest()[:8]}"
    if folders == real or real in folders.parents:
        raise ToolError(f"lace's home folder {home} is inside the repository {real}, so helper "
                        "worktrees would be too; set LACE_HOME to a folder outside it.")
    return folders


def plan_origin(tx: Tx, context: ToolContext) -> WorktreeOrigin:
    """Where a new helper of the caller starts: the caller's worktree branch, else the branch
    checked out in the workspace, at its current commit. Refused outside a git repository,
    on a detached HEAD, before the first commit, and over uncommitted changes unless
    `[workspace] uncommitted = "copy"` (then they are copied onto the helper's branch); a
    caller's own worktree is lace's, so its changes are committed on its branch first."""
    creator = nearest_worktree(tx, context.thread_id)
    if creator is not None and not (Path(creator.folder) / ".git").exists():
        head = commit_of(creator.repository, f"refs/heads/{creator.branch}")
        return WorktreeOrigin(repository=creator.repository, base_branch=creator.branch,
                              base_commit=head or creator.base_commit,
                              folders=str(worktree_folders(Path(creator.repository))))
    if creator is not None:
        folder, repository, branch = Path(creator.folder), Path(creator.repository), \
            creator.branch
    else:
        folder, repository, branch = _workspace_branch(context)
    folders = worktree_folders(repository)
    base_commit = commit_of(folder, "HEAD")
    if base_commit is None:
        raise ToolError(f"{folder} has no commit yet; commit once before giving a helper a "
                        "worktree.")
    changed = [path for path in changed_paths(folder) if not is_lace_file(path)]
    if changed and creator is not None and creator.thread_id == context.thread_id:
        base_commit = checkpoint(creator, f"Work in progress of {creator.thread_id}, "
                                 "committed before it started a helper")
    elif changed:
        if context.workspace_settings.uncommitted != "copy":
            shown = named_few(changed, SHOWN_PATHS)
            raise ToolError(
                f"{folder} has uncommitted changes ({shown}) that a helper in its own worktree "
                "would not see. Commit them first (or stash them), spawn with isolation "
                '"none", or have a person set [workspace] uncommitted = "copy".')
        base_commit = snapshot(folder, base_commit, branch, context.thread_id)
    return WorktreeOrigin(repository=str(repository), base_branch=branch,
                          base_commit=base_commit, folders=str(folders))


def _workspace_branch(context: ToolContext) -> tuple[Path, Path, str]:
    """The workspace's working tree, its repository's main tree, and the branch checked out."""
    if context.workspace is None:
        raise ToolError("A helper in its own worktree needs a workspace, and this runtime "
                        'has none; spawn it with isolation "none".')
    top = top_level(context.workspace)
    if top is None:
        raise ToolError(f"The workspace {context.workspace} is not in a git repository, so "
                        "a helper cannot get a worktree of it. Run `git init` and commit "
                        'there first, or spawn with isolation "none".')
    branch = current_branch(top)
    if branch is None:
        raise ToolError(f"{top} has a detached HEAD: a helper's work must merge back into "
                        'a branch. Check one out first, or spawn with isolation "none".')
    return top, main_tree(top), branch


def checkpoint(worktree: Worktree, message: str) -> str:
    """Commit everything changed in a helper's worktree on its branch (author and committer
    `lace <thread id>`), if anything is; the branch's head."""
    folder = Path(worktree.folder)
    with _lock(worktree.repository):
        run_git(folder, ["add", "--all", "--", "."])
        staged = run_git(folder, ["diff", "--cached", "--quiet"], ok_codes=(0, 1))
        if staged.returncode == 1:
            run_git(folder, ["commit", "--quiet", "--no-verify", "-m", message],
                    extra_env=identity(worktree.thread_id))
    return git_text(folder, ["rev-parse", "HEAD"])


def snapshot(folder: Path, head: str, branch: str, actor: str) -> str:
    """A commit on top of `head` holding the working tree as it is (untracked files too),
    made through a scratch index: the tree, its index and its branch are left as they were."""
    with tempfile.TemporaryDirectory(prefix="lace-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_git(folder, ["read-tree", head], extra_env=index)
        run_git(folder, ["add", "--all", "--", "."], extra_env=index)
        tree = run_git(folder, ["write-tree"], extra_env=index).stdout.strip()
        message = f"Uncommitted changes of {branch}, copied for a helper"
        return run_git(folder, ["commit-tree", tree, "-p", head, "-m", message],
                       extra_env=identity(actor)).stdout.strip()


def materialized(worktree: Worktree) -> Path:
    """The worktree's folder, created on its branch (from its base commit) the first time;
    again after a crash it is the same folder, as the helper left it."""
    folder = Path(worktree.folder)
    if (folder / ".git").exists():
        return folder
    with _lock(worktree.repository):
        if (folder / ".git").exists():
            return folder
        private_folder(folder)  # git checks out into it: empty, and 0700
        who = identity(worktree.thread_id)  # its reflog names the helper
        if commit_of(worktree.repository, f"refs/heads/{worktree.branch}") is not None:
            run_git(worktree.repository, ["worktree", "add", str(folder), worktree.branch],
                    extra_env=who)
        else:
            run_git(worktree.repository, ["worktree", "add", "-b", worktree.branch,
                                          str(folder), worktree.base_commit], extra_env=who)
    return folder


@dataclass(frozen=True)
class CommittedWork:
    """What a helper's completion committed: the branch's head (None: no branch yet) and the
    files changed since its base commit."""

    commit: str | None
    diffstat: str

    def describe(self, worktree: Worktree) -> str:
        return completed_work(worktree.branch, self.commit, self.diffstat)


def commit_work(worktree: Worktree, title: str, result: str) -> CommittedWork:
    """Commit what the helper changed, with the task's title and result as the message, and
    sum up its branch since its base commit."""
    if not (Path(worktree.folder) / ".git").exists():
        head = commit_of(worktree.repository, f"refs/heads/{worktree.branch}")
        return CommittedWork(head, "" if head is None else diffstat(
            worktree.repository, worktree.base_commit, head))
    head = checkpoint(worktree, commit_message(title, result))
    return CommittedWork(head, diffstat(worktree.folder, worktree.base_commit, head))
