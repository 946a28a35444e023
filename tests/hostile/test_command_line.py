"""The command line's output as a person's tools see it: a reader that closes the pipe early
(`lace threads | head -1`) ends lace quietly, and a refused `lace merge` names the file that
blocked it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitrepos import git, status
from tests.lace_forks import lace_popen
from tests.processes import lace, lace_env
from tests.test_worktree_commands import helpers
from tests.test_worktree_commands import lace as lace_in_process

__all__ = ["helpers"]  # the fixture, shared with the worktree commands' tests


@pytest.mark.parametrize("command", [["threads"], ["tasks", "--all"], ["cost"]])
def test_a_reader_that_closes_the_pipe_ends_lace_quietly(tmp_path: Path,
                                                          command: list[str]) -> None:
    """The reader is gone before lace writes its first line (it closed its end at once), so
    every write lace makes meets a closed pipe: lace ends as `yes | head -1` does, killed
    by SIGPIPE's exit code and silent."""
    home = tmp_path / "home"
    assert lace(home, "run", "Write the announcement and list the risks.").returncode == 0
    process = lace_popen([sys.executable, "-m", "lace", *command], env=lace_env(home),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (128 + signal.SIGPIPE, "")


def test_head_reads_one_line_of_a_long_conversation(tmp_path: Path) -> None:
    """The shell's own pipe, as a person types it: the conversation (a 100 KB prompt) is
    longer than a pipe holds, so lace is still writing when `head` leaves."""
    home = tmp_path / "home"
    assert lace(home, "run", "word " * 20_000).returncode == 0
    root = lace(home, "threads").stdout.split()[0]
    done = subprocess.run(["bash", "-c", f"'{sys.executable}' -m lace show {root} | head -1; "
                           "echo \"exit ${PIPESTATUS[0]}\" >&2"], env=lace_env(home),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == f"Thread {root}  root  demo/coordinator  [idle]\n"
    assert done.stderr == f"exit {128 + signal.SIGPIPE}\n"


def test_a_refused_merge_names_the_file_that_blocked_it(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An untracked file in the base branch's working tree where the helper's branch adds
    one of the same name: git refuses to overwrite it, and the person learns which."""
    repo, first, _ = helpers
    (repo / "a.txt").write_text("the person's own, never added\n")
    before = git(repo, "rev-parse", "main")
    code, out, err = lace_in_process(capsys, db_path, "merge", first)
    assert (code, out) == (1, "")
    assert "a.txt" in err and err.count("\n") == 1, err
    assert "Nothing was changed" in err
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "a.txt").read_text() == "the person's own, never added\n"
    assert status(repo) == "?? a.txt"


def test_a_merge_never_overwrites_a_file_git_ignores(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A helper's branch that adds a file the person's tree ignores (their `.env`, say):
    git would overwrite it silently; lace refuses and names it."""
    repo, _, second = helpers
    (repo / ".git" / "info" / "exclude").write_text("b.txt\n")
    (repo / "b.txt").write_text("SECRET=the person's own\n")
    before = git(repo, "rev-parse", "main")
    code, out, err = lace_in_process(capsys, db_path, "merge", second)
    assert (code, out) == (1, "")
    assert err == (f"lace: Merging lace/{second} would overwrite b.txt in {repo}, which git does "
                   "not track on main; move it away, then merge again. Nothing was "
                   "changed.\n")
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "b.txt").read_text() == "SECRET=the person's own\n"
