"""Stops that stick, stops from another process, budgets that hold when many agents call at
once, and approvals left behind by a dead process."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lace.config import Budgets, Limits, Settings, ToolSettings
from lace.core.assignee import ThreadAssignee
from lace.core.clock import iso_ago
from lace.core.records import NewAgent, Thread
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from lace.store.budgets import check_before_call, remaining
from tests.conftest import Caller, query, run_cli, spawn_child, until_quiet_then_closed
from tests.processes import lace_env
from tests.scripted import (
    ScriptedModels,
    assigned_task,
    creating_root,
    overlapping_worker,
    reply,
    tools_called,
)

pytestmark = pytest.mark.both_engines

def supervisor(store: Store, workspace: Path | None = None, **settings: Any) -> Runtime:
    quick = Limits(retry_base_s=0.001, retry_max_s=0.002)
    return open_runtime(store, Settings(**{"limits": quick, **settings}), default_client(),
                        check_model=check_model, workspace=workspace)


def test_an_agent_a_person_stopped_takes_no_task_from_an_agent(
        store: Store, session: Any, call: Caller, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    child = spawn_child(store, session.id)
    code, _out, _err = run_cli(capsys, "stop", child, "--reason", "wrong approach",
                               "--db", str(db_path))
    assert code == 0
    refused = call("task_create", {"tasks": [{"title": "More", "prompt": "p",
                                              "assigned_to": child}]})
    assert refused.is_error and "stopped by a person" in refused.text
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(0,)]
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", child) == [
        ("stopped",)]
    by_person = call("task_create", {"tasks": [{"title": "Yours", "prompt": "p",
                                                "assigned_to": child}]}, actor="human")
    assert not by_person.is_error, by_person.text  # a person's task resumes it, as before
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", child) == [
        ("idle",)]


def test_an_agent_stopped_by_its_creator_is_resumed_by_a_new_task(
        store: Store, session: Any, call: Caller, db_path: Path) -> None:
    child = spawn_child(store, session.id)
    assert not call("agent_stop", {"thread_id": child, "reason": "pause"}).is_error
    again = call("task_create", {"tasks": [{"title": "Next", "prompt": "p",
                                            "assigned_to": child}]})
    assert not again.is_error, again.text
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", child) == [
        ("idle",)]


def test_an_agent_stopped_before_its_first_turn_starts_it_with_its_system_prompt(
        store: Store, session: Any, call: Caller) -> None:
    """A stop writes the agent's thread an `error` row; the first turn after a new task
    resumed it still begins with the system prompt (a thread with no turn yet)."""
    from lace.runtime.conversation import begin_turn

    child = spawn_child(store, session.id)
    assert not call("agent_stop", {"thread_id": child, "reason": "pause"}).is_error
    assert not call("task_create", {"tasks": [{"title": "Next", "prompt": "p",
                                               "assigned_to": child}]}).is_error
    start = store.write(lambda tx: begin_turn(tx, child, {}))
    assert start is not None
    assert [message["role"] for message in start.messages] == ["system", "user"]


@pytest.mark.slow
async def test_a_stop_from_another_process_ends_a_running_bash_at_once(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = supervisor(store, tools=ToolSettings(policy={"bash": "allow"}),
                         workspace=workspace)
    command = f"sleep 37.{secrets.randbelow(10**6):06d}"  # its own: another test may run bash
    models.on("root", lambda messages: reply("stopped?") if messages[-1]["role"] == "tool"
              else reply(None, ("bash", {"command": f"{command}; touch late.txt"})))
    try:
        root = await runtime.start_session("go", "scripted/root")
        async with asyncio.timeout(10):
            while query(db_path, "SELECT COUNT(*) FROM events WHERE type = 'tool_call'") \
                    != [(1,)]:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # bash is running
        stop = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lace", "stop", root.id, "--db", str(db_path),
            env=lace_env(tmp_path / "home"), stdout=subprocess.DEVNULL)
        assert await stop.wait() == 0
        async with asyncio.timeout(3):  # the watch loop sees the stop and cancels the turn
            while runtime.running:
                await asyncio.sleep(0.05)
        pgrep = await asyncio.create_subprocess_exec("pgrep", "-f", command,
                                                     stdout=subprocess.PIPE)
        found, _ = await pgrep.communicate()
        assert found == b""
        assert not (workspace / "late.txt").exists()
        assert query(db_path, "SELECT status, stopped_by_person FROM agent_metadata") == [
            ("stopped", 1)]
    finally:
        await runtime.stop()
        runtime.close()


async def quiet_session(runtime: Runtime) -> Thread:
    """A session of `scripted/root` told "go", run until quiet; the runtime then stopped."""
    root = await runtime.start_session("go", "scripted/root")
    await until_quiet_then_closed(runtime, root.id)
    return root


async def test_fifteen_agents_at_once_overshoot_a_session_cap_by_at_most_one_call(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    cap, per_call = 3000, 600
    runtime = supervisor(store, budgets=Budgets(session_tokens=cap),
                         limits=Limits(retry_base_s=0.001, retry_max_s=0.002,
                                       max_children=20, spawns_per_minute=20))

    models.on("root", creating_root(15))
    models.on("worker", overlapping_worker)
    root = await quiet_session(runtime)
    (used,), = query(db_path, "SELECT SUM(prompt_tokens + completion_tokens) FROM llm_calls")
    assert cap <= used <= cap + per_call
    assert query(db_path, "SELECT COUNT(*) FROM token_grants") == [(0,)]  # all given back
    (reason,), = query(db_path, "SELECT stop_reason FROM agent_metadata WHERE thread_id = ?",
                       root.id)
    assert reason.startswith("budget reached: session used")


async def test_an_agent_holds_no_tokens_while_it_waits_nor_after_its_turn(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    """Tokens are taken only for a model call in flight: near a cap, a coordinator waiting
    on `delegate` must not hold what its helpers need; and once no call is in flight the
    process gives back all it held."""
    call_at_least = 10**6  # a call takes what it is sent, and this for its answer
    runtime = supervisor(store, budgets=Budgets(session_tokens=10**7),
                         limits=Limits(retry_base_s=0.001, retry_max_s=0.002,
                                       reserve_tokens=call_at_least))
    root_rows: list[list[tuple[Any, ...]]] = []
    in_flight: list[int] = []

    async def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
        deadline = asyncio.get_running_loop().time() + 20
        while query(db_path, "SELECT status FROM agent_metadata WHERE parent_thread_id IS "
                             "NULL") != [("waiting",)]:
            assert asyncio.get_running_loop().time() < deadline, "the root never waited"
            await asyncio.sleep(0.01)
        root_rows.append(query(db_path, "SELECT status FROM agent_metadata "
                                        "WHERE parent_thread_id IS NULL"))
        in_flight.extend(held.in_flight for held in runtime.scheduler.runner.escrow.held.values())
        return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                              "message": "the answer"}))

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "user":
            return reply(None, ("task_list", {}))
        if "delegate" not in tools_called(messages):
            return reply(None, ("delegate", {"tasks": [
                {"title": "Part", "prompt": "p", "expected_response": "a line",
                 "assigned_to": "new:scripted/helper"}]}))
        return reply("all done")

    models.on("root", root)
    models.on("helper", helper)
    await quiet_session(runtime)
    assert root_rows == [[("waiting",)]]
    assert len(in_flight) == 1 and call_at_least <= in_flight[0] < 2 * call_at_least
    assert len(models.calls_of("root")) == 3  # task_list, delegate, the answer
    assert query(db_path, "SELECT COUNT(*) FROM token_grants") == [(0,)]  # all given back


def test_the_default_cap_follows_each_agents_own_provider(
        store: Store, session: Any) -> None:
    with store.transaction() as tx:
        child = tx.threads.create_child(session.id)
        tx.agents.create(NewAgent(thread_id=child.id, name="gpt", provider="openai", model="gpt-4o",
                                  parent_thread_id=session.id))
        assert remaining(tx, session.id, Budgets()) == {}  # the root is the local demo
        assert remaining(tx, child.id, Budgets()) == {"tokens": 2_000_000}


def test_a_helper_is_held_to_the_sessions_seconds_by_the_roots_age(
        store: Store, session: Thread, db_path: str) -> None:
    """The checks of a helper read the root's row only for its age (the session's other caps
    are the settings'): with seconds capped they must still read it."""
    child = spawn_child(store, session.id)
    query(db_path, "UPDATE agent_metadata SET created_at = ? WHERE thread_id = ?",
          iso_ago(120), session.id)
    capped = Budgets(session_seconds=60)
    with store.transaction() as tx:
        assert remaining(tx, child, capped)["seconds"] < -59
        halt, _ = check_before_call(tx, child, capped)
        assert halt is not None and halt.owner == session.id
        assert halt.reason.startswith("budget reached: session used 12")
        assert check_before_call(tx, child, Budgets(session_seconds=600)) == (None, [])


async def test_an_approval_left_by_a_dead_process_is_not_left_pending(
        store: Store, session: Any, db_path: Path) -> None:
    with store.transaction() as tx:
        tx.agents.update(session.id, status="waiting", lease_holder="a-process-that-died")
        approval = tx.approvals.request(session.id, "bash", {"command": "ls"})
        task = tx.board.create_task(session_id=session.id, actor="human", title="t", prompt="p",
                                    assignee=ThreadAssignee(session.id))
    runtime = supervisor(store)
    try:
        assert await runtime.resume(session.id) == [session.id]
    finally:
        await runtime.stop()
        runtime.close()
    assert query(db_path, "SELECT status, decided_by FROM approvals WHERE id = ?", approval) == [
        ("denied", "lace: the process that asked ended")]
    assert query(db_path, "SELECT kind FROM inbox WHERE thread_id = ? AND kind = 'resume'",
                 session.id) == [("resume",)]
    assert query(db_path, "SELECT status FROM tasks WHERE id = ?", task.id) == [("pending",)]
