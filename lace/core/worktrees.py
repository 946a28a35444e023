"""Worktrees of writing helpers: where one starts (`WorktreeOrigin`), its row (`Worktree`), the
branch and git identity of a helper, and the texts people and creators read about them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from lace.core.shown import named_few

WORKTREE_STATUSES: Final = ("active", "merged", "pruned")
"""`active`: the helper's branch holds work not merged yet (or none); `merged`: merged into its
base branch by a creator or a person; `pruned`: its folder and branch were removed by a person."""
ISOLATIONS: Final = ("none", "worktree")
Isolation = Literal["none", "worktree"]
BRANCH_PREFIX = "lace/"
EMAIL_DOMAIN = "lace"


def branch_for(thread_id: str) -> str:
    """The branch a helper's worktree is on: `lace/<thread id>`."""
    return f"{BRANCH_PREFIX}{thread_id}"


def identity(actor: str) -> dict[str, str]:
    """Git's author and committer variables for commits lace makes for `actor` (a thread id
    or `human`): `lace <actor>`, whatever the machine's git configuration says."""
    return {"GIT_AUTHOR_NAME": "lace", "GIT_AUTHOR_EMAIL": actor,
            "GIT_COMMITTER_NAME": "lace", "GIT_COMMITTER_EMAIL": actor}


def commit_message(title: str, result: str) -> str:
    """A helper's commit message: the task's title (one line), then its result; without NUL
    characters, which no command-line argument can hold."""
    subject = " ".join(title.replace("\0", "").split())[:120] or "lace helper work"
    body = result.replace("\0", "").strip()
    return f"{subject}\n\n{body}\n" if body else f"{subject}\n"


@dataclass(frozen=True)
class WorktreeOrigin:
    """Where a planned helper's worktree starts: the repository (its main working tree), the
    branch it merges back into and the commit it starts from, and the folder that holds this
    repository's worktrees (under `$LACE_HOME/worktrees/`)."""

    repository: str
    base_branch: str
    base_commit: str
    folders: str

    def to_json(self) -> dict[str, Any]:
        """The origin as JSON (inside a held plan)."""
        return asdict(self)


@dataclass(frozen=True)
class Worktree:
    """The `worktrees` row of a helper."""

    thread_id: str
    repository: str
    folder: str
    branch: str
    base_branch: str
    base_commit: str
    status: str
    merged_commit: str | None
    """The base branch's commit that merged it."""
    merged_head: str | None
    """The head of its branch that was merged: later commits are not merged."""
    created_at: str
    updated_at: str


def completed_work(branch: str, commit: str | None, diffstat: str) -> str:
    """What a completion notice adds about a helper's worktree: its branch, its last commit
    and the files changed since it started, or that it changed nothing."""
    if commit is None or not diffstat.strip():
        return f"Worktree: branch {branch} has no changes."
    return (f"Worktree: branch {branch} at commit {commit[:12]}, not merged yet "
            f"(worktree_merge merges it).\n{diffstat.rstrip()}")


def merged(branch: str, target: str, commit: str, strategy: str) -> str:
    """What a merge reports."""
    how = "squashed into one commit on" if strategy == "squash" else "merged into"
    return f"{branch} {how} {target}: commit {commit[:12]}."


def conflict(branch: str, target: str, files: list[str]) -> str:
    """What a refused merge reports: the files in conflict; nothing was changed."""
    listed = named_few(files, 20)
    return (f"Merging {branch} into {target} conflicts in {listed}. Nothing was changed: "
            f"{target} and {branch} are as they were. Resolve it on {branch} (or ask a person) "
            "and merge again.")


def no_workspace(owner: str, branch: str, *, own: bool) -> str:
    """What a helper is told when it acts on its workspace after a person pruned the worktree
    it worked in (its own, or the one of `owner` above it that it shared)."""
    whose = "Your worktree" if own else f"The worktree of {owner}, which you shared,"
    return (f"{whose} (branch {branch}) was pruned by a person: you have no workspace now, so "
            "file tools and bash are refused, and no helper of yours can get a worktree. Do "
            "not retry: report back, or complete your task with what you have.")


def not_resumable(thread_id: str, owner: str, branch: str) -> str:
    """Why a person cannot resume a helper whose worktree (its own, or `owner`'s above it that
    it shared) they pruned, and what to do instead."""
    whose = "its worktree" if owner == thread_id else f"the worktree of {owner} it shared"
    return (f"{thread_id} cannot be resumed: {whose} (branch {branch}) was pruned, so it has "
            "nowhere to work. Complete its task yourself (lace task complete TASK_ID) or give "
            "the work to a new helper (lace task add ... --assign new:PROVIDER/MODEL).")


def pruned_work(branch: str) -> str:
    """What a completion notice adds when a person pruned the helper's worktree."""
    return f"Worktree: branch {branch} was pruned by a person; nothing was committed."
