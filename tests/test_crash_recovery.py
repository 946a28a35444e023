"""A process that dies hard at each crash point, then `lace run --continue`, reaches the same
final board as a run that was never killed: nothing lost, nothing delivered or done twice."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lace.runtime.crash import CRASH_EXIT_CODE, POINTS

PROMPT = "Write the announcement and list the risks"


def lace(home: Path, *argv: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("LACE_") and not key.endswith("_API_KEY")}
    env["LACE_HOME"] = str(home)
    if crash_at:
        env["LACE_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "lace", *argv], capture_output=True, text=True,
                          env=env, timeout=120)


def final_board(home: Path) -> dict[str, Any]:
    """The session's tasks, notes and deliveries with ids normalised."""
    with sqlite3.connect(home / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")

        def norm(value: Any) -> Any:
            return value.replace(root, "ROOT") if isinstance(value, str) else value

        tasks = sorted(tuple(map(norm, row)) for row in connection.execute(
            "SELECT title, status, priority, assigned_to, created_by FROM tasks"))
        notes = sorted(tuple(map(norm, row)) for row in connection.execute(
            "SELECT t.title, n.author, n.content FROM task_notes n JOIN tasks t "
            "ON t.id = n.task_id"))
        notices = sorted(tuple(map(norm, row)) for row in connection.execute(
            "SELECT i.thread_id, i.kind, i.sender, t.title FROM inbox i LEFT JOIN tasks t "
            "ON t.id = i.task_id WHERE i.kind NOT IN ('resume', 'reminder')"))
        undelivered = connection.execute(
            "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL").fetchone()
        deliveries = connection.execute(
            "SELECT json_extract(data, '$.inbox_id'), COUNT(*) FROM events WHERE "
            "json_extract(data, '$.inbox_id') IS NOT NULL GROUP BY 1 HAVING COUNT(*) > 1"
        ).fetchall()
        consumed = connection.execute("SELECT COUNT(*) FROM inbox WHERE consumed_at IS NOT "
                                      "NULL").fetchone()
        delivered = connection.execute("SELECT COUNT(DISTINCT json_extract(data, '$.inbox_id')) "
                                       "FROM events").fetchone()
        checks = (connection.execute("PRAGMA integrity_check").fetchall(),
                  connection.execute("PRAGMA foreign_key_check").fetchall())
        statuses = {row[0] for row in connection.execute("SELECT status FROM agent_metadata")}
    assert undelivered == (0,) and deliveries == [] and consumed == delivered
    assert checks == ([("ok",)], []) and statuses == {"idle"}
    return {"tasks": tasks, "notes": notes, "notices": notices}


@pytest.fixture(scope="module")
def clean_board(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("clean")
    result = lace(home, "run", PROMPT)
    assert result.returncode == 0, result.stderr
    return final_board(home)


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_point_loses_and_repeats_nothing(point: str, tmp_path: Path,
                                                         clean_board: dict[str, Any]) -> None:
    crashed = lace(tmp_path, "run", PROMPT, crash_at=point)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
    resumed = lace(tmp_path, "run", "--continue", root)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("All 2 tasks are done.")
    assert final_board(tmp_path) == clean_board
