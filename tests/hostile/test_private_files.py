"""lace's home as another local user would look at it: after a run that used every feature that
writes there (`lace trust`, a `lace run` with helpers in git worktrees and MCP servers with their
logs, exports, the tokens of `lace mcp serve --http` and `lace web`), under the common umask
022, every file lace made there is 0600 and every folder 0700."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gitrepos import new_repository
from tests.hostile.test_mcp_http import mcp_http
from tests.lace_forks import run_lace
from tests.mcp_servers.harness import NOTES_SERVER
from tests.processes import lace_env
from tests.web_page import lace_web

PROMPT = "Write a file with the launch plan and write a file with the risks"


@pytest.fixture
def common_umask() -> Iterator[None]:
    """Every process of the test (lace's included) under umask 022, as most people's are."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def modes_in(home: Path) -> dict[str, str]:
    """The mode of everything under `home` (itself too), by path relative to it; a helper's
    checked-out files are its work, kept private by its worktree folder (listed), not their
    own mode."""
    found: dict[str, str] = {}
    for folder, folders, files in os.walk(home):
        here = Path(folder)
        found[str(here.relative_to(home))] = oct(stat.S_IMODE(here.stat().st_mode))
        if (here / ".git").is_file():  # a worktree: the helper's checkout
            folders.clear()
            continue
        for name in files:
            path = here / name
            found[str(path.relative_to(home))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def test_every_file_lace_makes_in_its_home_is_its_owners_alone(tmp_path: Path,
                                                               common_umask: None) -> None:
    home = tmp_path / "home"  # lace creates it
    settings = tmp_path / "settings.toml"  # the person's own
    settings.write_text(f'[workspace]\nisolation = "worktree"\n'
                        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\n'
                        f'args = ["{NOTES_SERVER}"]\n')
    repo = new_repository(tmp_path / "shop", {"shop.py": "print('shop')\n"})
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"more-notes": {
        "command": sys.executable, "args": [str(NOTES_SERVER)]}}}))
    env = lace_env(home, LACE_CONFIG=str(settings))

    def lace(*argv: str) -> subprocess.CompletedProcess[str]:
        done = run_lace([*argv], env=env, cwd=repo, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    lace("trust", "--yes")
    lace("run", "--yes", PROMPT)
    with sqlite3.connect(home / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
    lace("export", root, "-o", str(home / "session.json"))
    lace("export", root, "--format", "markdown", "-o", str(home / "session.md"))
    with mcp_http(home):
        pass
    web = tmp_path / "web"
    web.mkdir()
    with lace_web(web, env=lace_env(home)):
        pass
    modes = modes_in(home)
    worktrees = home / "worktrees"
    assert {"lace.db", "trusted-folders.json", "mcp-logs/notes.log", "mcp-logs/more-notes.log",
            "session.json", "tokens/mcp", "tokens/web",
            f"worktrees/{os.listdir(worktrees)[0]}/{root}.1"} <= set(modes), sorted(modes)
    wrong = {path: mode for path, mode in modes.items()
             if mode != (oct(0o700) if (home / path).is_dir() else oct(0o600))}
    assert wrong == {}
