"""A helper killed between two writes in its worktree (the process exits hard at a crash
point), then `lace run --continue`: it continues in the same worktree, and its commit holds
what it wrote before and after the crash."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lace.runtime.crash import CRASH_EXIT_CODE
from tests.conftest import query
from tests.gitrepos import git, new_repository, status
from tests.lace_forks import run_lace
from tests.processes import lace_env

REPO_ROOT = Path(__file__).resolve().parent.parent


def run(home: Path, repo: Path, *argv: str, crash_at: str | None = None,
        ) -> subprocess.CompletedProcess[str]:
    config = home / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[workspace]\nisolation = "worktree"\n')
    env = lace_env(home, LACE_TEST_PROVIDERS="1",
                   **({"LACE_CRASH_AT": crash_at} if crash_at else {}))
    return run_lace([*argv, "--workspace", str(repo), "--yes"], env=env, cwd=REPO_ROOT,
                    module="tests.worktree_process")


def test_a_helper_resumed_after_a_crash_continues_in_its_worktree(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", new_repository(tmp_path / "repo")
    # model replies: the root's delegate (1), the helper's first write (2), its second (3)
    crashed = run(home, repo, "run", "go", "--model", "scripted/root",
                  crash_at="after_model_reply@3")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    (root,), = query(home / "lace.db", "SELECT id FROM threads WHERE parent_id IS NULL")
    helper = f"{root}.1"
    (folder_text,), = query(home / "lace.db", "SELECT folder FROM worktrees")
    folder = Path(folder_text)
    assert (folder / "a.txt").read_text() == "a.txt\n" and not (folder / "b.txt").exists()
    resumed = run(home, repo, "run", "--continue", root)
    assert resumed.returncode == 0, resumed.stderr
    assert query(home / "lace.db", "SELECT folder FROM worktrees") == [(str(folder),)]
    listed = git(repo, "worktree", "list", "--porcelain")
    assert listed.count("\nworktree ") == 1 and f"worktree {folder}\n" in listed
    assert git(repo, "show", "--name-only", "--format=%s", f"lace/{helper}").splitlines() == [
        "Write two files", "", "a.txt", "b.txt"]
    assert git(repo, "rev-list", "--count", f"main..lace/{helper}") == "1"
    assert status(folder) == "" and status(repo) == ""
    (result,), = query(home / "lace.db", "SELECT content FROM task_notes WHERE author = ? "
                                         "ORDER BY id DESC LIMIT 1", helper)
    commit = git(repo, "rev-parse", f"lace/{helper}")
    assert result.startswith(f"wrote both files\n\nWorktree: branch lace/{helper} at commit "
                             f"{commit[:12]}, not merged yet")
