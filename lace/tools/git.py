"""The `git` binary, run with an argument list (never a shell), isolated from the machine's
git configuration, hooks and signing, and from `GIT_*` variables that would point it elsewhere;
plus the few questions lace asks a repository."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from lace.tools.base import ToolError

GIT_TIMEOUT_S = 120
ISOLATION = ("-c", f"core.hooksPath={os.devnull}", "-c", "commit.gpgsign=false",
             "-c", "core.fsmonitor=false", "-c", "core.quotePath=false",
             "-c", "advice.detachedHead=false")
"""Settings for every call: no hook runs, no file-system monitor command (a repository's own
`.git/config` may name one), no signing prompt, file names shown as they are."""


class GitError(ToolError):
    """git refused or failed: its message, for the model or the person to act on."""


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without `GIT_*` variables, with the system and global configuration
    ignored and no prompt for credentials; `extra` on top."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("GIT_")}
    environment.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
                       GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    environment.update(extra or {})
    return environment


def run_git(folder: Path | str, arguments: Sequence[str], *,
            extra_env: Mapping[str, str] | None = None,
            ok_codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    """`git -C folder ARGUMENTS`; a GitError unless it exits with one of `ok_codes`."""
    try:
        done = subprocess.run(["git", "-C", str(folder), *ISOLATION, *arguments],
                              capture_output=True, text=True, errors="replace",
                              env=git_environment(extra_env), timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed (no `git` on the PATH).") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {arguments[0]} took more than {GIT_TIMEOUT_S} s.") from None
    if done.returncode not in ok_codes:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise GitError(f"git {arguments[0]} failed in {folder}: "
                       f"{said[-1] if said else f'exit code {done.returncode}'}")
    return done


def git_text(folder: Path | str, arguments: Sequence[str]) -> str:
    """The standard output of a git command, stripped."""
    return run_git(folder, arguments).stdout.strip()


def top_level(folder: Path | str) -> Path | None:
    """The top of the working tree `folder` is in, or None outside a git repository."""
    done = run_git(folder, ["rev-parse", "--show-toplevel"], ok_codes=(0, 128))
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def main_tree(folder: Path | str) -> Path:
    """The repository's main working tree (the first `git worktree list` entry)."""
    first = git_text(folder, ["worktree", "list", "--porcelain"]).splitlines()[0]
    return Path(first.removeprefix("worktree "))


def current_branch(folder: Path | str) -> str | None:
    """The branch checked out in `folder`, or None when HEAD is detached."""
    done = run_git(folder, ["symbolic-ref", "--quiet", "--short", "HEAD"], ok_codes=(0, 1))
    return done.stdout.strip() or None


def commit_of(folder: Path | str, revision: str) -> str | None:
    """The commit a revision names, or None when there is none."""
    done = run_git(folder, ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                   ok_codes=(0, 1, 128))
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def changed_paths(folder: Path | str, *, untracked: bool = True) -> list[str]:
    """Paths with uncommitted changes in a working tree (untracked files too, unless not
    `untracked`)."""
    output = run_git(folder, ["status", "--porcelain=v1", "-z",
                              f"--untracked-files={'all' if untracked else 'no'}"]).stdout
    entries = output.split("\0")
    paths, index = [], 0
    while index < len(entries):
        entry = entries[index]
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC":  # a rename is followed by its old name
                index += 1
        index += 1
    return paths


def checked_out_at(folder: Path | str, branch: str) -> Path | None:
    """The working tree where `branch` is checked out, if any."""
    place = None
    for line in git_text(folder, ["worktree", "list", "--porcelain"]).splitlines():
        if line.startswith("worktree "):
            place = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}":
            return place
    return None


def is_ancestor(folder: Path | str, older: str, newer: str) -> bool:
    """Whether commit `older` is contained in `newer`."""
    done = run_git(folder, ["merge-base", "--is-ancestor", older, newer], ok_codes=(0, 1))
    return done.returncode == 0


def diffstat(folder: Path | str, base: str, head: str, *, max_files: int = 20) -> str:
    """`git diff --stat` from `base` to `head`, at most `max_files` files and the summary."""
    lines = run_git(folder, ["diff", "--stat=100", base, head]).stdout.rstrip().splitlines()
    if len(lines) > max_files + 1:
        lines = [*lines[:max_files], f" … {len(lines) - 1 - max_files} more files", lines[-1]]
    return "\n".join(lines)
