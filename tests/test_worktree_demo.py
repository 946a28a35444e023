"""The new user's trial as a test: the offline demo model in a small real repository with
`[workspace] isolation = "worktree"`: two workers each write a file on their own branch, then
`lace worktrees`, `lace merge` and `lace merge --squash` bring both into main."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from tests.gitrepos import git, new_repository, status
from tests.lace_forks import run_lace
from tests.processes import lace_env

PROMPT = "Write a file with the launch plan and write a file with the risks"


def lace(home: Path, repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_lace([*argv], env=lace_env(home), cwd=repo, timeout=120)


def test_two_demo_workers_write_files_on_their_branches_and_both_merge(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[workspace]\nisolation = "worktree"\n')
    repo = new_repository(tmp_path / "shop", {"shop.py": "print('shop')\n"})
    first = git(repo, "rev-parse", "main")
    ran = lace(home, repo, "run", "--yes", PROMPT)
    assert ran.returncode == 0, ran.stderr
    assert status(repo) == "" and git(repo, "rev-parse", "main") == first
    with sqlite3.connect(home / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
    plan, risks = f"{root}.1", f"{root}.2"
    files = {plan: "write-a-file-with-the-launch-plan.md", risks: "write-a-file-with-the-risks.md"}
    for helper, name in files.items():
        assert git(repo, "show", "--name-only", "--format=", f"lace/{helper}") == name
        assert f"Worktree: branch lace/{helper} at commit" in ran.stdout
    listed = lace(home, repo, "worktrees").stdout.splitlines()
    assert [line.split("  ")[:2] for line in listed] == [
        [plan, "done"], [risks, "done"], [f"{root}.3", "empty"]]
    merged = lace(home, repo, "merge", plan)
    squashed = lace(home, repo, "merge", risks, "--squash")
    assert (merged.returncode, squashed.returncode) == (0, 0), merged.stderr + squashed.stderr
    assert sorted(path.name for path in repo.iterdir() if path.suffix == ".md") == sorted(
        files.values())
    assert git(repo, "rev-list", "--count", "--merges", "main") == "1"
    assert git(repo, "log", "--format=%s", "-1", "main") == "write a file with the risks"
    assert status(repo) == ""
