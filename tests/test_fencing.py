"""Fencing: a process that no longer holds an agent's lease commits nothing for it, whether it
was paused (SIGSTOP) past its lease while another process took over, or its turn was frozen
inside a tool meanwhile; it abandons the turn quietly."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store, Tx, open_database
from tests.conftest import is_postgres, query
from tests.lace_forks import lace_popen, run_lace
from tests.logs import records_of
from tests.processes import DELIVERED, MANY_PROMPT, board_rows, lace_env
from tests.scripted import ScriptedModels, reply

pytestmark = pytest.mark.both_engines

LEASE_S = "1"


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    if not (home / "lace.db").exists():
        return []
    try:
        return query(home / "lace.db", sql)
    except Exception:  # the other process is still creating the file
        return []


def duplicates(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Anything written twice: notes, tool results, tasks, deliveries."""
    return {
        "notes": rows(home, "SELECT task_id, content, COUNT(*) FROM task_notes "
                            "GROUP BY task_id, content HAVING COUNT(*) > 1"),
        "tool results": rows(home, "SELECT thread_id, json_extract(data, '$.call_id'), "
                                   "COUNT(*) FROM events WHERE type = 'tool_result' "
                                   "GROUP BY 1, 2 HAVING COUNT(*) > 1"),
        "tasks": rows(home, "SELECT title, COUNT(*) FROM tasks GROUP BY title "
                            "HAVING COUNT(*) > 1"),
        "deliveries": rows(home, f"SELECT inbox_id, COUNT(*) FROM ({DELIVERED}) "
                                 "GROUP BY 1 HAVING COUNT(*) > 1"),
    }


def pause_outside_a_write(pid: int, path: Path) -> None:
    """SIGSTOP `pid` at a moment it holds no write lock (else the next process would wait)."""
    for _ in range(100):
        os.kill(pid, signal.SIGSTOP)
        try:
            with sqlite3.connect(path, timeout=0) as connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.rollback()
            return
        except sqlite3.OperationalError:  # locked: let it finish its transaction first
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)
    raise AssertionError("the process never let go of the write lock")


@pytest.mark.slow
def test_a_process_paused_past_its_lease_commits_nothing_when_it_resumes(
        tmp_path: Path) -> None:
    env = lace_env(tmp_path, LACE_DEMO_DELAY="0.6", LACE_LIMITS__LEASE_TIMEOUT_S=LEASE_S)
    first = lace_popen([sys.executable, "-m", "lace", "run", MANY_PROMPT], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: rows(tmp_path, "SELECT COUNT(*) FROM events WHERE type = "
                                        "'notification' AND thread_id LIKE '%.%'")[:1] >= [(3,)],
                 "three helpers starting their first model call")
        time.sleep(0.2)  # inside their model calls
        pause_outside_a_write(first.pid, tmp_path / "lace.db")
        time.sleep(float(LEASE_S) * 2.5)  # the lease runs out
        (root,), = rows(tmp_path, "SELECT id FROM threads WHERE parent_id IS NULL")
        second = run_lace(["run", "--continue", root], env=env, timeout=120)
        assert second.returncode == 0, second.stderr
        assert "All 4 tasks are done" in second.stdout
        finished = rows(tmp_path, "SELECT COUNT(*) FROM events")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _out, err = first.communicate(timeout=60)
    assert duplicates(tmp_path) == {"notes": [], "tool results": [], "tasks": [],
                                    "deliveries": []}, err
    assert rows(tmp_path, "SELECT COUNT(*) FROM events") == finished  # the first wrote nothing
    assert rows(tmp_path, "SELECT COUNT(*) FROM task_notes") == [(8,)]  # 4 tasks, 2 notes each
    assert set(rows(tmp_path, "SELECT status FROM agent_metadata")) == {("idle",)}


