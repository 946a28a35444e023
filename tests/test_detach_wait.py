"""`lace run --detach` and `lace wait`: a session started for workers (its id alone on stdout,
no agent run), waited on by a process that runs none, reported with `lace run`'s answer and exit
codes; a timeout, Ctrl+C and bad input leave the board as it was."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lace.cli.run import NOT_WITH_DETACH
from lace.core.records import Thread
from lace.llm.types import ScriptedReply
from lace.store import Store
from tests.conftest import query, run_cli, snapshot, spawn_child
from tests.lace_forks import lace_popen, run_lace
from tests.processes import MANY_PROMPT, lace_env
from tests.scripted import ScriptedModels, reply
from tests.workers import assert_delivered_once, live_processes, new_database, ready, worker

CaptureFixture = pytest.CaptureFixture[str]
SESSION_ID = re.compile(r"lace_\d{8}_[a-z0-9]{6}")
EXIT_STILL_RUNNING = 124
SUMMED_UP = ("SELECT COUNT(*) FROM events WHERE thread_id = ? AND type = 'agent_message' "
             "AND data LIKE '%tasks are done%'")


def lace(db: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m lace ARGV --db DB` run to its end in a child process."""
    return run_lace([*argv, "--db", str(db)], env=lace_env(db.parent), timeout=timeout)


def detach(db: Path, prompt: str = MANY_PROMPT) -> str:
    """`lace run --detach PROMPT`: the session id it printed (and nothing else)."""
    started = lace(db, "run", "--detach", prompt)
    assert started.returncode == 0, started.stderr
    assert SESSION_ID.fullmatch(started.stdout.rstrip("\n")) and started.stdout.count("\n") == 1
    return started.stdout.rstrip("\n")


def answer_of_lace_run(capsys: CaptureFixture, tmp_path: Path, prompt: str) -> str:
    """What `lace run PROMPT` prints on a database of its own."""
    code, out, err = run_cli(capsys, "run", prompt, "--db", str(tmp_path / "run.db"))
    assert code == 0, err
    return out


@pytest.mark.slow
def test_detach_prints_the_id_only_runs_no_agent_and_wait_times_out_without_a_worker(
        tmp_path: Path) -> None:
    db = new_database(tmp_path)
    started = lace(db, "run", "--detach", MANY_PROMPT)
    assert started.returncode == 0, started.stderr
    root = started.stdout.rstrip("\n")
    assert started.stdout == f"{root}\n" and SESSION_ID.fullmatch(root)
    assert f"lace wait {root}" in started.stderr and "lace worker" in started.stderr
    assert query(db, "SELECT id, parent_id FROM threads") == [(root, None)]
    assert query(db, "SELECT sender, kind, text, consumed_at FROM inbox") == [
        ("human", "message", MANY_PROMPT, None)]
    assert query(db, "SELECT provider, model, status FROM agent_metadata") == [
        ("demo", "coordinator", "idle")]
    assert query(db, "SELECT COUNT(*) FROM events") == [(0,)]
    assert query(db, "SELECT COUNT(*) FROM llm_calls") == [(0,)]
    assert query(db, "SELECT COUNT(*) FROM processes") == [(0,)]
    before = snapshot(db)
    waited = lace(db, "wait", root, "--timeout", "0.5")
    assert waited.returncode == EXIT_STILL_RUNNING and waited.stdout == ""
    assert f"session {root} still runs after 0.5s" in waited.stderr
    assert "Traceback" not in waited.stderr
    assert (f"lace: no lace process runs this board, so {root} waits for one; start one with: "
            f"lace run --continue {root} (or lace worker --session {root}, which stays)"
            ) in waited.stderr.splitlines()
    assert snapshot(db) == before  # it ran no agent and wrote nothing


