"""lace's home as another local user would look at it: after a run that used every feature that
writes there (a `lace run` with helpers in git worktrees, an MCP server and its log, approved
`.mcp.json` servers, exports), under the common umask 022, every file lace made there is 0600
and every folder 0700."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from tests.gitrepos import new_repository
from tests.mcp_servers.harness import NOTES_SERVER
from tests.processes import lace_env

PROMPT = "Write a file with the launch plan and write a file with the risks"


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


def test_every_file_lace_makes_in_its_home_is_its_owners_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"  # lace creates it
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[workspace]\nisolation = "worktree"\n'
                        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\n'
                        f'args = ["{NOTES_SERVER}"]\n')
    repo = new_repository(tmp_path / "shop", {"shop.py": "print('shop')\n"})
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"more-notes": {
        "command": sys.executable, "args": [str(NOTES_SERVER)]}}}))
    env = lace_env(home, LACE_CONFIG=str(settings))

    def lace(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "lace", *argv], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=120, umask=0o022)
        assert done.returncode == 0, done.stderr
        return done

    lace("mcp", "list", "--approve")
    lace("run", "--yes", PROMPT)
    with sqlite3.connect(home / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
    lace("export", root, "-o", str(home / "session.json"))
    lace("export", root, "--format", "markdown", "-o", str(home / "session.md"))
    modes = modes_in(home)
    assert {"lace.db", "mcp-approved.json", "mcp-logs/notes.log", "mcp-logs/more-notes.log",
            "session.json", f"worktrees/{os.listdir(home / 'worktrees')[0]}/{root}.1"
            } <= set(modes), sorted(modes)
    wrong = {path: mode for path, mode in modes.items()
             if mode != (oct(0o700) if (home / path).is_dir() else oct(0o600))}
    assert wrong == {}