async def test_a_turn_frozen_in_a_tool_while_its_lease_is_taken_commits_nothing(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.002),
                        tools=ToolSettings(policy={"bash": "allow"}))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                           workspace=tmp_path)
    in_bash = asyncio.Event()

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return reply("after bash")  # never reached: the turn is abandoned
        in_bash.set()
        return reply(None, ("bash", {"command": "sleep 1.5; echo done"}))

    models.on("root", root)
    try:
        session = await runtime.start_session("go", "scripted/root")
        async with asyncio.timeout(10):
            await in_bash.wait()
            while query(db_path, "SELECT COUNT(*) FROM events WHERE type = 'tool_call'") \
                    != [(1,)]:
                await asyncio.sleep(0.01)
        with store.transaction() as tx:  # another (live) process takes the agent over
            tx.processes.register("another-process", 60.0)
            tx.agents.update(session.id, status="running", lease_holder="another-process",
                             lease_epoch=tx.agents.get(session.id).lease_epoch + 1)
        async with asyncio.timeout(10):
            await runtime.run_until_quiet(session.id)
        assert query(db_path, "SELECT type FROM events WHERE thread_id = ? ORDER BY id",
                     session.id) == [("system_prompt",), ("user_message",), ("agent_message",),
                                     ("tool_call",)]
        assert query(db_path, "SELECT status, lease_holder FROM agent_metadata") == [
            ("running", "another-process")]
        assert len(models.calls_of("root")) == 1
    finally:
        await runtime.stop()
        runtime.close()


async def taken_over_mid_call(runtime: Runtime, store: Store, models: ScriptedModels,
                              reply: ScriptedReply, then: Callable[[Tx], object] = lambda _: None,
                              ) -> tuple[str, asyncio.Event]:
    """A session whose root's model call is in flight when another live process takes the
    agent over (`then` runs in that transaction too): the session's id, and the event that
    lets the provider answer (and bill) `reply`, after the takeover."""
    in_call, answer = asyncio.Event(), asyncio.Event()

    async def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        in_call.set()
        await answer.wait()
        return reply

    models.on("root", root)
    session = await runtime.start_session("go", "scripted/root")
    async with asyncio.timeout(10):
        await in_call.wait()
    with store.transaction() as tx:
        tx.processes.register("another-process", 60.0)
        tx.agents.update(session.id, status="running", lease_holder="another-process",
                         lease_epoch=tx.agents.get(session.id).lease_epoch + 1)
        then(tx)
    return session.id, answer


