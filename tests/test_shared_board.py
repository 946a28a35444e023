"""A shared board on PostgreSQL: `lace worker` processes take over from one killed mid-run, and
workers racing for the same runnable agents never run one twice."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lace.core.assignee import HUMAN
from lace.core.records import NewAgent
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.store import Store, open_database
from tests import faults, postgres
from tests.lace_forks import run_lace
from tests.processes import final_board, lace, lace_env
from tests.workers import assert_delivered_once, ready, rows, value, wait_for, worker

HELPERS = 30
RACED = 100
LIMITS = {"LACE_LIMITS__LEASE_TIMEOUT_S": "2", "LACE_LIMITS__MAX_CHILDREN": "40",
          "LACE_LIMITS__SPAWNS_PER_MINUTE": "100"}


def fan_out(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root creates HELPERS tasks for `new:openai/worker` agents and sums up once all are
    done; each helper notes, then completes its task (`faults.fan_out`)."""
    said = [str(message.get("content") or "") for message in messages]
    if model == "worker":
        if not any("assigned task" in text for text in said):
            return ScriptedReply("done")  # a raced agent: one answer, one call
        return faults.fan_out(model, messages)  # notes, then completes: each until it is done
    created = sum(text.count("Created task") for text in said)
    if created < HELPERS:  # task_create takes up to 20 tasks a call: two calls of 15
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [
            {"title": f"Part {n}", "prompt": f"Do part {n}.", "assigned_to": "new:openai/worker"}
            for n in range(created + 1, created + HELPERS // 2 + 1)]})])
    completed = sum(text.count("has been completed by") for text in said)
    return ScriptedReply(f"All {HELPERS} tasks are done." if completed >= HELPERS
                         else f"{completed} of {HELPERS} done.")


def lace_command(tmp_path: Path, server: FakeOpenAI, *argv: str,
                 timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_lace([*argv], env=model_env(tmp_path, server), timeout=timeout)


def model_env(tmp_path: Path, server: FakeOpenAI) -> dict[str, str]:
    return lace_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url,
                    OPENAI_API_KEY="sk-fake-key", **LIMITS)


def holder_of(db: str, pid: int) -> str:
    return str(value(db, "SELECT id FROM processes WHERE pid = ?", pid))


@pytest.mark.slow
def test_three_workers_finish_a_session_when_one_is_killed_mid_run(
        tmp_path: Path, postgres_url: str) -> None:
    Store(open_database(postgres_url)).close()
    # answers slow enough that helpers are still running when a worker is killed; the victim is
    # whichever worker runs two or more then (a chosen one sometimes held none: the others had
    # claimed the whole fan-out before it looked)
    with FakeOpenAI(fan_out, latency_s=1.0, backlog=512) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-fake-key", **LIMITS}
        with worker(tmp_path, postgres_url, name="a", **env) as first, \
                worker(tmp_path, postgres_url, name="b", **env) as second, \
                worker(tmp_path, postgres_url, name="c", **env) as third:
            ready(postgres_url, 3)
            holders = {holder_of(postgres_url, process.pid): process
                       for process in (first, second, third)}
            detached = lace_command(tmp_path, server, "run", "--detach", "--db", postgres_url,
                                    "--model", "openai/root", "Fan out.")
            assert detached.returncode == 0, detached.stderr
            root = detached.stdout.strip()
            busy: list[str] = []

            def one_runs_helpers_mid_run() -> bool:
                """A worker runs two helpers or more while tasks remain (which one depends on
                who claimed first: any is the victim)."""
                running = rows(postgres_url, "SELECT lease_holder FROM agent_metadata WHERE "
                                             "status = 'running' AND thread_id != ?", root)
                counts = {holder: sum(row == (holder,) for row in running) for holder in holders}
                busy[:] = [holder for holder, count in counts.items() if count >= 2]
                return bool(busy) and value(postgres_url, "SELECT COUNT(*) FROM tasks WHERE "
                                                          "status = 'completed'") < HELPERS

            wait_for(one_runs_helpers_mid_run, "a worker to run helpers mid-run")
            victim_id = busy[0]
            holders.pop(victim_id).send_signal(signal.SIGKILL)
            waited = lace_command(tmp_path, server, "wait", root, "--db", postgres_url,
                                  "--timeout", "180")
            for process in holders.values():
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0
    assert waited.returncode == 0, waited.stderr
    assert f"All {HELPERS} tasks are done." in waited.stdout
    assert value(postgres_url, "SELECT COUNT(*) FROM tasks") == HELPERS
    assert_delivered_once(postgres_url)  # every task completed, every inbox row consumed once
    assert rows(postgres_url, "SELECT task_id, content, COUNT(*) FROM task_notes "
                              "GROUP BY task_id, content HAVING COUNT(*) > 1") == []
    assert value(postgres_url, "SELECT COUNT(*) FROM task_notes WHERE content = 'on it'") \
        == HELPERS
    assert {status for (status,) in rows(postgres_url, "SELECT status FROM agent_metadata")} \
        == {"idle"}
    taken_over = value(postgres_url, "SELECT COUNT(*) FROM inbox WHERE kind = 'resume'")
    assert taken_over >= 2  # the victim's turns were resumed by the others
    assert victim_id not in {holder for (holder,) in rows(
        postgres_url, "SELECT lease_holder FROM agent_metadata")}


@pytest.mark.slow
def test_two_workers_racing_for_the_same_agents_never_run_one_twice(
        tmp_path: Path, postgres_url: str) -> None:
    store = Store(open_database(postgres_url))
    with FakeOpenAI(fan_out, latency_s=0.05, backlog=512) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-fake-key",
               "LACE_LIMITS__MAX_CHILDREN": str(RACED)}
        with worker(tmp_path, postgres_url, name="a", **env) as first, \
                worker(tmp_path, postgres_url, name="b", **env) as second:
            ready(postgres_url, 2)
            workers = {holder_of(postgres_url, first.pid), holder_of(postgres_url, second.pid)}
            with store.transaction() as tx:  # all runnable at one commit: one NOTIFY for both
                root = tx.threads.create_session(provider="openai", model="root",
                                                 tools=["task_list"])
                for _ in range(RACED):
                    child = tx.threads.create_child(root.id)
                    tx.agents.create(NewAgent(thread_id=child.id, name=f"agent {child.id}",
                                              provider="openai", model="worker",
                                              tools=["task_list"], parent_thread_id=root.id))
                    tx.inbox.post(child.id, sender=HUMAN, kind="message", text="Say done.")
            wait_for(lambda: value(postgres_url, "SELECT COUNT(*) FROM events WHERE type = "
                                                 "'agent_message'") == RACED
                     and value(postgres_url, "SELECT COUNT(*) FROM agent_metadata WHERE "
                                             "status != 'idle'") == 0,
                     "every raced agent to answer", timeout=120)
            for process in (first, second):
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0
    store.close()
    calls = rows(postgres_url, "SELECT thread_id, COUNT(*) FROM llm_calls GROUP BY thread_id")
    assert len(calls) == RACED and {count for _, count in calls} == {1}
    assert len(server.requests) == RACED  # no call was made and then not recorded
    holders = {holder for (holder,) in rows(
        postgres_url, "SELECT lease_holder FROM agent_metadata WHERE thread_id != ?", root.id)}
    assert holders == workers  # both raced, and each agent ran in one of them


def test_a_password_is_never_printed_and_a_foreign_database_is_refused(
        tmp_path: Path, postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    def lace_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_lace([*argv], env=lace_env(tmp_path / "home"), timeout=120)

    with_password = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@")
    assert with_password != postgres_url
    shown = lace_cli("db", "path", "--db", with_password)
    assert shown.returncode == 0
    assert shown.stdout.strip() == with_password.replace("s3cret-pw", "***")
    upgraded = lace_cli("db", "upgrade", "--db", with_password)  # trust auth: any password
    assert upgraded.returncode == 0, upgraded.stderr
    assert "s3cret-pw" not in upgraded.stdout + upgraded.stderr
    assert "s3cret-pw" not in str(postgres.snapshot(postgres_url))
    refused = lace_cli("threads", "--db", "postgresql://bob:s3cret-pw@127.0.0.1:1/nowhere")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("lace: error: ")
    assert "s3cret-pw" not in refused.stderr
    with postgres_server.fresh_database() as foreign:
        rows(foreign, "CREATE TABLE not_lace (id INTEGER)")
        other = lace_cli("threads", "--db", foreign)
        assert other.returncode == 2 and "is not a lace database" in other.stderr
        assert other.stderr.count("\n") == 1
        assert postgres.snapshot(foreign) == {"not_lace": []}  # nothing written


def test_a_password_given_as_a_url_parameter_is_never_printed(
        tmp_path: Path, postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    """libpq also takes the password as `?password=`: it is masked like one after the user."""
    def lace_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_lace([*argv], env=lace_env(tmp_path / "home"), timeout=120)

    shown = lace_cli("db", "path", "--db", f"{postgres_url}?password=s3cret-pw")
    assert shown.returncode == 0 and shown.stdout.strip() == f"{postgres_url}?password=***"
    with postgres_server.fresh_database() as foreign:
        rows(foreign, "CREATE TABLE not_lace (id INTEGER)")
        other = lace_cli("threads", "--db", f"{foreign}?password=s3cret-pw")
    assert other.returncode == 2 and "is not a lace database" in other.stderr
    assert "s3cret-pw" not in other.stderr


def test_the_urls_own_options_are_kept_with_laces(postgres_url: str) -> None:
    """`?options=-csearch_path=board` puts lace's tables in that schema: lace's own connection
    options (the idle-transaction timeout) must not replace the URL's."""
    rows(postgres_url, "CREATE SCHEMA board")
    database = open_database(f"{postgres_url}?options=-csearch_path%3Dboard")
    try:
        with database.engine.connect() as connection:
            settings = [connection.exec_driver_sql(f"SHOW {name}").scalar() for name in
                        ("search_path", "idle_in_transaction_session_timeout")]
    finally:
        database.close()
    assert settings == ["board", "10s"]
    assert rows(postgres_url, "SELECT DISTINCT table_schema FROM information_schema.tables "
                              "WHERE table_name = 'tasks'") == [("board",)]


def test_a_session_moves_between_engines_through_export_and_import(
        tmp_path: Path, postgres_url: str) -> None:
    home, copy = tmp_path / "home", tmp_path / "copy.db"
    ran = lace(home, "run", "Write the announcement and list the risks", db=postgres_url)
    assert ran.returncode == 0, ran.stderr
    (root,), = rows(postgres_url, "SELECT id FROM threads WHERE parent_id IS NULL")
    exported = lace(home, "export", root, "-o", str(tmp_path / "session.json"),
                    db=postgres_url)
    assert exported.returncode == 0, exported.stderr
    imported = lace(home, "import", str(tmp_path / "session.json"), "--db", str(copy))
    assert imported.returncode == 0, imported.stderr
    assert final_board(home, str(copy)) == final_board(home, postgres_url)
    counts = "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM inbox), " \
             "(SELECT COUNT(*) FROM llm_calls), (SELECT COUNT(*) FROM task_dependencies)"
    assert rows(copy, counts) == rows(postgres_url, counts)
