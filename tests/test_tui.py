"""The Textual app driven by Pilot: a scripted model, a real SQLite file, the real runtime."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input

from lace.llm.types import ScriptedReply
from lace.tui.app import LaceApp
from lace.tui.board import BoardScreen
from lace.tui.factory import create_app
from lace.tui.widgets.conversation import Conversation, ToolCallView
from lace.tui.widgets.thread_tree import ThreadTree
from tests.scripted import (
    ScriptedModels,
    assigned_task,
    dutiful_worker,
    reply,
    text,
    tools_called,
)
from tests.test_runtime import coordinator

SIZE = (160, 45)


def chatty_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Works its task like a dutiful worker, and answers a person's message."""
    last = messages[-1]
    if last["role"] == "user" and not text(last).startswith("[LACE"):
        return reply(f"you said: {text(last)}")
    return dutiful_worker(f"result of {assigned_task(messages)}")(messages)


def make_app(db_path: Path, models: ScriptedModels) -> LaceApp:
    models.on("root", coordinator("new:scripted/worker", "new:scripted/worker"))
    models.on("worker", chatty_worker)
    return create_app(db=str(db_path), model="scripted/root")


async def settle(app: LaceApp, pilot: Any) -> None:
    """Let every agent finish, then let the screen catch up."""
    assert app.session_id is not None
    await pilot.pause()
    await app.workers.wait_for_complete()
    await app.runtime.run_until_quiet(app.session_id)
    await app.refresh_view()
    await pilot.pause()


def conversation_texts(app: LaceApp) -> list[str]:
    conversation = app.query_one(Conversation)
    texts = []
    for widget in conversation.children:
        if isinstance(widget, ToolCallView):
            texts.append(str(widget.title))
        else:
            texts.append(str(getattr(widget, "content", getattr(widget, "source", ""))))
    return texts


async def test_a_prompt_spawns_two_agents_to_switch_between(db_path: Path,
                                                           models: ScriptedModels) -> None:
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        root = app.session_id
        tree = app.query_one(ThreadTree)
        assert tree.ordered_threads() == [root, f"{root}.1", f"{root}.2"]
        assert "worker" in tree.labels[f"{root}.1"] and "✓" in tree.labels[f"{root}.1"]
        assert app.focused is app.query_one(Input)

        await pilot.press("escape", "n")
        assert app.selected == f"{root}.1"
        shown = conversation_texts(app)
        assert any("You have been assigned task" in t and 'Title: "Alpha"' in t for t in shown)
        assert any(t.startswith("✓ task_complete(") for t in shown)

        await pilot.press("n")
        assert app.selected == f"{root}.2"
        shown = conversation_texts(app)
        assert any('Title: "Beta"' in t for t in shown)
        assert any(t.startswith("✓ task_add_note(") for t in shown)

        await pilot.press("u")
        assert app.selected == root
        assert any("all done" in t for t in conversation_texts(app))

        await pilot.press("b")
        await pilot.pause()
        assert isinstance(app.screen, BoardScreen)
        table = app.screen.query_one(DataTable)
        assert [table.get_row_at(i)[1] for i in range(table.row_count)] == ["completed"] * 2
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, BoardScreen)
        assert app.selected in (f"{root}.1", f"{root}.2")

        await app.switch_to(f"{root}.1")
        await pilot.press("i", *"how did it go?", "enter")
        await settle(app, pilot)
        assert any("you said: how did it go?" in t for t in conversation_texts(app))
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute("SELECT sender, kind, consumed_at IS NOT NULL FROM inbox "
                                  "WHERE thread_id = ? AND kind = 'message'",
                                  (f"{root}.1",)).fetchall()
    assert rows == [("human", "message", 1)]


async def test_the_board_adds_and_completes_a_task_for_human(db_path: Path,
                                                             models: ScriptedModels) -> None:
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", "b", "a", *"Sign off", "enter")
        await settle(app, pilot)
        board = app.screen
        assert isinstance(board, BoardScreen)
        row = [t.title for t in board.tasks].index("Sign off")
        board.query_one(DataTable).move_cursor(row=row)
        await pilot.press("n", *"checked twice", "enter")
        await settle(app, pilot)
        await pilot.press("c", *"Approved", "enter")
        await settle(app, pilot)
    with sqlite3.connect(db_path) as connection:
        task = connection.execute("SELECT status, assigned_to, created_by FROM tasks WHERE "
                                  "title = 'Sign off'").fetchone()
        notes = connection.execute("SELECT n.author, n.content FROM task_notes n JOIN tasks t ON "
                                   "t.id = n.task_id WHERE t.title = 'Sign off' ORDER BY n.id"
                                   ).fetchall()
    assert task == ("completed", "human", "human")
    assert notes == [("human", "checked twice"), ("human", "Approved")]


