"""A process that dies hard at each crash point, then `lace run --continue`, reaches the same
final board as a run that was never killed: nothing lost, nothing delivered or done twice."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.runtime.crash import CRASH_EXIT_CODE, POINTS
from tests.lace_forks import lace_popen, run_lace
from tests.processes import MANY_PROMPT, board_rows, final_board, lace, lace_env

PROMPT = "Write the announcement and list the risks"
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def clean_board(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("clean")
    result = lace(home, "run", PROMPT)
    assert result.returncode == 0, result.stderr
    return final_board(home)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the crashed run writes: the home's SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "lace.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_point_loses_and_repeats_nothing(
        point: str, tmp_path: Path, database: str, clean_board: dict[str, Any]) -> None:
    crashed = lace(tmp_path, "run", PROMPT, crash_at=point, db=database)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    (root,), = board_rows(database, "SELECT id FROM threads WHERE parent_id IS NULL")
    resumed = lace(tmp_path, "run", "--continue", root, db=database)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("All 3 tasks are done.")
    assert final_board(tmp_path, database) == clean_board  # the same board as SQLite's, unkilled
    assert_each_task_started_once_after_its_blockers(database)


def assert_each_task_started_once_after_its_blockers(database: Path | str) -> None:
    """Every task got exactly one agent, created no earlier than the completion of each task
    it waited for (the completion's note and the agent commit together)."""
    agents = board_rows(
        database, "SELECT t.title, COUNT(a.thread_id), MIN(a.created_at) FROM tasks t LEFT "
                  "JOIN agent_metadata a ON a.created_for_task = t.id GROUP BY t.id")
    completions = dict(board_rows(
        database, "SELECT d.task_id || ' ' || d.blocked_by, MAX(n.created_at) FROM "
                  "task_dependencies d JOIN task_notes n ON n.task_id = d.blocked_by "
                  "GROUP BY d.task_id, d.blocked_by"))
    edges = board_rows(database, "SELECT t.title, a.created_at, d.task_id || ' ' || "
                                 "d.blocked_by FROM task_dependencies d JOIN tasks t ON t.id = "
                                 "d.task_id JOIN agent_metadata a ON a.created_for_task = "
                                 "d.task_id")
    assert [count for _, count, _ in agents] == [1] * len(agents), agents
    assert edges, "the plan has no dependencies"
    for title, spawned_at, edge in edges:
        assert spawned_at >= completions[edge], f"{title} started before its blocker completed"


@pytest.fixture(scope="module")
def clean_diamond(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("diamond")
    result = diamond_run(home, "run", "Plan it.", "--model", "scripted/root")
    assert result.returncode == 0, result.stderr
    return final_board(home)


def diamond_run(home: Path, *argv: str, crash_at: str | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """`lace` with the scripted diamond of `tests.diamond` in a child process."""
    env = lace_env(home, LACE_TEST_PROVIDERS="1",
                   **({"LACE_CRASH_AT": crash_at} if crash_at else {}))
    return run_lace(list(argv), env=env, cwd=REPO_ROOT, module="tests.diamond_process")


DIAMOND_CRASHES = [*(f"after_tool_effect@{n}" for n in (2, 3, 4, 6, 7, 8)),
                   *(f"{point}@{n}" for point in POINTS if point != "after_tool_effect"
                     for n in (3, 7 if point == "after_model_reply" else 6))]
"""The tool effects around the two releases (the third and the seventh complete the blockers
that release B and C, then D): just before, the release itself, just after; and each other
point early and late (six turns in all: the root's first, one per task, and the root's one
wake for the whole plan). Each case is two `lace` processes (about 13 s): the whole matrix of
every pass would add minutes to CI for passes that release nothing."""


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", DIAMOND_CRASHES)
def test_a_crash_anywhere_in_a_diamond_never_starts_a_task_twice_or_early(
        crash_at: str, tmp_path: Path, clean_diamond: dict[str, Any]) -> None:
    """A; B and C after A; D after B and C: killed at a crash point, then `run --continue`d,
    the run reaches the board of a run never killed, each task with one agent created in (or
    after) the transaction that completed its last blocker."""
    crashed = diamond_run(tmp_path, "run", "Plan it.", "--model", "scripted/root",
                          crash_at=crash_at)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
    resumed = diamond_run(tmp_path, "run", "--continue", root)
    assert resumed.returncode == 0, resumed.stderr
    assert final_board(tmp_path) == clean_diamond
    assert_each_task_started_once_after_its_blockers(tmp_path / "lace.db")


COMMITTED = {
    "tasks": "SELECT id, title, prompt, created_by FROM tasks",
    "task_notes": "SELECT id, task_id, author, content FROM task_notes",
    "events": "SELECT id, thread_id, type, data FROM events",
    "inbox": "SELECT id, thread_id, kind, sender, text FROM inbox",
}


def committed_rows(home: Path) -> set[tuple[Any, ...]]:
    """Every committed task, note, event and inbox row (their unchanging columns)."""
    with sqlite3.connect(home / "lace.db") as connection:
        return {(table, *row) for table, query in COMMITTED.items()
                for row in connection.execute(query)}


def wait_for_progress(home: Path, before: int, process: subprocess.Popen[bytes]) -> bool:
    """Wait until the run has committed more than `before` rows (False if it ended first)."""
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if len(committed_rows(home)) > before:
                return True
        except sqlite3.OperationalError:
            pass  # not created or not migrated yet
        time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def clean_many(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The board of an unkilled `lace run MANY_PROMPT` (the same for every seed: run once)."""
    clean_home = tmp_path_factory.mktemp("clean-many")
    assert lace(clean_home, "run", MANY_PROMPT).returncode == 0
    return final_board(clean_home)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sigkills_lose_and_repeat_nothing(seed: int, tmp_path: Path,
                                                 clean_many: dict[str, Any]) -> None:
    """`lace run` with three slow workers is killed with SIGKILL at random moments (up to three
    times, each after the run made progress), each time resumed with `lace run --continue`;
    nothing committed is lost and the final board is the one an unkilled run reaches."""
    clean = clean_many
    home, rng = tmp_path / "killed", random.Random(seed)
    env = lace_env(home, LACE_DEMO_DELAY="0.1")
    argv, kills = ["run", MANY_PROMPT], 0
    with (tmp_path / "lace.log").open("w") as log:
        for _attempt in range(4):
            process = lace_popen([sys.executable, "-m", "lace", *argv], env=env,
                                       stdout=log, stderr=log)
            before = len(committed_rows(home)) if (home / "lace.db").exists() else 0
            if kills == 3 or not wait_for_progress(home, before + rng.randint(0, 20), process):
                break
            time.sleep(rng.uniform(0, 0.2))
            seen = committed_rows(home)
            process.kill()
            process.wait()
            kills += 1
            assert seen <= committed_rows(home), f"rows lost after kill {kills} (seed {seed})"
            with sqlite3.connect(home / "lace.db") as connection:
                (root,), = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL")
            argv = ["run", "--continue", root]
        process.wait(timeout=120)
    assert process.returncode == 0, (tmp_path / "lace.log").read_text()
    assert kills >= 1, f"seed {seed}: the run ended before the first kill"
    assert final_board(home) == clean
    assert_each_task_started_once_after_its_blockers(home / "lace.db")
