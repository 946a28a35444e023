"""A TAB is not a command: completing any line, however odd (an open quote, control
characters, a database that does not exist, an untrusted lace.toml in the folder), runs no
command, reads no project file, writes nothing and never prints a traceback into the shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.test_completion import completions


def test_completing_odd_lines_runs_nothing_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    lines = ['lace show "unterminated', "lace show \x1b[2J\x07", "lace --db /nowhere/x.db tas",
             "lace run --yes rm -rf ", "lace trust --y", "lace import /etc/pass",
             "lace " + "x" * 5000]
    offered = completions(home, lines)
    assert sorted(offered[2]) == ["task", "tasks"] and offered[4] == ["--yes"]
    assert not home.exists() and not Path("/nowhere").exists()


def test_completing_in_an_untrusted_repository_reads_none_of_it(tmp_path: Path) -> None:
    repo, marker = tmp_path / "repo", tmp_path / "server-ran"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "lace.toml").write_text(f'[mcp_servers.evil]\ncommand = "touch"\nargs = ["{marker}"]\n')
    offered = completions(tmp_path / "home", ["lace mcp l", "lace tasks --"], cwd=repo)
    assert offered[0] == ["list"] and "--json" in offered[1]
    assert not marker.exists() and not (tmp_path / "home").exists()
