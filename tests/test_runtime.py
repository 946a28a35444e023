"""Agents that run: spawning on `new:`, notifications, reminders and failures, end to end through
lace's model client into a scripted model, checked with plain SQL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import RuntimeEvent, TurnEnded
from tests.conftest import is_postgres, query, snapshot
from tests.root_turn import first_root_answer
from tests.scripted import (
    ScriptedModels,
    assigned_task,
    dutiful_worker,
    reply,
    text,
    tools_called,
)
from tests.scripted_coordinator import completions, coordinator

pytestmark = pytest.mark.both_engines

async def test_root_delegates_to_two_concurrent_children(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    arrived: list[str] = []
    both_called = asyncio.Event()
    overlapped: list[bool] = []

    async def held_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            task_id = assigned_task(messages)
            arrived.append(task_id)
            if len(set(arrived)) == 2:
                both_called.set()
            await asyncio.wait_for(both_called.wait(), timeout=20)
            overlapped.append(True)
        return dutiful_worker(f"result of {assigned_task(messages)}")(messages)

    models.on("root", coordinator("new:scripted/worker", "new:scripted/worker"))
    models.on("worker", held_worker)
    root = await runtime.start_session("Plan the launch", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)

    assert overlapped == [True, True]  # each child's first call waited for the other's
    one, two = f"{root.id}.1", f"{root.id}.2"
    assert query(db_path, "SELECT id, parent_id, root_id FROM threads ORDER BY id") == [
        (root.id, None, root.id), (one, root.id, root.id), (two, root.id, root.id)]
    tasks = query(db_path, "SELECT id, title, status, assigned_to, created_by FROM tasks "
                           "ORDER BY assigned_to")
    assert [(t[1], t[2], t[3], t[4]) for t in tasks] == [
        ("Alpha", "completed", one, root.id), ("Beta", "completed", two, root.id)]
    task_of = {t[3]: t[0] for t in tasks}
    assert query(db_path, "SELECT thread_id, provider, model, profile, type, status, "
                          "created_for_task, parent_thread_id, current_task FROM agent_metadata "
                          "ORDER BY thread_id") == [
        (root.id, "scripted", "root", None, "persistent", "idle", None, None, None),
        (one, "scripted", "worker", None, "persistent", "idle", task_of[one], root.id,
         task_of[one]),
        (two, "scripted", "worker", None, "persistent", "idle", task_of[two], root.id,
         task_of[two]),
    ]
    for child in (one, two):
        assert query(db_path, "SELECT author, content FROM task_notes WHERE task_id = ? "
                              "ORDER BY id", task_of[child]) == [
            (child, "working on it"), (child, f"result of {task_of[child]}")]
    assert query(db_path, "SELECT thread_id, kind, sender FROM inbox WHERE consumed_at IS NULL"
                 ) == []
    # one completion row: the batch's notice, from the child that finished last
    last = query(db_path, "SELECT sender, task_id FROM inbox WHERE kind = 'completion'")
    assert last in ([(one, task_of[one])], [(two, task_of[two])])
    assert sorted(query(db_path, "SELECT thread_id, kind, sender, task_id FROM inbox WHERE "
                                 "kind != 'completion'")) == sorted([
        (root.id, "message", "human", None),
        (root.id, "note", one, task_of[one]), (root.id, "note", two, task_of[two]),
        (one, "assignment", root.id, task_of[one]), (two, "assignment", root.id, task_of[two])])
    for child in (one, two):
        first, second = query(db_path, "SELECT type, data FROM events WHERE thread_id = ? "
                                       "ORDER BY id LIMIT 2", child)
        assert first[0] == "system_prompt" and child in json.loads(first[1])["message"]["content"]
        assert second[0] == "notification"
        assert json.loads(second[1])["message"]["content"] == (
            f"[LACE TASK SYSTEM] You have been assigned task '{task_of[child]}':\n"
            f'Title: "{"Alpha" if child == one else "Beta"}"\nCreated by: {root.id}\n'
            "Priority: medium\nStatus: in_progress\n\n--- TASK DETAILS ---\n"
            f"Do {'Alpha' if child == one else 'Beta'}\n--- END TASK DETAILS ---\n\n"
            "Use your task_add_note tool to record progress and task_complete tool when you "
            "are done.")
    root_notices = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                  "WHERE thread_id = ? AND type = 'notification' AND "
                                  "json_extract(data, '$.kind') = 'completion'", root.id)
    (notice,), = root_notices  # one wake for the fan-out, each task's block inside it
    blocks = notice.split("\n\n[LACE TASK SYSTEM] ")[1:]
    assert len(blocks) == 2 and all(block.startswith("Task 'task_") for block in blocks)
    (last_answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                     "WHERE thread_id = ? AND type = 'agent_message' "
                                     "ORDER BY id DESC LIMIT 1", root.id)
    assert last_answer.startswith("all done: ") and f"result of {task_of[one]}" in last_answer
    usage = query(db_path, "SELECT a.thread_id, a.tokens_in, a.tokens_out, "
                           "(SELECT SUM(prompt_tokens) FROM llm_calls c "
                           " WHERE c.thread_id = a.thread_id), "
                           "(SELECT COUNT(*) FROM llm_calls c WHERE c.thread_id = a.thread_id) "
                           "FROM agent_metadata a")
    for thread_id, tokens_in, _, summed, calls in usage:  # a helper: note, then complete
        assert calls == 2 if thread_id != root.id else calls >= 3
        assert tokens_in == summed == 10 * calls


async def test_a_grandchild_is_numbered_under_its_parent(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    def middle(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id = assigned_task(messages)
        if "task_create" not in tools_called(messages):
            return reply(None, ("task_create", {"tasks": [
                {"title": "Sub", "prompt": "do the sub part",
                 "assigned_to": "new:scripted/leaf"}]}))
        if completions(messages) and "task_complete" not in tools_called(messages):
            return reply(None, ("task_complete", {"task_id": task_id, "message": "middle done"}))
        return reply("waiting for my helper")

    models.on("root", coordinator("new:scripted/middle", titles=("Top",)))
    models.on("middle", middle)
    models.on("leaf", dutiful_worker("leaf result"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    rows = query(db_path, "SELECT t.title, t.status, t.assigned_to, t.created_by FROM tasks t "
                          "ORDER BY t.created_at")
    assert rows == [("Top", "completed", f"{root.id}.1", root.id),
                    ("Sub", "completed", f"{root.id}.1.1", f"{root.id}.1")]
    assert query(db_path, "SELECT parent_thread_id FROM agent_metadata WHERE thread_id = ?",
                 f"{root.id}.1.1") == [(f"{root.id}.1",)]


async def test_reassignment_moves_the_task_to_another_agent(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = [text(m) for m in messages if m["role"] == "tool"]
        if not results:
            return reply(None, ("task_create", {"tasks": [
                {"title": "Idle", "prompt": "wait", "assigned_to": "new:scripted/sleeper"},
                {"title": "Job", "prompt": "do it", "assigned_to": "new:scripted/sleeper"}]}))
        if len(results) == 1:
            job = results[0].splitlines()[1].split()[2].rstrip(":")
            return reply(None, ("task_update", {"task_id": job, "assigned_to": f"{root_id}.1"}))
        return reply("ok" if not completions(messages) else "job done")

    def sleeper(messages: list[dict[str, Any]]) -> ScriptedReply:
        assignments = [t for m in messages if "You have been assigned" in (t := text(m))]
        if "Title: \"Job\"" in "".join(assignments) and "task_complete" not in tools_called(
                messages):
            job = next(m for m in assignments if "Title: \"Job\"" in m).split("'")[1]
            return reply(None, ("task_complete", {"task_id": job, "message": "job result"}))
        if "task_update" not in tools_called(messages):
            own = assigned_task(messages)
            return reply(None, ("task_update", {"task_id": own, "status": "blocked"}))
        return reply("nothing more")

    models.on("root", root_script)
    models.on("sleeper", sleeper)
    root = await runtime.start_session("go", "scripted/root")
    root_id = root.id
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    assert query(db_path, "SELECT title, status, assigned_to FROM tasks ORDER BY title") == [
        ("Idle", "blocked", f"{root_id}.1"), ("Job", "completed", f"{root_id}.1")]
    kinds = query(db_path, "SELECT i.thread_id, i.kind, t.title FROM inbox i JOIN tasks t "
                           "ON t.id = i.task_id WHERE i.thread_id != ? ORDER BY i.id", root_id)
    assert (f"{root_id}.2", "unassigned", "Job") in kinds
    assert (f"{root_id}.1", "assignment", "Job") in kinds


async def test_a_failing_model_blocks_its_task_and_tells_the_creator(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    def broken(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise litellm().AuthenticationError("invalid key sk-live-abcdefghijklmnop",
                                            llm_provider="scripted", model="broken")

    models.on("root", coordinator("new:scripted/broken", "new:scripted/worker"))
    models.on("broken", broken)
    models.on("worker", dutiful_worker())
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    broken_id = f"{root.id}.1"
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", broken_id) == [
        ("error",)]
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Alpha", "blocked"), ("Beta", "completed")]
    (note,), = query(db_path, "SELECT content FROM task_notes n JOIN tasks t ON t.id = n.task_id "
                              "WHERE t.title = 'Alpha'")
    assert "AuthenticationError" in note and "sk-live" not in note and "[redacted]" in note
    assert query(db_path, "SELECT COUNT(*) FROM llm_calls WHERE thread_id = ? AND error IS NOT "
                          "NULL", broken_id) == [(1,)]  # permanent: never retried
    notices = [text(m) for m in models.calls_of("root")[-1] if m["role"] == "user"]
    assert any("is now blocked" in n and "AuthenticationError" in n for n in notices)
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", root.id) == [
        ("idle",)]


async def test_transient_failures_are_retried(runtime: Runtime, models: ScriptedModels,
                                              db_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    failures = [2]

    def flaky(messages: list[dict[str, Any]]) -> ScriptedReply:
        if failures[0]:
            failures[0] -= 1
            raise litellm().RateLimitError("slow down", llm_provider="scripted", model="flaky")
        return reply("fine")

    models.on("flaky", flaky)
    root = await runtime.start_session("hi", "scripted/flaky")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert query(db_path, "SELECT error IS NULL FROM llm_calls ORDER BY id") == [(0,), (0,), (1,)]
    assert query(db_path, "SELECT status FROM agent_metadata") == [("idle",)]


async def test_a_notice_arriving_mid_turn_waits_and_is_delivered_once(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    child_done = asyncio.Event()
    release_root = asyncio.Event()

    async def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        tool_results = [m for m in messages if m["role"] == "tool"]
        if not tool_results:
            return reply(None, ("task_create", {"tasks": [
                {"title": "Quick", "prompt": "q", "assigned_to": "new:scripted/worker"}]}))
        if len(tool_results) == 1:
            return reply(None, ("task_list", {}))  # still mid-turn while the child finishes
        if len(tool_results) == 2 and not completions(messages):
            await asyncio.wait_for(child_done.wait(), 20)
            release_root.set()
            return reply("turn over")
        return reply(f"got {len(completions(messages))} completion(s)")

    def on_event(event: RuntimeEvent) -> None:  # the child's turn ended: its task is done
        if isinstance(event, TurnEnded) and event.thread_id.endswith(".1"):
            child_done.set()

    runtime.bus.subscribe(on_event)
    models.on("root", root_script)
    models.on("worker", dutiful_worker())
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    assert release_root.is_set()
    root_calls = models.calls_of("root")
    assert completions(root_calls[2]) == []  # not injected into the running turn
    assert len(completions(root_calls[-1])) == 1
    assert root_calls[-1][-1]["content"].startswith("[LACE TASK SYSTEM] Task")
    assert query(db_path, "SELECT json_extract(data, '$.kind') FROM events WHERE thread_id = ? "
                          "AND type = 'notification' ORDER BY id", root.id) == [
        ("progress",), ("completion",)]  # the child's note waited for the completion
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL") == [(0,)]


async def test_a_spawn_is_refused_without_a_key(runtime: Runtime, models: ScriptedModels,
                                                db_path: Path) -> None:
    models.on("root", coordinator("new:openai/gpt-4o", titles=("Needs key",)))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    (result,), = query(db_path, "SELECT data FROM events WHERE type = 'tool_result'")
    data = json.loads(result)
    assert data["is_error"] and "OPENAI_API_KEY" in data["message"]["content"]
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(1,)]
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(0,)]


async def test_a_custom_base_url_needs_no_key(runtime: Runtime, models: ScriptedModels,
                                              db_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": "Local", "prompt": "p", "assigned_to": "new:openai/local-model"}]}))
        if messages[-1]["role"] == "user" else reply("ok"))
    root, _answer = await first_root_answer(runtime, "go", "scripted/root")
    assert query(db_path, "SELECT provider, model FROM agent_metadata WHERE thread_id = ?",
                 f"{root.id}.1") == [("openai", "local-model")]


async def test_a_child_that_never_completes_is_reminded_then_blocked(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", coordinator("new:scripted/lazy", titles=("Chore",)))
    models.on("lazy", lambda messages: reply(f"I looked at it ({len(messages)} messages)"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    child = f"{root.id}.1"
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    kinds = query(db_path, "SELECT kind, sender FROM inbox WHERE thread_id = ? ORDER BY id", child)
    assert kinds == [("assignment", root.id), ("reminder", "lace")]
    assert len(models.calls_of("lazy")) == 2
    notes = [n for (n,) in query(db_path, "SELECT content FROM task_notes ORDER BY id")]
    assert notes[0].startswith("Turn ended without completing the task: I looked at it")
    assert notes[1].startswith("Blocked: ended its turn twice")
    (notice,), = query(db_path, "SELECT text FROM inbox WHERE thread_id = ? AND kind = 'status'",
                       root.id)
    assert "is now blocked" in notice and "I looked at it" in notice
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", child) == [
        ("idle",)]


@pytest.mark.parametrize(("limits", "peak_wanted"), [
    ({"max_running": 2}, 2),
    ({"max_running": 8, "per_provider": {"scripted": 1}}, 1),
])
async def test_model_calls_respect_the_limits(store: Any, models: ScriptedModels,
                                              limits: dict[str, Any], peak_wanted: int) -> None:
    from lace.config import Limits, Settings
    from lace.llm.client import default_client

    in_flight, peak = [0], [0]

    async def counted(messages: list[dict[str, Any]]) -> ScriptedReply:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.02)
        in_flight[0] -= 1
        return dutiful_worker()(messages)

    models.on("root", coordinator(*["new:scripted/worker"] * 4, titles=("a", "b", "c", "d")))
    models.on("worker", counted)
    supervisor = open_runtime(store, Settings(limits=Limits(**limits)), default_client())
    root = await supervisor.start_session("go", "scripted/root")
    await asyncio.wait_for(supervisor.run_until_quiet(root.id), 60)
    supervisor.close()
    assert peak[0] == peak_wanted


async def test_a_watched_thread_streams_its_text(runtime: Runtime,
                                                 models: ScriptedModels) -> None:
    from lace.runtime.events import TextStreamed

    models.on("root", lambda messages: reply("one two three") if messages[-1]["role"] == "tool"
              else reply("listing", ("task_list", {})))
    deltas: list[str] = []
    runtime.bus.subscribe(lambda event: deltas.append(event.delta)
                          if isinstance(event, TextStreamed) else None)
    _root, answer = await first_root_answer(runtime, "go", "scripted/root", watch=True)
    assert answer == "one two three"
    assert "".join(deltas) == "listingone two three" and len(deltas) == 4


async def test_costs_are_counted_and_unknown_prices_logged_once(
        runtime: Runtime, models: ScriptedModels, db_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    models.on("priced", lambda messages: ScriptedReply(text="ok", cost_usd=0.02))
    models.on("unpriced", lambda messages: ScriptedReply(text="ok", cost_usd=None))
    caplog.set_level(logging.INFO, logger="lace.llm")
    for model in ("scripted/priced", "scripted/unpriced", "scripted/unpriced"):
        root = await runtime.start_session("hi", model)
        await runtime.run_until_quiet(root.id)
    costs = query(db_path, "SELECT model, prompt_tokens, completion_tokens, cost_usd FROM "
                           "llm_calls ORDER BY id")
    assert costs[0] == ("scripted/priced", 10, 5, pytest.approx(0.02))
    assert costs[1:] == [("scripted/unpriced", 10, 5, None)] * 2  # unknown, not $0
    assert query(db_path, "SELECT SUM(cost_usd) FROM agent_metadata") == [
        (pytest.approx(0.02),)]
    logged = [r.getMessage() for r in caplog.records if "no known price" in r.getMessage()]
    assert logged == ["no known price for scripted/unpriced; its cost stays unknown (tokens "
                      "still add up)"]


async def test_provider_keys_are_never_written(runtime: Runtime, models: ScriptedModels,
                                               db_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    models.on("root", coordinator("new:openai/gpt-4o", titles=("Keyed",)))
    root, _answer = await first_root_answer(runtime, "go", "scripted/root")
    await runtime.stop()
    assert secret not in str(snapshot(db_path))
    for path in [] if is_postgres(db_path) else Path(db_path).parent.glob("lace.db*"):
        assert secret.encode() not in path.read_bytes()  # nor in SQLite's free pages
    assert query(db_path, "SELECT provider, model FROM agent_metadata WHERE thread_id = ?",
                 f"{root.id}.1") == [("openai", "gpt-4o")]


async def test_tests_cannot_reach_a_real_provider(runtime: Runtime, db_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    root = await runtime.start_session("hi", "openai/gpt-4o")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 10)
    assert query(db_path, "SELECT error FROM llm_calls") == [
        ("remote model calls are disabled here (openai/gpt-4o)",)]


async def test_every_event_is_published_once_committed_with_the_id_the_table_holds(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    """What the app and `lace follow` hear of a fan-out is the events table: each row once,
    in order per thread, with its id and type, and committed when it is heard of (its id
    arrives with the transaction's last round trip on PostgreSQL)."""
    from benchmarks.fanout import root_step, worker_step
    from lace.runtime.events import EventAppended

    def scripted(step: tuple[Any, Any]) -> ScriptedReply:
        text, calls = step
        return ScriptedReply(text=text, tool_calls=list(calls))

    models.on("root", lambda messages: scripted(root_step(messages, 6, "new:scripted/worker")))
    models.on("worker", lambda messages: scripted(worker_step(messages)))
    heard: list[tuple[str, int, str]] = []
    uncommitted: list[tuple[str, int, str]] = []

    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, EventAppended):
            heard.append((event.thread_id, event.event_id, event.type))
            if query(db_path, "SELECT thread_id, id, type FROM events WHERE id = ?",
                     event.event_id) != [heard[-1]]:
                uncommitted.append(heard[-1])

    runtime.bus.subscribe(on_event)
    session = await runtime.start_session("Fan out 6 tasks.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)
    assert query(db_path, "SELECT COUNT(*) FROM tasks WHERE status = 'completed'") == [(6,)]
    assert uncommitted == []
    table = query(db_path, "SELECT thread_id, id, type FROM events ORDER BY id")
    assert sorted(heard, key=lambda row: row[1]) == table
    for thread in {thread for thread, _id, _type in table}:
        ids = [event_id for owner, event_id, _type in heard if owner == thread]
        assert ids == sorted(ids), thread
