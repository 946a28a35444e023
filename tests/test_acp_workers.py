"""Board tasks assigned to `acp:NAME`: lace starts the configured ACP agent (a scripted one of
the tests, on its real stdio), sends it the task notification, records its updates as the
thread's events, and completes the task with its answer; a refusal fails the task, a stop
cancels the agent and ends it; `acp:` names only configured agents."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.config import AcpAgent, Settings, ToolSettings, WorkspaceSettings
from lace.core.worktrees import no_workspace
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.board import Board
from lace.runtime.events import EventAppended
from lace.runtime.worktrees import prune_worktrees
from lace.store import Store
from tests.conftest import query
from tests.gitrepos import git, new_repository
from tests.scripted import ScriptedModels, reply

AGENT = str(Path(__file__).with_name("acp_worker_agent.py"))


def worker_settings(*argv: str, policy: dict[str, Any] | None = None,
                    tools: list[str] | None = None) -> Settings:
    return Settings(acp_agents={"scripted": AcpAgent(command=sys.executable,
                                                    args=[AGENT, *argv], tools=tools)},
                    tools=ToolSettings(policy=policy or {}))


def make(store: Store, workspace: Path, settings: Settings) -> Runtime:
    return open_runtime(store, settings, default_client(), check_model=check_model,
                        workspace=workspace)


def delegating(models: ScriptedModels, assignee: str = "acp:scripted") -> None:
    """The root hands one task to `assignee`, then answers with what it heard."""

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if len(messages) <= 2:
            return reply(None, ("task_create", {"tasks": [
                {"title": "Look", "prompt": "Look around", "assigned_to": assignee}]}))
        return reply("heard back")

    models.on("root", root)


async def run(store: Store, models: ScriptedModels, tmp_path: Path, settings: Settings,
              timeout: float = 60) -> tuple[Runtime, str]:
    delegating(models)
    runtime = make(store, tmp_path, settings)
    root = await runtime.start_session("Look around, please.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), timeout)
    return runtime, root.id


async def test_a_task_for_an_acp_agent_completes_with_its_answer(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    runtime, root = await run(store, models, tmp_path, worker_settings("answer"))
    try:
        ((task_id, status),) = query(db_path, "SELECT id, status FROM tasks")
        assert status == "completed"
        child = f"{root}.1"
        assert query(db_path, "SELECT provider, model FROM agent_metadata WHERE thread_id = ?",
                     child) == [("acp", "scripted")]
        events = [(kind, json.loads(data)) for kind, data in query(
            db_path, "SELECT type, data FROM events WHERE thread_id = ? ORDER BY id", child)]
        kinds = [kind for kind, _ in events]
        assert kinds[-3:] == ["tool_call", "tool_result", "agent_message"]
        assert events[-3][1]["tool_name"] == "acp:look around"
        assert "looked" in events[-2][1]["message"]["content"]
        assert events[-1][1]["message"]["content"] == f"worked {task_id}"
        notes = query(db_path, "SELECT content FROM task_notes WHERE task_id = ?", task_id)
        assert any(f"worked {task_id}" in note for (note,) in notes)
        log = Path(os.environ["LACE_HOME"]) / "acp-logs" / "scripted.log"
        assert "scripted ACP agent: answer" in log.read_text()  # its stderr, kept privately
        assert log.stat().st_mode & 0o777 == 0o600
    finally:
        await runtime.stop()
        runtime.close()


@pytest.mark.both_engines
async def test_each_event_an_acp_agent_records_is_published_once_committed(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    """A subscriber (the app, `lace follow`) that reads an event's row when it hears of it
    finds it committed, with the type it was published with: an event published inside its
    transaction may be undone (a rerun after a conflict publishes it again, under another id)."""
    delegating(models)
    runtime = make(store, tmp_path, worker_settings("answer"))
    heard: list[tuple[str, list[tuple[Any, ...]]]] = []
    runtime.bus.subscribe(lambda event: heard.append((event.type, query(
        db_path, "SELECT type FROM events WHERE id = ?", event.event_id)))
        if isinstance(event, EventAppended) else None)
    try:
        root = await runtime.start_session("Look around, please.", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
        assert ("agent_message", [("agent_message",)]) in heard
        assert [(kind, rows) for kind, rows in heard if rows != [(kind,)]] == []
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_refusal_fails_the_task_with_the_reason(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    runtime, root = await run(store, models, tmp_path, worker_settings("refuse"))
    try:
        assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
        assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                     f"{root}.1") == [("error",)]
        (note,) = [n for (n,) in query(db_path, "SELECT content FROM task_notes")
                   if "Blocked" in n]
        assert "ACP agent 'scripted' ended its turn with 'refusal'" in note
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_command_that_does_not_start_fails_the_task(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    settings = Settings(acp_agents={"scripted": AcpAgent(command="/no/such/agent")})
    runtime, _root = await run(store, models, tmp_path, settings)
    try:
        (note,) = [n for (n,) in query(db_path, "SELECT content FROM task_notes")
                   if "Blocked" in n]
        assert "could not start ACP agent 'scripted' (/no/such/agent)" in note
    finally:
        await runtime.stop()
        runtime.close()


async def test_stopping_the_task_cancels_the_agent_and_ends_it(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    marker = tmp_path / "cancelled.txt"
    delegating(models)
    runtime = make(store, tmp_path, worker_settings("hang", str(marker)))
    try:
        root = await runtime.start_session("Look around, please.", "scripted/root")
        quiet = asyncio.create_task(runtime.run_until_quiet(root.id))
        child = f"{root.id}.1"
        prompted = marker.with_suffix(".prompted")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not prompted.exists():
            await asyncio.sleep(0.05)
        assert "You have been assigned task" in prompted.read_text()  # the notification
        await runtime.stop_agent(child, "not needed", by_person=True)
        await asyncio.wait_for(quiet, 10)
        assert marker.read_text() == "cancelled\n"  # it heard session/cancel
        assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
        assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                     child) == [("stopped",)]
    finally:
        await runtime.stop()
        runtime.close()


@pytest.mark.parametrize(("kind", "policy", "told"), [
    ("read", {}, "yes"),  # file_read: allowed by default
    ("execute", {"bash": "deny"}, "no"),  # bash denied by the policy
    ("execute", {"bash": "allow"}, "yes"),
])
async def test_permission_requests_follow_lace_policy(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path, kind: str,
        policy: dict[str, Any], told: str) -> None:
    runtime, root = await run(store, models, tmp_path,
                              worker_settings("ask", kind, policy=policy))
    try:
        (answer,) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                          "WHERE thread_id = ? AND type = 'agent_message'", f"{root}.1")
        assert answer == (f"told {told}",)
    finally:
        await runtime.stop()
        runtime.close()


async def test_an_unconfigured_acp_agent_is_a_tool_error(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    runtime = make(store, tmp_path, Settings())
    try:
        root = await runtime.start_session("x", "scripted/root")
        result = await runtime.act_as_human(root.id, "task_create", {"tasks": [
            {"title": "Look", "prompt": "Look", "assigned_to": "acp:missing"}]})
        assert result.is_error
        assert "No ACP agent 'missing' in [acp_agents] (configured: none is configured" \
            in result.text
        assert query(db_path, "SELECT count(*) FROM tasks") == [(0,)]
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_permission_lace_asks_about_waits_for_the_person(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    delegating(models)
    runtime = make(store, tmp_path, worker_settings("ask", "edit"))  # file_write: asks
    try:
        root = await runtime.start_session("Look around, please.", "scripted/root")
        quiet = asyncio.create_task(runtime.run_until_quiet(root.id))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not query(
                db_path, "SELECT id FROM approvals WHERE status = 'pending'"):
            await asyncio.sleep(0.05)
        ((approval_id, thread_id, tool, arguments),) = query(
            db_path, "SELECT id, thread_id, tool, arguments FROM approvals")
        assert (thread_id, tool) == (f"{root.id}.1", "file_write")
        assert json.loads(arguments)["input"] == {"command": "rm -rf /"}
        await runtime.decide(approval_id, "denied")
        await asyncio.wait_for(quiet, 30)
        assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                     "WHERE thread_id = ? AND type = 'agent_message'",
                     f"{root.id}.1") == [("told no",)]
    finally:
        await runtime.stop()
        runtime.close()


async def run_isolated(store: Store, models: ScriptedModels,
                       tmp_path: Path) -> tuple[Path, Runtime, str]:
    """A repository, and `run`'s session of the `files` worker under worktree isolation
    there, allowed to write files."""
    repo = new_repository(tmp_path / "repo", {"notes.txt": "inside\n"})
    settings = worker_settings("files", str(repo / "notes.txt"),
                               policy={"file_write": "allow"})
    settings = settings.model_copy(update={"workspace": WorkspaceSettings(isolation="worktree")})
    runtime, root = await run(store, models, repo, settings)
    return repo, runtime, root


async def test_under_worktree_isolation_the_agent_works_in_its_own_worktree(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    repo, runtime, root = await run_isolated(store, models, tmp_path)
    try:
        child = f"{root}.1"
        assert not (repo / "out.txt").exists()  # the main tree is untouched
        assert git(repo, "show", f"lace/{child}:out.txt") == "from the worker"
        ((answer,),) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM "
                             "events WHERE thread_id = ? AND type = 'agent_message'", child)
        assert "[read inside]" in answer  # notes.txt, as checked out in its worktree
        assert "is not an absolute path inside the workspace" in answer  # the main tree's
        (result,) = [n for (n,) in query(db_path, "SELECT content FROM task_notes")
                     if "out.txt" in n or f"lace/{child}" in n]
        assert f"lace/{child}" in result
    finally:
        await runtime.stop()
        runtime.close()


async def test_an_acp_agent_whose_worktree_was_pruned_does_not_run_in_the_checkout(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    repo, runtime, root = await run_isolated(store, models, tmp_path)
    try:
        child = f"{root}.1"
        board = Board(store, workspace=repo)
        pruned = await asyncio.to_thread(lambda: list(prune_worktrees(board, force=True)))
        assert [(done.worktree.thread_id, done.refusal) for done in pruned] == [(child, None)]
        log = Path(os.environ["LACE_HOME"]) / "acp-logs" / "scripted.log"
        runs = log.read_text().count("scripted ACP agent: files")
        created = await runtime.act_as_human(root, "task_create", {"tasks": [{
            "title": "Again", "prompt": "Write it again", "assigned_to": child}]})
        assert not created.is_error, created.text
        await asyncio.wait_for(runtime.run_until_quiet(root), 60)
        assert not (repo / "out.txt").exists()  # nothing in the person's checkout
        assert log.read_text().count("scripted ACP agent: files") == runs  # never started
        (note,) = [n for (n,) in query(
            db_path, "SELECT content FROM task_notes JOIN tasks ON tasks.id = task_id "
                     "WHERE title = 'Again'") if "Blocked" in n]
        assert "ACP agent 'scripted' cannot run: " + no_workspace(
            child, f"lace/{child}", own=True) in note
    finally:
        await runtime.stop()
        runtime.close()
