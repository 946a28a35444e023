"""Real git repositories for tests, made and read with the git binary, independent of the
machine's git configuration (identity passed explicitly, global and system config ignored)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TEST_IDENTITY = {"GIT_AUTHOR_NAME": "Test Person", "GIT_AUTHOR_EMAIL": "person@example.com",
                 "GIT_COMMITTER_NAME": "Test Person", "GIT_COMMITTER_EMAIL": "person@example.com"}


def git(folder: Path, *arguments: str, ok: bool = True) -> str:
    """`git -C folder ARGUMENTS` as a person would run it; its output (stripped)."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("GIT_")}
    environment.update(TEST_IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    done = subprocess.run(["git", "-C", str(folder), *arguments], capture_output=True,
                          text=True, env=environment, check=False)
    if ok:
        assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def new_repository(folder: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on branch main with one commit holding `files`."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "--quiet", "--initial-branch=main")
    for name, content in (files or {"README.md": "# project\n"}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    git(folder, "add", "--all")
    git(folder, "commit", "--quiet", "-m", "first")
    return folder


def branches(folder: Path) -> list[str]:
    return git(folder, "for-each-ref", "--format=%(refname:short)", "refs/heads").splitlines()


def status(folder: Path) -> str:
    """`git status --porcelain`: empty when the working tree is clean."""
    return git(folder, "status", "--porcelain", "--untracked-files=all")
