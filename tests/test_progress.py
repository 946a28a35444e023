"""Progress is not a wake-up, and a helper whose work is done stops calling its model: a
fan-out costs each helper two model calls (note, complete) and the coordinator none for the
notes, which reach it with its next turn in one block."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lace.core.assignee import ThreadAssignee
from lace.core.notifications import (
    PROGRESS_HEADER,
    PROGRESS_LINE_CAP,
    PROGRESS_SHOWN,
    progress_block,
    read_completions,
)
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.store import Store
from tests.conftest import new_session, query, spawn_child
from tests.scripted import Handler, ScriptedModels, assigned_task, reply, tools_called
from tests.scripted_coordinator import completions

pytestmark = pytest.mark.both_engines

HELPERS = 5


def one_task_root(title: str, assigned_to: str,
                  heard: Callable[[str], None] = lambda text: None) -> Handler:
    """A root that creates one task, then answers "ok" to whatever it is told (handed to
    `heard`)."""

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            return reply(None, ("task_create", {"tasks": [
                {"title": title, "prompt": title, "assigned_to": assigned_to}]}))
        heard(str(messages[-1].get("content")))
        return reply("ok")

    return root


async def test_a_fan_out_costs_two_calls_per_helper_and_no_root_call_for_their_notes(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    log: list[str] = []  # what the models saw, in order
    root_waiting, all_noted = asyncio.Event(), asyncio.Event()
    noted: set[str] = set()

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        log.append("root")
        if not tools_called(messages):
            return reply(None, ("task_create", {"tasks": [
                {"title": f"Part {n}", "prompt": f"Do part {n}.",
                 "assigned_to": "new:scripted/worker"} for n in range(1, HELPERS + 1)]}))
        if messages[-1]["role"] == "tool":
            root_waiting.set()
            return reply("Delegated; waiting.")
        return reply(f"{len(completions(messages))} of {HELPERS} done")

    async def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        if not done:
            await asyncio.wait_for(root_waiting.wait(), 20)  # the root's turn is over
            return reply(None, ("task_add_note", {"task_id": task_id, "note": "started"}))
        if done == ["task_add_note"]:  # the note is committed: pause before completing
            log.append("noted")
            noted.add(task_id)
            if len(noted) == HELPERS:
                all_noted.set()
            await asyncio.wait_for(all_noted.wait(), 20)
            await asyncio.sleep(0.3)  # time enough for the root to be woken, were it woken
            log.append("completing")
            return reply(None, ("task_complete", {"task_id": task_id, "message": "done"}))
        log.append("third call")
        return reply("finished")

    models.on("root", root)
    models.on("worker", worker)
    session = await runtime.start_session("Fan out.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)

    assert len(models.calls_of("worker")) == 2 * HELPERS and "third call" not in log
    first_note, first_completion = log.index("noted"), log.index("completing")
    assert first_note < first_completion
    assert "root" not in log[first_note:first_completion], log
    assert query(db_path, "SELECT status, COUNT(*) FROM tasks GROUP BY status") == [
        ("completed", HELPERS)]
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL") == [(0,)]
    assert query(db_path, "SELECT DISTINCT status FROM agent_metadata") == [("idle",)]
    # one notice for the fan-out, every completion inside it with today's wording
    ((notice,),) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                  "WHERE thread_id = ? AND type = 'notification' AND "
                                  "json_extract(data, '$.kind') = 'completion'", session.id)
    assert len(read_completions(notice)) == HELPERS
    assert notice.count("\n\n[LACE TASK SYSTEM] Task '") == HELPERS


async def test_progress_reaches_the_creator_in_one_block_with_its_next_turn(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        steps = [("task_update", {"task_id": task_id, "status": "pending"}),
                 ("task_add_note", {"task_id": task_id, "note": "half way"}),
                 ("task_add_note", {"task_id": task_id, "note": "nearly there"}),
                 ("task_complete", {"task_id": task_id, "message": "the answer"})]
        return reply(None, steps[len(done)])

    models.on("root", one_task_root("Alpha", "new:scripted/worker"))
    models.on("worker", worker)
    session = await asyncio.wait_for(runtime.start_session("go", "scripted/root"), 10)
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)

    kinds = query(db_path, "SELECT json_extract(data, '$.kind'), json_extract(data, "
                           "'$.message.content'), json_array_length(data, '$.inbox_ids') "
                           "FROM events WHERE thread_id = ? AND type = 'notification' "
                           "ORDER BY id", session.id)
    assert [(kind, count) for kind, _, count in kinds] == [("progress", 3), ("completion", None)]
    child = f"{session.id}.1"
    (task_id,), = query(db_path, "SELECT id FROM tasks")
    assert kinds[0][1] == (
        "[LACE TASK SYSTEM] Progress on tasks you created, since your last turn:\n"
        f"- {child} set '{task_id}' (\"Alpha\") to pending\n"
        f"- {child} noted on '{task_id}' (\"Alpha\"): half way\n"
        f"- {child} noted on '{task_id}' (\"Alpha\"): nearly there")
    assert len(models.calls_of("root")) == 3  # create, answer the result, the completion
    assert len(models.calls_of("worker")) == 4


async def test_blocked_and_messages_still_wake_the_creator_at_once(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    told = asyncio.Event()

    def heard(text: str) -> None:
        if "is now blocked" in text:
            told.set()  # woken by the block while the helper still waits

    async def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        if not done:
            return reply(None, ("task_update", {"task_id": task_id, "status": "blocked"}))
        await asyncio.wait_for(told.wait(), 20)
        return reply("I need help.")

    models.on("root", one_task_root("Alpha", "new:scripted/worker", heard))
    models.on("worker", worker)
    session = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)
    assert told.is_set()
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]


async def test_a_helper_with_more_open_work_goes_on_after_completing_a_task(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        called = tools_called(messages)
        if not called:
            return reply(None, ("task_create", {"tasks": [
                {"title": "First", "prompt": "a", "assigned_to": "new:scripted/worker"},
                {"title": "Second", "prompt": "b"}]}))
        if called == ["task_create"]:
            (second,), = query(db_path, "SELECT id FROM tasks WHERE title = 'Second'")
            child, = (row[0] for row in query(db_path, "SELECT assigned_to FROM tasks WHERE "
                                                       "title = 'First'"))
            return reply(None, ("task_update", {"task_id": second, "assigned_to": child}))
        return reply("ok")

    def mine() -> dict[str, str]:
        return dict(query(db_path, "SELECT title, id FROM tasks WHERE assigned_to LIKE '%.1' "
                                   "AND status != 'completed'"))

    async def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        for _ in range(400):  # the first call waits until the root gave it the second task
            if tools_called(messages) or "Second" in mine():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the second task never reached the helper")
        open_tasks = mine()
        if not open_tasks:  # the second task's assignment notice, read after the work
            return reply("nothing left to do")
        title = "First" if "First" in open_tasks else "Second"
        return reply(None, ("task_complete", {"task_id": open_tasks[title], "message": "did it"}))

    models.on("root", root)
    models.on("worker", worker)
    session = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("First", "completed"), ("Second", "completed")]
    calls = models.calls_of("worker")  # first done, second still open: it went on
    assert calls[1][-1]["role"] == "tool" and "Completed task" in calls[1][-1]["content"]
    assert tools_called(calls[-1]).count("task_complete") == 2


async def test_a_persons_note_on_a_task_assigned_to_human_wakes_the_creator(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", one_task_root("Pick a name", "human"))
    session = await runtime.start_session("Ask the person.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 30)
    asked = len(models.calls_of("root"))
    (task_id,), = query(db_path, "SELECT id FROM tasks")
    for tool, arguments in (("task_add_note", {"task_id": task_id, "note": "Call it Zephyr"}),
                            ("task_update", {"task_id": task_id, "status": "in_progress"})):
        result = await runtime.act_as_human(session.id, tool, arguments)
        assert not result.is_error, result.text
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 30)
    assert len(models.calls_of("root")) > asked  # the person's answer is input, not progress
    told = " ".join(str(message.get("content")) for message in models.calls_of("root")[-1])
    assert "Call it Zephyr" in told and "is now in_progress, changed by human" in told
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL OR NOT wakes"
                 ) == [(0,)]


def test_a_wait_that_times_out_keeps_the_progress_of_tasks_still_running(
        store: Store, db_path: Path) -> None:
    root = new_session(store)
    helper = spawn_child(store, root.id)
    with store.transaction() as tx:
        running, done = (tx.board.create_task(session_id=root.id, actor=root.id, title=title,
                                              prompt=title, assignee=ThreadAssignee(helper))
                         for title in ("Running", "Done"))
        for task in (running, done):
            tx.board.add_note(task.id, session_id=root.id, actor=helper, content="started")
        tx.board.complete_task(done.id, session_id=root.id, actor=helper, message="result")
        tx.inbox.consume_notices(root.id, [running.id, done.id])  # what a waiting tool's end does
    assert query(db_path, "SELECT task_id, kind FROM inbox WHERE thread_id = ? AND "
                          "consumed_at IS NULL", root.id) == [(running.id, "note")]


async def test_the_progress_block_is_bounded_however_many_notices_wait(
        runtime: Runtime, models: ScriptedModels) -> None:
    models.on("root", lambda messages: reply("ok"))
    session = await runtime.start_session("Hello.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 30)
    for batch in range(5):  # 100 tasks the person keeps, each heard of with the next turn
        result = await runtime.act_as_human(session.id, "task_create", {"tasks": [
            {"title": f"Errand {batch}-{n}", "prompt": "x" * 3000, "assigned_to": "human"}
            for n in range(20)]})
        assert not result.is_error, result.text
    await runtime.send(session.id, "Anything new?")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 30)
    block, = [str(message["content"]) for message in models.calls_of("root")[-1]
              if str(message.get("content")).startswith(PROGRESS_HEADER)]
    assert block.count("The person added task") == PROGRESS_SHOWN
    assert "Errand 4-19" in block and "Errand 0-0" not in block  # the newest, whole
    assert f"and {100 - PROGRESS_SHOWN} older notices: task_list shows their tasks" in block
    assert len(block) < PROGRESS_SHOWN * 2500


def test_a_long_progress_note_is_cut_in_the_block() -> None:
    block = progress_block(["- helper noted on 'task_x' (\"T\"): " + "y" * 20_000])
    assert len(block) < PROGRESS_LINE_CAP + 200
    assert "more characters; task_view shows the task's notes)" in block
