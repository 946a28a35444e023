"""`lace run` as a person uses it: the offline demo, JSON, exit codes, timeouts and --continue."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lace.llm.types import ScriptedReply
from tests.conftest import query
from tests.conftest import run_cli as lace
from tests.lace_forks import lace_popen, run_lace
from tests.processes import lace_env
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]



def test_the_offline_demo_runs_in_a_fresh_process(tmp_path: Path) -> None:
    env = lace_env(tmp_path)
    result = subprocess.run([sys.executable, "-m", "lace", "run",
                             "Write the announcement and list the risks."],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("All 3 tasks are done.")
    assert "Write the announcement" in result.stdout and "list the risks" in result.stdout
    assert "- Sum up the results: Done: summed up 2 results ('Write the announcement', " \
        "'list the risks')" in result.stdout
    assert result.stderr.count("spawned (demo/worker)") == 3
    # the summing-up helper is spawned only once both parts are completed
    spawns = [line for line in result.stderr.splitlines()
              if "spawned (demo/worker)" in line or "task_complete(" in line]
    assert [("spawned" in line) for line in spawns] == [True, True, False, False, True, False]
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        statuses = connection.execute("SELECT status FROM tasks").fetchall()
        children = connection.execute(
            "SELECT COUNT(*) FROM threads WHERE parent_id IS NOT NULL").fetchone()
        edges = connection.execute("SELECT COUNT(*) FROM task_dependencies").fetchone()
    assert statuses == [("completed",)] * 3 and children == (3,) and edges == (2,)


def test_json_summary(capsys: CaptureFixture, db_path: Path) -> None:
    code, out, _ = lace(capsys, "run", "Research and write", "--json", "--db", str(db_path))
    summary = json.loads(out)
    assert code == 0 and summary["root_status"] == "idle"
    assert summary["answer"].startswith("All 3 tasks are done.")
    assert len(summary["threads"]) == 4 and {t["status"] for t in summary["tasks"]} == {
        "completed"}
    assert summary["usage"]["tokens_in"] == sum(t["tokens_in"] for t in summary["threads"]) > 0


@pytest.mark.parametrize(("argv", "message"), [
    (["run"], "give a prompt"),
    (["run", "hi", "--model", "gpt-4o"], "Expected provider/model"),
    (["run", "hi", "--model", "foo/bar"], "Unknown provider 'foo'"),
    (["run", "hi", "--model", "openai/gpt-4o"], "OPENAI_API_KEY"),
    (["run", "--continue", "lace_20990101_zzzzzz"], "no lace board at"),
    (["run", "hi", "--timeout", "-1"], "must be more than 0"),
])
def test_bad_usage_exits_2_and_writes_nothing(capsys: CaptureFixture, db_path: Path,
                                              argv: list[str], message: str) -> None:
    code, out, err = lace(capsys, *argv, "--db", str(db_path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    if db_path.exists():
        with sqlite3.connect(db_path) as connection:
            assert connection.execute("SELECT COUNT(*) FROM threads").fetchone() == (0,)


def test_a_failing_root_model_exits_1(capsys: CaptureFixture, db_path: Path,
                                      models: ScriptedModels) -> None:
    from lace.llm.litellm_setup import litellm

    def broken(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise litellm().BadRequestError("no such model", llm_provider="scripted", model="x")

    models.on("broken", broken)
    code, _, err = lace(capsys, "run", "hi", "--model", "scripted/broken", "--db", str(db_path))
    assert code == 1 and "failed: BadRequestError" in err


def test_timeout_marks_turns_interrupted_and_continue_resumes(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    slow = [True]

    async def sleepy(messages: list[dict[str, Any]]) -> ScriptedReply:
        if slow[0]:
            await asyncio.sleep(30)
        resumed = any("interrupted" in (m.get("content") or "") for m in messages)
        return reply("resumed and done" if resumed else "done")

    models.on("sleepy", sleepy)
    code, _, err = lace(capsys, "run", "hi", "--model", "scripted/sleepy", "--timeout", "0.5",
                        "--db", str(db_path))
    assert code == 3 and "timed out" in err
    with sqlite3.connect(db_path) as connection:
        (root, status), = connection.execute("SELECT thread_id, status FROM agent_metadata")
    assert status == "interrupted"
    slow[0] = False
    code, out, err = lace(capsys, "run", "--continue", root, "--model", "scripted/sleepy",
                          "--db", str(db_path))
    assert code == 0 and out == "resumed and done\n" and "Resuming 1 interrupted" in err
    code, out, _ = lace(capsys, "run", "--continue", root, "and more?", "--model",
                        "scripted/sleepy", "--db", str(db_path))
    assert code == 0
    with sqlite3.connect(db_path) as connection:
        kinds = connection.execute("SELECT kind, sender FROM inbox ORDER BY id").fetchall()
        status = connection.execute("SELECT status FROM agent_metadata").fetchone()
    assert kinds == [("message", "human"), ("resume", "lace"), ("message", "human")]
    assert status == ("idle",)


def test_ctrl_c_marks_running_turns_interrupted(tmp_path: Path) -> None:
    import signal
    import time

    env = {key: value for key, value in os.environ.items() if not key.startswith("LACE_")}
    env.update(LACE_HOME=str(tmp_path), LACE_DEMO_DELAY="0.4")
    process = lace_popen([sys.executable, "-m", "lace", "run", "one and two"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    database = tmp_path / "lace.db"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
                running = connection.execute(
                    "SELECT COUNT(*) FROM agent_metadata WHERE status = 'running' AND "
                    "parent_thread_id IS NOT NULL").fetchone()[0]
        except sqlite3.OperationalError:  # not created or not migrated yet
            running = 0
        if running:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    (root,), = sqlite3.connect(database).execute(
        "SELECT id FROM threads WHERE parent_id IS NULL").fetchall()
    assert f"; resume with lace run --continue {root}" in err and "Traceback" not in err
    with sqlite3.connect(database) as connection:
        statuses = {row[0] for row in connection.execute("SELECT status FROM agent_metadata")}
    assert "running" not in statuses and "interrupted" in statuses


def test_stop_resume_and_session_end_from_the_command_line(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    from lace.runtime.tool_runner import call_tool
    from lace.store import Store, open_database
    from lace.tools.base import ToolContext

    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        root = tx.threads.create_session(provider="scripted", model="root")
    created = call_tool(store, ToolContext(thread_id=root.id, session_id=root.id), "task_create",
                        {"tasks": [{"title": "Job", "prompt": "p",
                                    "assigned_to": "new:scripted/worker"}]})
    task_id = created.text.split()[2].rstrip(":")
    store.close()
    child = f"{root.id}.1"
    db = str(db_path)
    code, out, _ = lace(capsys, "stop", child, "--reason", "wrong approach", "--db", db)
    assert code == 0 and out == f"Stopped 1 agent(s): {child}\n"
    code, _, err = lace(capsys, "stop", child, "--db", db)
    assert code == 0
    code, out, _ = lace(capsys, "threads", "--db", db)
    assert "[stopped (wrong approach (by human))]" in out and "subtree" in out
    models.on("worker", lambda messages: reply("back at it"))
    models.on("root", lambda messages: reply("noted"))
    code, out, err = lace(capsys, "resume", child, "--db", db)
    assert code == 0 and "Resumed" in err
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status FROM agent_metadata WHERE thread_id = ?",
                                  (child,)).fetchone() == ("idle",)
        answer = connection.execute(
            "SELECT json_extract(data, '$.message.content') FROM events WHERE thread_id = ? "
            "AND type = 'agent_message'", (child,)).fetchall()
    assert answer == [("back at it",)]
    code, _, err = lace(capsys, "resume", child, "--db", db)
    assert code == 2 and "not stopped" in err
    code, out, _ = lace(capsys, "session", "end", root.id, "--reason", "done for today",
                        "--db", db)
    assert code == 0 and out == f"Session {root.id} ended; 2 agent(s) stopped.\n"
    with sqlite3.connect(db_path) as connection:
        reasons = connection.execute("SELECT DISTINCT stop_reason FROM agent_metadata"
                                     ).fetchall()
        assert connection.execute("SELECT status FROM tasks WHERE id = ?",
                                  (task_id,)).fetchone() == ("blocked",)
    assert reasons == [("session ended: done for today (by human)",)]


def test_continue_while_another_process_runs_the_session_waits_for_its_answer(
        tmp_path: Path) -> None:
    """`lace run --continue ROOT "more"` while another `lace run` holds the session: the
    message reaches the root, this process waits (it said at once that the session ended
    without an answer, and exited 1), then prints the answer both processes agree on."""
    import time

    env = lace_env(tmp_path, LACE_DEMO_DELAY="2")  # each model call: the first runs ~8 s on
    first = lace_popen([sys.executable, "-m", "lace", "run", "one and two"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    database = tmp_path / "lace.db"
    deadline = time.monotonic() + 60
    helpers = 0
    while helpers == 0:
        assert time.monotonic() < deadline, "the first run spawned no helper"
        time.sleep(0.05)
        try:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
                helpers = connection.execute("SELECT COUNT(*) FROM threads "
                                             "WHERE parent_id IS NOT NULL").fetchone()[0]
        except sqlite3.OperationalError:  # not created or not migrated yet
            pass
    (root,), = sqlite3.connect(database).execute(
        "SELECT id FROM threads WHERE parent_id IS NULL").fetchall()
    second = run_lace(["run", "--continue", root, "and three"], env=env, timeout=120)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert f"Session {root} is also run by another lace process; waiting" in second.stderr
    assert "Traceback" not in second.stderr
    with sqlite3.connect(database) as connection:
        messages = [text for (text,) in connection.execute(
            "SELECT data FROM events WHERE thread_id = ? AND type = 'user_message'", (root,))]
    assert any("and three" in text for text in messages), messages
    assert out.strip() and second.stdout == out  # the root's last answer, in both


@pytest.mark.parametrize("assign", [["--assign", "new:demo/worker"], []])
def test_a_task_the_person_adds_reaches_the_root_at_the_next_continue(
        capsys: CaptureFixture, db_path: Path, assign: list[str]) -> None:
    """The person adds a task to a session they talked to: its root takes it up (one with no
    `--assign` is the root's: the assignment notice) or hears of it and of its result, and
    `lace run --continue` answers about it instead of repeating the old answer."""
    db = str(db_path)
    code, out, _ = lace(capsys, "run", "Write the announcement and list the risks.", "--json",
                        "--db", db)
    session = json.loads(out)["session"]
    code, out, err = lace(capsys, "task", "add", "Check the prices", *assign, "--db", db,
                          "--json")
    assert code == 0, err
    task = json.loads(out)["tasks"][0]
    told = "The person added task" if assign else "You have been assigned task"
    assert (task["assigned_to"] == session) != bool(assign)
    assert [text.splitlines()[0] for (text,) in query(
        db_path, "SELECT text FROM inbox WHERE thread_id = ? AND task_id = ?", session,
        task["id"])] == [f"[LACE TASK SYSTEM] {told} '{task['id']}'" + (
            " to the board:" if assign else ":")]
    code, out, err = lace(capsys, "run", "--continue", session, "--db", db)
    assert code == 0, err
    assert out.startswith("The person's task is done:\n- Check the prices: Done: "), out
    assert query(db_path, "SELECT status FROM tasks WHERE id = ?", task["id"]) == [
        ("completed",)]


@pytest.mark.parametrize("halt", [["stop"], ["session", "end"]])
def test_a_task_added_without_assign_leaves_a_root_the_person_halted_halted(
        capsys: CaptureFixture, db_path: Path, halt: list[str]) -> None:
    """`lace task add` with no `--assign` after the person stopped the root or ended the
    session: the task is nobody's and the root stays stopped (a default assignment to the root
    resumed it, and the next lace process spent its model calls)."""
    db = str(db_path)
    code, out, _ = lace(capsys, "run", "Write the announcement.", "--json", "--db", db)
    session = json.loads(out)["session"]
    code, _, err = lace(capsys, *halt, session, "--db", db)
    assert code == 0, err
    code, out, err = lace(capsys, "task", "add", "Check the prices", "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)["tasks"][0]["assigned_to"] is None
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                 session) == [("stopped",)]


def test_a_task_added_without_assign_to_an_imported_session_is_nobodys(
        capsys: CaptureFixture, db_path: Path, tmp_path: Path) -> None:
    """An imported session is the latest (a file's dates say so): `lace task add` with no
    `--assign` gives its task to nobody, not to the imported root, which the person here never
    wrote to (the file's messages are its author's) and which runs nothing until resumed."""
    code, out, _ = lace(capsys, "run", "Write the announcement.", "--json", "--db",
                        str(tmp_path / "theirs.db"))
    session = json.loads(out)["session"]
    exported = tmp_path / "theirs.json"
    code, _, err = lace(capsys, "export", session, "-o", str(exported), "--db",
                        str(tmp_path / "theirs.db"))
    assert code == 0, err
    code, out, err = lace(capsys, "import", str(exported), "--json", "--db", str(db_path))
    assert code == 0, err
    code, out, err = lace(capsys, "task", "add", "Check the prices", "--db", str(db_path),
                          "--json")
    assert code == 0, err
    added = json.loads(out)
    assert added["session"] == session and added["tasks"][0]["assigned_to"] is None


def test_the_persons_own_task_reaches_the_root_without_waking_it(
        capsys: CaptureFixture, db_path: Path) -> None:
    """A task the person gives themselves (`--assign human`) and then completes: the root
    hears of both with its next turn, and neither starts one (each woke the root to spend a
    model call telling the person what they had just done, and each command said the root
    waited for a lace process)."""
    db = str(db_path)
    code, out, _ = lace(capsys, "run", "Write the announcement.", "--json", "--db", db)
    session = json.loads(out)["session"]
    code, out, err = lace(capsys, "task", "add", "Sign off", "--assign", "human", "--db", db,
                          "--json")
    assert code == 0 and "no lace process" not in err, err
    task_id = json.loads(out)["tasks"][0]["id"]
    code, _, err = lace(capsys, "task", "complete", task_id, "Signed.", "--db", db)
    assert code == 0 and "no lace process" not in err, err
    assert query(db_path, "SELECT kind, wakes FROM inbox WHERE thread_id = ? AND task_id = ? "
                 "ORDER BY id", session, task_id) == [("status", 0), ("completion", 0)]
    code, out, err = lace(capsys, "run", "--continue", session, "What is left?", "--db", db)
    assert code == 0, err
    assert query(db_path, "SELECT count(*) FROM inbox WHERE thread_id = ? AND task_id = ? "
                 "AND consumed_at IS NULL", session, task_id) == [(0,)]


def test_the_line_of_a_batch_that_came_back_names_each_of_its_tasks(
        capsys: CaptureFixture, db_path: Path) -> None:
    """The demo's three tasks settle together: the root's `←` line names all three, not the
    last one alone."""
    code, out, err = lace(capsys, "run", "Write the announcement and list the risks.", "--json",
                          "--db", str(db_path))
    assert code == 0, err
    tasks = {task["title"]: task["id"] for task in json.loads(out)["tasks"]}
    session = json.loads(out)["session"]
    ordered = [tasks["Write the announcement"], tasks["list the risks"],
               tasks["Sum up the results"]]
    returned = [line for line in err.splitlines() if " ← " in line]
    assert returned in ([f"  {session} ← {', '.join(ordered)} completed"],
                        [f"  {session} ← {', '.join([ordered[1], ordered[0], ordered[2]])} "
                         "completed"]), err
