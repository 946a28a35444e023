"""The command line as a person uses it: board commands, one-line errors, help everywhere."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lace.cli import build_parser
from lace.store import Store
from tests.conftest import run_cli as lace
from tests.conftest import snapshot

CaptureFixture = pytest.CaptureFixture[str]



def test_a_person_runs_the_board_by_hand(capsys: CaptureFixture, db_path: Path) -> None:
    db = str(db_path)
    code, out, err = lace(capsys, "tasks", "--db", db)
    assert (code, out) == (2, "") and "no lace board at" in err and not db_path.exists()
    code, out, err = lace(capsys, "--db", db, "task", "add", "Review the plan", "--assign",
                          "human", "--priority", "high")
    assert code == 0 and out.startswith("Created task task_") and "(assigned to human)" in out
    assert err.startswith("Started session lace_")
    task_id = out.split()[2].rstrip(":")
    code, out, _ = lace(capsys, "task", "note", task_id, "looks fine", "--db", db)
    assert code == 0 and out == f"Added note 1 to task {task_id}.\n"
    code, out, _ = lace(capsys, "task", "complete", task_id, "approved", "--db", db)
    assert code == 0 and out == f"Completed task {task_id}: Review the plan\n"
    code, out, _ = lace(capsys, "tasks", "--db", db)
    assert "(no open tasks)" in out
    code, out, _ = lace(capsys, "tasks", "--all", "--json", "--db", db)
    board = json.loads(out)
    assert [(t["id"], t["status"], t["note_count"]) for t in board["tasks"]] == [
        (task_id, "completed", 2)]
    code, out, _ = lace(capsys, "threads", "--db", db)
    assert out.startswith(board["session"]) and "demo/coordinator" in out and "[idle]" in out
    code, out, _ = lace(capsys, "show", board["session"], "--db", db)
    assert out.startswith(f"Thread {board['session']}")


def test_bad_board_commands_write_nothing(capsys: CaptureFixture, db_path: Path) -> None:
    db = str(db_path)
    lace(capsys, "task", "add", "first", "--db", db)
    before = snapshot(db_path)
    for argv in (["task", "add", "x", "--assign", "new:foo/bar"],
                 ["task", "add", "x", "--assign", "nobody"],
                 ["task", "complete", "task_20990101_000000", "m"],
                 ["task", "add", "x" * 201],
                 ["tasks", "--session", "lace_20990101_zzzzzz"]):
        code, out, err = lace(capsys, *argv, "--db", db)
        assert code == 2 and out == "" and err.startswith("lace: error:"), (argv, err)
        assert err.count("\n") == 1, err
    assert snapshot(db_path) == before


@pytest.mark.parametrize(("assignee", "said"), [
    ("new:foo/bar", "Unknown provider 'foo'"), ("nobody", "Malformed assignee 'nobody'"),
    ("new:foo/", "Malformed assignee 'new:foo/'"), ("new:nosuch", "Unknown profile 'nosuch'"),
    ("acp:nosuch", "No ACP agent 'nosuch' in [acp_agents]"),
    ("lace_20990101_zzzzzz.1", "No session yet, so 'lace_20990101_zzzzzz.1' names no agent")])
def test_a_bad_first_task_creates_no_session(capsys: CaptureFixture, db_path: Path,
                                             assignee: str, said: str) -> None:
    code, out, err = lace(capsys, "task", "add", "x", "--assign", assignee, "--db", str(db_path))
    assert (code, out) == (2, "") and said in err and err.count("\n") == 1, err
    assert not db_path.exists()  # refused before the board is made


def test_a_first_task_for_a_configured_acp_agent_is_taken(
        capsys: CaptureFixture, db_path: Path, isolated_home: Path) -> None:
    isolated_home.mkdir()
    (isolated_home / "config.toml").write_text('[acp_agents.gemini]\ncommand = "gemini"\n')
    code, out, err = lace(capsys, "task", "add", "x", "--assign", "acp:gemini", "--db",
                          str(db_path))
    assert code == 0 and out.startswith("Created task task_"), err


@pytest.mark.parametrize("argv", [["frobnicate"], ["tasks", "--limit", "zero"],
                                  ["tasks", "--limit", "0"], ["task", "add"], ["show"]])
def test_bad_command_lines_get_one_line(capsys: CaptureFixture, argv: list[str]) -> None:
    code, out, err = lace(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "error:" in err and "--help" in err


def test_a_database_of_another_app_is_one_line(capsys: CaptureFixture, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE t (x)")
    code, _, err = lace(capsys, "tasks", "--db", str(other))
    assert code == 2 and err == f"lace: error: {other} is not a lace database (it holds other " \
                                "tables).\n"


def test_db_path_and_upgrade(capsys: CaptureFixture, isolated_home: Path, db_path: Path) -> None:
    assert lace(capsys, "db", "path")[1] == f"{isolated_home / 'lace.db'}\n"
    code, out, _ = lace(capsys, "db", "upgrade", "--db", str(db_path))
    assert code == 0 and "up to date" in out and db_path.exists()


def test_every_command_has_help_text() -> None:
    parser = build_parser()
    pending = [parser]
    seen = 0
    while pending:
        current = pending.pop()
        for action in current._actions:
            if action.choices and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    assert sub.description, f"{name} has no help text"
                    pending.append(sub)
                    seen += 1
    assert seen >= 9


def test_python_dash_m_lace_answers_help() -> None:
    result = subprocess.run([sys.executable, "-m", "lace", "--help"], capture_output=True,
                            text=True, check=True)
    assert "task board for LLM agents" in result.stdout and "tasks" in result.stdout


HUGE = "99999999999999999999999"


@pytest.mark.parametrize("argv", [
    ["approve", HUGE], ["deny", HUGE], ["approve", "-1"], ["tasks", "--limit", HUGE + "999"],
    ["run", "go", "--timeout", "nan"], ["run", "go", "--timeout", "inf"],
    ["run", "go", "--timeout", "-inf"]])
def test_out_of_range_numbers_get_one_line(capsys: CaptureFixture, db_path: Path,
                                           argv: list[str]) -> None:
    lace(capsys, "task", "add", "first", "--db", str(db_path))
    before = snapshot(db_path)
    code, out, err = lace(capsys, *argv, "--db", str(db_path))
    assert (code, out) == (2, "") and err.startswith("lace") and err.count("\n") == 1, err
    assert snapshot(db_path) == before


def test_lace_resume_refuses_a_timeout_that_is_not_a_number(capsys: CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["resume", "x", "--timeout", "nan"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.endswith("argument --timeout: must be a finite number of "
                                            "seconds, got 'nan' (see lace resume --help)\n")


def test_a_database_url_lace_cannot_use_is_one_line(capsys: CaptureFixture) -> None:
    code, out, err = lace(capsys, "tasks", "--db", "mysql://ann:s3cret@localhost/lace")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "lace stores its board in SQLite" in err and "s3cret" not in err, err
    code, _, err = lace(capsys, "tasks", "--db", "sqlite://")
    assert code == 2 and err.count("\n") == 1 and "in memory" in err, err


def test_a_missing_folder_is_refused_not_created(capsys: CaptureFixture, tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "dir"
    code, out, err = lace(capsys, "task", "add", "x", "--db", str(missing / "x.db"))
    assert (code, out) == (2, "")
    assert err == (f"lace: error: the folder {missing} does not exist; create it, or leave out "
                   "--db to use lace's own folder.\n")
    assert not (tmp_path / "missing").exists()
    code, out, err = lace(capsys, "tasks", "--db", str(tmp_path))
    assert (code, out, err) == (2, "", f"lace: error: {tmp_path} is a folder; --db takes a "
                                       "database file.\n")


def test_tasks_on_a_database_with_no_session_is_an_empty_board(
        capsys: CaptureFixture, db_path: Path, store: Store) -> None:
    code, out, err = lace(capsys, "tasks", "--db", str(db_path))
    assert (code, err) == (0, "") and out.startswith("No tasks: no session yet"), out
    code, out, err = lace(capsys, "tasks", "--json", "--db", str(db_path))
    assert (code, out, err) == (0, "[]\n", "")