@pytest.mark.slow
def test_two_workers_run_a_detached_fan_out_once_and_wait_prints_runs_answer(
        capsys: CaptureFixture, tmp_path: Path) -> None:
    db = new_database(tmp_path)
    root = detach(db)
    with worker(tmp_path, db, "--session", root, name="named") as named, \
            worker(tmp_path, db, name="every") as every:
        waited = lace(db, "wait", root)
        ready(db, 2)
        workers = set(live_processes(db))  # the wait holds no lease: it runs no agent
        for process in (named, every):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == answer_of_lace_run(capsys, tmp_path, MANY_PROMPT)
    assert waited.stdout.startswith("All 4 tasks are done.")
    assert query(db, SUMMED_UP, root) == [(1,)]
    assert_delivered_once(db)
    assert {row[0] for row in query(db, "SELECT lease_holder FROM agent_metadata")} <= workers
    # each demo helper takes one turn of two model calls (its tool call, its answer): a turn run
    # twice, by both workers, would show here
    assert query(db, "SELECT agent_metadata.thread_id, turns, COUNT(llm_calls.id) FROM "
                     "agent_metadata JOIN llm_calls USING (thread_id) WHERE parent_thread_id "
                     "IS NOT NULL GROUP BY 1 ORDER BY 1") == [
        (f"{root}.{n}", 1, 2) for n in range(1, 5)]
    code, out, _ = run_cli(capsys, "wait", root, "--json", "--db", str(db))
    summary = json.loads(out)
    tokens_in, tokens_out = query(db, "SELECT SUM(tokens_in), SUM(tokens_out) FROM "
                                      "agent_metadata")[0]
    assert code == 0 and summary == {
        "session": root, "status": "quiet", "root_status": "idle",
        "answer": waited.stdout.removesuffix("\n"), "tasks": {"completed": 4},
        "usage": {"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": 0.0},
        "exit_code": 0}
    assert tokens_in > 0