async def test_quitting_interrupts_running_turns(db_path: Path, models: ScriptedModels) -> None:
    import asyncio

    started = asyncio.Event()

    async def slow(messages: list[dict[str, Any]]) -> ScriptedReply:
        started.set()
        await asyncio.sleep(60)
        return reply("never")

    models.on("root", slow)
    app = create_app(db=str(db_path), model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"hi", "enter")
        await asyncio.wait_for(started.wait(), 20)
        await pilot.press("ctrl+c")
        await pilot.pause()
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status FROM agent_metadata").fetchall() == [
            ("interrupted",)]
        (root,), = connection.execute("SELECT id FROM threads")
    models.on("root", lambda messages: reply("picked up again"))
    again = create_app(db=str(db_path), continue_thread=root, model="scripted/root")
    async with again.run_test(size=SIZE) as pilot:
        await settle(again, pilot)
        said = [notification.message for notification in again._notifications]
        assert said == [f"Resuming 1 interrupted agent(s): {root}"]
        assert any("picked up again" in text for text in conversation_texts(again))


async def test_another_process_session_shows_live_without_running_it(
        db_path: Path, models: ScriptedModels) -> None:
    """Agents a live process runs are shown, not run; new rows appear on the next poll."""
    from lace.store import Store, open_database

    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        root = tx.create_session(provider="scripted", model="root", title="elsewhere")
        tx.register_process("elsewhere", 15.0)  # alive: this pid exists and the heartbeat is fresh
        tx.update_agent(root.id, status="running", lease_holder="elsewhere")
        tx.post_inbox(root.id, sender="human", kind="message", text="pending elsewhere")
    models.on("root", lambda messages: reply("must not run here"))
    app = create_app(db=str(db_path), continue_thread=root.id, model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert app.runtime.running == {}
        with store.transaction() as tx:
            tx.append_event(root.id, "agent_message", {"message": {
                "role": "assistant", "content": "written by the other process"}})
            child = tx.create_child_thread(root.id)
            tx.create_agent(thread_id=child.id, name="helper", provider="scripted",
                            model="worker", parent_thread_id=root.id)
        await pilot.pause(1.2)
        assert child.id in app.query_one(ThreadTree).ordered_threads()
        assert any("written by the other process" in t for t in conversation_texts(app))
    assert models.calls == []
    store.close()


def test_continue_reopens_the_latest_or_named_session(db_path: Path,
                                                      models: ScriptedModels) -> None:
    from lace.store import Store, open_database

    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        first = tx.create_session(provider="scripted", model="root")
        child = tx.create_child_thread(first.id)
        second = tx.create_session(provider="scripted", model="root")
    store.close()
    latest = create_app(db=str(db_path), continue_thread="latest", model="scripted/root")
    assert latest.session_id == second.id
    named = create_app(db=str(db_path), continue_thread=child.id, model="scripted/root")
    assert (named.session_id, named.selected) == (first.id, child.id)


def test_bad_tui_options_are_one_line_before_the_screen_opens(
        db_path: Path, capsys: Any) -> None:
    from lace.cli import main

    assert main(["--db", str(db_path), "--model", "foo/bar"]) == 2
    assert capsys.readouterr().err == "lace: error: Unknown provider 'foo'\n"
    assert main(["--db", str(db_path), "--continue"]) == 2
    assert "No session to continue yet" in capsys.readouterr().err


async def test_the_app_stops_an_agent_and_shows_stopped_agents_and_subtree_totals(
        db_path: Path, models: ScriptedModels) -> None:
    import asyncio

    started = asyncio.Event()

    async def slow(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            return reply(None, ("task_add_note", {"task_id": assigned_task(messages),
                                                  "note": "starting"}))
        started.set()
        await asyncio.sleep(60)
        return reply("never")

    models.on("root", coordinator("new:scripted/slow", titles=("Long job",)))
    models.on("slow", slow)
    app = create_app(db=str(db_path), model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"go", "enter")
        await asyncio.wait_for(started.wait(), 20)
        await app.refresh_view()
        root = app.session_id
        await pilot.press("escape", "n")
        assert app.selected == f"{root}.1"
        await pilot.press("s", *"not needed", "enter")
        await settle(app, pilot)
        tree = app.query_one(ThreadTree)
        assert tree.labels[f"{root}.1"].startswith("■ .1")
        with sqlite3.connect(db_path) as connection:
            (total,), = connection.execute("SELECT SUM(tokens_in + tokens_out) FROM "
                                           "agent_metadata").fetchall()
        assert f"(tree {total} tok $0.00)" in tree.labels[root]
        assert any("stopped: not needed (by human)" in t for t in conversation_texts(app))
        await pilot.press("E", *"enough", "enter")
        await settle(app, pilot)
        assert app.query_one(ThreadTree).labels[root].startswith("■ root")
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status, stop_reason FROM agent_metadata WHERE "
                                  "thread_id = ?", (f"{root}.1",)).fetchone() == (
            "stopped", "not needed (by human)")
        assert connection.execute("SELECT status FROM tasks").fetchone() == ("blocked",)