async def test_a_model_call_whose_lease_was_taken_meanwhile_still_counts_what_it_used(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    runtime = open_runtime(store, Settings(), default_client(), check_model=check_model,
                           workspace=tmp_path)
    try:
        session_id, answer = await taken_over_mid_call(runtime, store, models, ScriptedReply(
            "never recorded", prompt_tokens=1234, completion_tokens=56, cost_usd=0.0789))
        answer.set()
        async with asyncio.timeout(10):
            await runtime.run_until_quiet(session_id)
        assert query(db_path, "SELECT prompt_tokens, completion_tokens, cost_usd FROM "
                              "llm_calls WHERE thread_id = ?", session_id) == [(1234, 56, 0.0789)]
        assert query(db_path, "SELECT tokens_in, tokens_out, cost_usd, lease_holder FROM "
                              "agent_metadata") == [(1234, 56, 0.0789, "another-process")]
        assert query(db_path, "SELECT COUNT(*) FROM events WHERE type = 'agent_message'") \
            == [(0,)]  # the reply itself is not written: only what it cost
    finally:
        await runtime.stop()
        runtime.close()


REFUSE_CALLS_ON_SQLITE = ["CREATE TRIGGER refused BEFORE INSERT ON llm_calls "
                          "BEGIN SELECT RAISE(ABORT, 'no more calls here'); END"]
REFUSE_CALLS_ON_POSTGRESQL = [
    "CREATE FUNCTION refused() RETURNS trigger LANGUAGE plpgsql "
    "AS $$ BEGIN RAISE EXCEPTION 'no more calls here'; END $$",
    "CREATE TRIGGER refused BEFORE INSERT ON llm_calls FOR EACH ROW EXECUTE FUNCTION refused()"]


async def test_a_lost_leases_usage_write_that_fails_still_leaves_the_agent_to_its_new_holder(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    """The usage of a call whose lease was taken meanwhile cannot be written (the database
    refuses it): the turn is still abandoned as a lost lease (a warning says the usage was
    lost), not taken for a failed turn (an error and its traceback), and the agent is left as
    its new holder has it."""
    runtime = open_runtime(store, Settings(), default_client(), check_model=check_model,
                           workspace=tmp_path)
    refusing = REFUSE_CALLS_ON_POSTGRESQL if is_postgres(db_path) else REFUSE_CALLS_ON_SQLITE
    try:
        session_id, answer = await taken_over_mid_call(
            runtime, store, models, ScriptedReply("never recorded", prompt_tokens=1234,
                                                  completion_tokens=56),
            then=lambda tx: [tx.connection.exec_driver_sql(sql) for sql in refusing])
        with records_of("lace") as records:
            answer.set()
            async with asyncio.timeout(10):
                await runtime.run_until_quiet(session_id)
        assert query(db_path, "SELECT status, lease_holder, stop_reason FROM agent_metadata") \
            == [("running", "another-process", None)]
        assert query(db_path, "SELECT COUNT(*) FROM events WHERE type = 'error'") == [(0,)]
        logged = [(record.levelname, record.getMessage()) for record in records]
        assert not [entry for entry in logged if entry[0] == "ERROR"], logged
        assert any("could not record the usage" in message for _, message in logged), logged
    finally:
        await runtime.stop()
        runtime.close()


def pause_inside_a_write(pid: int, url: str) -> None:
    """SIGSTOP `pid` at a moment it holds lace's write lock on PostgreSQL (the only lace
    process running, so any advisory lock granted is its)."""
    for _ in range(3000):
        os.kill(pid, signal.SIGSTOP)
        if board_rows(url, "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND granted") != [(0,)]:
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError("never caught the process inside a write")


@pytest.mark.slow
def test_a_process_paused_inside_a_write_on_postgresql_frees_the_board_and_commits_nothing(
        tmp_path: Path, postgres_url: str) -> None:
    Store(open_database(postgres_url)).close()
    env = lace_env(tmp_path, LACE_DEMO_DELAY="0.3", LACE_LIMITS__LEASE_TIMEOUT_S=LEASE_S,
                   LACE_DB=postgres_url)
    first = lace_popen([sys.executable, "-m", "lace", "run", MANY_PROMPT], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: board_rows(postgres_url, "SELECT COUNT(*) FROM events WHERE type = "
                                                  "'notification' AND thread_id LIKE '%.%'")
                 >= [(1,)], "a helper starting its first model call")
        pause_inside_a_write(first.pid, postgres_url)
        wait_for(lambda: board_rows(postgres_url, "SELECT MAX(expires_at) FROM processes")[0][0]
                 < time.time(), "the paused process's lease to run out")  # else it holds the root
        (root,), = board_rows(postgres_url, "SELECT id FROM threads WHERE parent_id IS NULL")
        second = run_lace(["run", "--continue", root], env=env, timeout=120)
        assert second.returncode == 0, second.stderr  # the server ended the paused transaction
        assert "All 4 tasks are done" in second.stdout
        finished = board_rows(postgres_url, "SELECT COUNT(*) FROM events")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    first.communicate(timeout=60)
    assert board_rows(postgres_url, "SELECT COUNT(*) FROM events") == finished
    assert board_rows(postgres_url, "SELECT COUNT(*) FROM task_notes") == [(8,)]
    assert board_rows(postgres_url, "SELECT task_id, content, COUNT(*) FROM task_notes "
                                    "GROUP BY task_id, content HAVING COUNT(*) > 1") == []
    assert set(board_rows(postgres_url, "SELECT status FROM agent_metadata")) == {("idle",)}