def test_wait_reports_a_failed_root_with_runs_exit_code(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    from lace.llm.litellm_setup import litellm

    def broken(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise litellm().BadRequestError("no such model", llm_provider="scripted", model="x")

    models.on("broken", broken)
    ran = run_cli(capsys, "run", "hi", "--model", "scripted/broken", "--db", str(db_path))
    (root,), = query(db_path, "SELECT id FROM threads")
    waited = run_cli(capsys, "wait", root, "--db", str(db_path))
    assert ran[0] == waited[0] == 1 and waited[1] == ran[1]
    assert "lace: the root agent failed: BadRequestError" in waited[2]
    code, out, _ = run_cli(capsys, "wait", root, "--json", "--db", str(db_path))
    summary = json.loads(out)
    assert code == 1 and summary["exit_code"] == 1 and summary["root_status"] == "error"
    assert summary["status"] == "quiet" and summary["answer"] is None


def test_a_detached_session_can_be_run_by_lace_run_continue_and_markup_is_escaped(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J[bold]done[/bold] <script>x</script>"
    models.on("evil", lambda messages: reply(hostile))
    code, out, _ = run_cli(capsys, "run", "--detach", "say it", "--model", "scripted/evil",
                           "--db", str(db_path))
    root = out.rstrip("\n")
    assert code == 0 and SESSION_ID.fullmatch(root)
    code, out, _ = run_cli(capsys, "wait", root, "--timeout", "0.2", "--json",
                           "--db", str(db_path))
    assert code == EXIT_STILL_RUNNING and json.loads(out) == {
        "session": root, "status": "running", "root_status": "idle", "answer": None,
        "tasks": {}, "usage": {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0},
        "exit_code": EXIT_STILL_RUNNING}
    ran = run_cli(capsys, "run", "--continue", root, "--db", str(db_path))
    waited = run_cli(capsys, "wait", root, "--db", str(db_path))
    assert ran[0] == waited[0] == 0 and waited[1] == ran[1]
    assert "\x1b" not in waited[1] and "\x07" not in waited[1]
    assert "[bold]done[/bold] <script>x</script>" in waited[1]
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                          "WHERE type = 'agent_message'") == [(hostile,)]


@pytest.mark.slow
def test_ctrl_c_stops_waiting_quietly_and_leaves_the_session_untouched(
        capsys: CaptureFixture, db_path: Path) -> None:
    code, out, _ = run_cli(capsys, "run", "--detach", MANY_PROMPT, "--db", str(db_path))
    root = out.rstrip("\n")
    assert code == 0 and SESSION_ID.fullmatch(root)
    before = snapshot(db_path)
    waiting = lace_popen([sys.executable, "-m", "lace", "wait", root, "--db",
                                str(db_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=lace_env(db_path.parent))
    assert waiting.stderr is not None
    assert waiting.stderr.readline() == f"Waiting for session {root} (Ctrl+C stops waiting, " \
                                        "not the session)\n"
    assert waiting.stderr.readline().startswith("lace: no lace process runs this board")
    waiting.send_signal(signal.SIGINT)
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 130 and out == ""
    assert err == f"lace: stopped waiting; session {root} is left as it is (lace wait {root} " \
                  "waits again)\n"
    assert snapshot(db_path) == before


@pytest.mark.slow
def test_a_session_ended_while_waited_on_ends_the_wait_with_runs_code(
        capsys: CaptureFixture, db_path: Path) -> None:
    code, out, _ = run_cli(capsys, "run", "--detach", MANY_PROMPT, "--db", str(db_path))
    root = out.rstrip("\n")
    waiting = lace_popen([sys.executable, "-m", "lace", "wait", root, "--json", "--db",
                                str(db_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=lace_env(db_path.parent))
    assert waiting.stderr is not None and waiting.stderr.readline().startswith("Waiting")
    ended = run_cli(capsys, "session", "end", root, "--db", str(db_path))
    out, err = waiting.communicate(timeout=60)
    assert code == 0 and ended[0] == 0 and waiting.returncode == 1, err  # no root's answer
    summary = json.loads(out)
    assert (summary["status"], summary["root_status"], summary["answer"],
            summary["exit_code"]) == ("quiet", "stopped", None, 1)
    assert query(db_path, "SELECT consumed_at FROM inbox") == [(None,)]  # no agent ran


@pytest.fixture
def board(store: Store, session: Thread) -> dict[str, str]:
    """A database holding a session and a child: the ids bad commands name."""
    return {"ROOT": session.id, "CHILD": spawn_child(store, session.id)}


BAD_INPUT = [
    (["wait", "lace_20990101_zzzzzz"], "Unknown thread 'lace_20990101_zzzzzz'"),
    (["wait", "lace_\x1b[2J\x1b]0;pwned\x07"], "Unknown thread 'lace_\\x1b[2J"),
    (["wait", "CHILD"], "is not a session (root thread); its session is"),
    (["wait", "ROOT", "--timeout", "-1"], "must be more than 0"),
    (["wait", "ROOT", "--timeout", "0"], "must be more than 0"),
    (["wait", "ROOT", "--timeout", "nan"], "must be a finite number"),
    (["wait"], "required: SESSION"),
    (["run", "--detach"], "give a prompt"),
    (["run", "--detach", "hi", "--model", "foo/bar"], "Unknown provider 'foo'"),
    (["run", "--detach", "hi", "--model", "openai/gpt-4o"], "OPENAI_API_KEY"),
    (["run", "--detach", "--continue", "ROOT", "hi"], "--continue does not go with --detach"),
    (["run", "--detach", "hi", "--workers", "2"], "--workers does not go with --detach"),
    (["run", "--detach", "hi", "--timeout", "5"], "--timeout does not go with --detach"),
    (["run", "--detach", "hi", "--yes"], "--yes does not go with --detach"),
    (["run", "--detach", "hi", "--read-only"], "--read-only does not go with --detach"),
]


def test_every_flag_refused_with_detach_is_tried() -> None:
    refused = {word for argv, message in BAD_INPUT if "does not go" in message
               for word in argv if word.startswith("--") and word != "--detach"}
    assert refused == {flag for flag, _ in NOT_WITH_DETACH.values()}


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT)
def test_bad_input_is_one_line_exits_2_and_writes_nothing(
        capsys: CaptureFixture, db_path: Path, board: dict[str, str],
        unchanged: Callable[[], Any], argv: list[str], message: str) -> None:
    with unchanged():
        code, out, err = run_cli(capsys, *[board.get(word, word) for word in argv],
                                 "--db", str(db_path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
    assert "\x1b" not in err and "\x07" not in err  # a terminal never acts on an id's escapes


def test_wait_on_a_missing_database_creates_none(capsys: CaptureFixture, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    code, out, err = run_cli(capsys, "wait", "lace_20990101_zzzzzz", "--db", str(missing))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"no lace board at {missing}" in err and not missing.exists()


def test_wait_on_an_empty_postgresql_database_creates_no_tables(
        capsys: CaptureFixture, postgres_url: str) -> None:
    code, out, err = run_cli(capsys, "wait", "lace_20990101_zzzzzz", "--db", postgres_url)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no lace board in" in err
    assert query(postgres_url, "SELECT COUNT(*) FROM information_schema.tables "
                               "WHERE table_schema = 'public'") == [(0,)]
