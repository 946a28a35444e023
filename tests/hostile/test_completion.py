"""A TAB is not a command: completing any line, however odd (an open quote, control
characters, a database that does not exist, an untrusted lace.toml in the folder), runs no
command, reads no project file, writes nothing and never prints a traceback into the shell."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

from tests.completing import completions
from tests.processes import lace

BUSY_TIMEOUT_S = 5.0
"""SQLite's busy timeout on lace's connections: a TAB's read waited this long for a lock."""


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


def agent_of_model(db: Path, model: str) -> None:
    """A helper of the board's first session running `model`, written by hand (or by an import
    of someone else's export): nothing in the database says its model can be typed."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(agent_metadata)")]
        row = dict(zip(columns, connection.execute(
            "SELECT * FROM agent_metadata WHERE parent_thread_id IS NULL").fetchone(),
                       strict=True))
        helper = f"{row['thread_id']}.{uuid.uuid4().hex[:6]}"
        connection.execute("INSERT INTO threads (id, parent_id, root_id, title, created_at, "
                           "updated_at) SELECT ?, id, root_id, title, created_at, updated_at "
                           "FROM threads WHERE id = ?", (helper, row["thread_id"]))
        row.update(thread_id=helper, parent_thread_id=row["thread_id"], model=model)
        connection.execute(f"INSERT INTO agent_metadata ({', '.join(row)}) VALUES "
                           f"({', '.join('?' * len(row))})", list(row.values()))
        connection.commit()


def test_a_tab_offers_no_model_that_would_reach_the_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert lace(home, "run", "--detach", "Say hi.").returncode == 0
    for model in ("evil\x1b]0;title\x07", "two\nlines", "white space", "vertical\x0btab",
                  "bidi\u202eexe.txt", "typed-by-a-person"):
        agent_of_model(home / "lace.db", model)
    offered = completions(home, ["lace run --model ", "lace run --model demo/t"])
    assert offered == [["demo/coordinator", "demo/typed-by-a-person"],
                       ["demo/typed-by-a-person"]]


def test_a_tab_on_a_locked_board_answers_without_waiting_for_it(tmp_path: Path) -> None:
    """Another process holds the file exclusively: the TAB offers no id rather than waiting
    SQLite's busy timeout (5 s) for each read, as it did."""
    home = tmp_path / "home"
    assert lace(home, "run", "--detach", "Say hi.").returncode == 0
    with contextlib.closing(sqlite3.connect(home / "lace.db", isolation_level=None)) as holder:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE threads SET title = title")
        assert completions(home, ["lace run --model "]) == [["demo/coordinator"]]
        started = time.monotonic()
        offered = completions(home, ["lace show lace_"])
        took = time.monotonic() - started
    assert offered == [[]]
    # It read twice at SQLite's busy timeout each (10.6 s); now at most 1 s each, and the
    # bound leaves room for a loaded machine starting bash and Python (5.5 s seen in CI for
    # two TABs).
    assert took < 1.6 * BUSY_TIMEOUT_S, f"{took:.1f} s for one TAB"
