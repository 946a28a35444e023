"""Every command that prints a result takes `--json`, and with it prints JSON alone on stdout
(messages go to stderr): the command tree is walked, so a new command without the flag fails
here, and each command is then run with it as a person would (issue 33, item 9)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from lace.cli import build_parser
from lace.store import Store, open_database
from tests.conftest import query, run_cli

CaptureFixture = pytest.CaptureFixture[str]

PRINTS_NO_RESULT = {
    (): "the app: a full-screen program, not a result",
    ("worker",): "runs agents until stopped, narrating on stderr",
    ("web",): "serves the app until stopped",
    ("mcp", "serve"): "serves the board until stopped; stdout carries the MCP protocol",
    ("acp",): "serves an editor until it leaves; stdout carries the ACP protocol",
    ("completion",): "prints shell code for the shell to read",
    ("export",): "prints the session document itself: JSON by default (--format)",
    ("task",): "with no action it only says to choose one",
    ("session",): "with no action it only says to choose one",
    ("keys",): "with no action it only says to choose one",
    ("mcp",): "with no action it only says to choose one",
    ("db",): "with no action it only says to choose one",
}
"""The commands that print no result a program could read, and why."""


def command_tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                 ) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.update(command_tree(child, (*path, name)))
    return found


def test_every_command_that_prints_a_result_takes_json() -> None:
    tree = command_tree(build_parser())
    assert set(PRINTS_NO_RESULT) <= set(tree), "a command listed here is gone"
    without = sorted(" ".join(path) for path, parser in tree.items()
                     if path not in PRINTS_NO_RESULT
                     and "--json" not in parser._option_string_actions)
    assert without == [], f"commands that print a result without --json: {without}"
    listed_anyway = sorted(" ".join(path) for path in PRINTS_NO_RESULT
                           if "--json" in tree[path]._option_string_actions)
    assert listed_anyway == [], f"take --json: not results-free any more: {listed_anyway}"


def lace_json(capsys: CaptureFixture, *argv: str, code: int = 0) -> Any:
    """`lace ARGV --json`: its stdout, which must be one JSON document and nothing else."""
    exit_code, out, err = run_cli(capsys, *argv, "--json")
    assert exit_code == code, (argv, err)
    return json.loads(out)


def test_each_result_is_json_alone_on_stdout(capsys: CaptureFixture, db_path: Path,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    db = ("--db", str(db_path))
    added = lace_json(capsys, "task", "add", "Review the plan", "--assign", "human", *db)
    session, (task,) = added["session"], added["tasks"]
    assert (task["title"], task["assigned_to"], task["status"]) == (
        "Review the plan", "human", "pending")
    noted = lace_json(capsys, "task", "note", task["id"], "looks fine", *db)
    assert noted["message"] == f"Added note 1 to task {task['id']}." and noted["session"] == session
    done = lace_json(capsys, "task", "complete", task["id"], "approved", *db)
    assert done["tasks"][0]["status"] == "completed"

    helper_task = lace_json(capsys, "task", "add", "Count the words", "--assign",
                            "new:demo/worker", *db)["tasks"][0]
    helper = helper_task["assigned_to"]
    assert lace_json(capsys, "stop", helper, *db) == {"thread_id": helper, "stopped": [helper]}
    resumed = lace_json(capsys, "resume", helper, *db)  # the person's board: no answer owed
    assert resumed["session"] == session and {"answer", "tasks", "usage"} <= set(resumed)

    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        asked = tx.approvals.request(helper, "bash", {"command": "ls"})
    store.close()
    assert [approval["id"] for approval in lace_json(capsys, "approvals", *db)] == [asked]
    denied = lace_json(capsys, "deny", str(asked), *db)
    assert (denied["id"], denied["status"], denied["orphaned"]) == (asked, "denied", True)

    ended = lace_json(capsys, "session", "end", session, *db)
    assert ended["session"] == session

    exported = tmp_path / "session.json"
    assert run_cli(capsys, "export", session, "-o", str(exported), *db)[0] == 0
    imported = lace_json(capsys, "import", str(exported), *db)
    assert imported["exported_as"] == session and imported["session"] != session
    assert imported["tasks"] == 2

    assert lace_json(capsys, "db", "path", *db) == {"database": str(db_path)}
    assert lace_json(capsys, "db", "upgrade", *db) == {"database": str(db_path),
                                                         "schema": "up to date"}
    detached = lace_json(capsys, "run", "--detach", "Say hi.", *db)
    assert query(db_path, "SELECT id FROM threads WHERE id = ?", detached["session"]) == [
        (detached["session"],)]

    monkeypatch.setattr("sys.stdin", io.StringIO("sk-json-test-key\n"))
    stored = lace_json(capsys, "keys", "set", "openai")
    assert (stored["provider"], stored["variable"]) == ("openai", "OPENAI_API_KEY")
    assert "sk-json-test-key" not in json.dumps(stored)
    assert lace_json(capsys, "keys", "list") == [{"provider": "openai",
                                                  "variable": "OPENAI_API_KEY"}]

    project = tmp_path / "project"
    project.mkdir()
    (project / "lace.toml").write_text('model = "demo/coordinator"\n')
    trusted = lace_json(capsys, "trust", str(project), "--yes")
    assert trusted == {"folder": str(project), "files": ["lace.toml"], "trusted": True}
    assert lace_json(capsys, "trust", str(project)) == trusted  # already trusted
    assert lace_json(capsys, "mcp", "list", "--workspace", str(project)) == []


def test_a_refused_trust_is_json_too(capsys: CaptureFixture, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lace.toml").write_text('model = "demo/coordinator"\n')
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, err = run_cli(capsys, "trust", str(tmp_path), "--json")
    assert code == 1 and json.loads(out) == {"folder": str(tmp_path), "files": ["lace.toml"],
                                             "trusted": False}
    assert 'model = "demo/coordinator"' in err and "Not trusted" in err
