"""The Textual app driven by Pilot: a scripted model, a real SQLite file, the real runtime."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input, Static

from benchmarks.common import traced_statements
from lace.cli.tui import interrupted_note
from lace.core.records import NewAgent
from lace.llm.types import ScriptedReply
from lace.store import Store, open_database
from lace.tui.app import LaceApp
from lace.tui.board import BoardScreen
from lace.tui.factory import create_app
from lace.tui.widgets.thread_tree import ThreadTree
from tests.conftest import new_session, spawn_child
from tests.piloted_app import SIZE, conversation_texts, make_app, settle
from tests.scripted import ScriptedModels, assigned_task, dutiful_worker, reply, tools_called
from tests.scripted_coordinator import coordinator


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
        assert [str(table.get_row_at(i)[1]) for i in range(table.row_count)] == ["completed"] * 2
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


async def test_the_board_marks_a_waiting_task_and_shows_it_start(
        db_path: Path, models: ScriptedModels) -> None:
    """A task that waits for the person's sign-off is marked ⧖ waiting with what it waits for;
    once the person completes the sign-off on the board, its agent is spawned and does it."""
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            return reply(None, ("task_create", {"tasks": [
                {"title": "Sign off", "prompt": "Say yes.", "assigned_to": "human"},
                {"title": "Announce", "prompt": "Post it.", "assigned_to": "new:scripted/worker",
                 "blocked_by": ["#1"]}]}))
        return reply("ok")

    def rows(board: BoardScreen) -> dict[str, list[str]]:
        table = board.query_one(DataTable)
        return {task.title: [str(cell) for cell in table.get_row_at(index)]
                for index, task in enumerate(board.tasks)}

    models.on("root", root)
    models.on("worker", dutiful_worker("posted"))
    app = create_app(db=str(db_path), model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", "b")
        await settle(app, pilot)
        board = app.screen
        assert isinstance(board, BoardScreen)
        assert rows(board)["Announce"][:6] == ["⧖", "waiting", "medium", "Announce",
                                               "new:scripted/worker", "Sign off"]
        assert rows(board)["Sign off"][:2] == ["○", "pending"]
        assert "1 pending · 1 waiting" in str(board.query_one("#board-title", Static).content)
        board.query_one(DataTable).move_cursor(row=[t.title for t in board.tasks].index(
            "Announce"))
        await settle(app, pilot)
        detail = str(board.query_one("#task-detail", Static).content)
        assert "waiting · medium" in detail and '("Sign off") [pending]: starts when' in detail
        assert app.runtime.store.database.path == db_path
        board.query_one(DataTable).move_cursor(row=[t.title for t in board.tasks].index(
            "Sign off"))
        await pilot.press("c", *"Yes", "enter")
        await settle(app, pilot)
        assert rows(board)["Announce"][:2] == ["●", "completed"]
        assert rows(board)["Announce"][4] == f"{app.session_id}.1"
        assert rows(board)["Announce"][5] == "—"
    with sqlite3.connect(db_path) as connection:
        notes = connection.execute("SELECT n.content FROM task_notes n JOIN tasks t ON t.id = "
                                   "n.task_id WHERE t.title = 'Announce' ORDER BY n.id").fetchall()
    assert notes == [("working on it",), ("posted",)]


async def end_the_app_mid_turn(db_path: Path, models: ScriptedModels, *,
                               by_quit_key: bool) -> LaceApp:
    """Open the app, start a root turn whose model never answers, and end the app while it
    runs: with ctrl+c, or as a closed `lace web` page does (Textual's exit, not the key)."""
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
        if by_quit_key:
            await pilot.press("ctrl+c")
        else:
            app.exit()
        await pilot.pause()
    return app


async def test_quitting_interrupts_running_turns(db_path: Path, models: ScriptedModels) -> None:
    app = await end_the_app_mid_turn(db_path, models, by_quit_key=True)
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status FROM agent_metadata").fetchall() == [
            ("interrupted",)]
        (root,), = connection.execute("SELECT id FROM threads")
    assert interrupted_note(app) == (  # what `lace` prints once the screen is gone
        f"lace: session {root} was interrupted; lace --continue {root} reopens it and resumes "
        f"its agents (or lace run --continue {root})")
    app.runtime.close()
    models.on("root", lambda messages: reply("picked up again"))
    again = create_app(db=str(db_path), continue_thread=root, model="scripted/root")
    async with again.run_test(size=SIZE) as pilot:
        await settle(again, pilot)
        said = [notification.message for notification in again._notifications]
        assert said == [f"Resuming 1 interrupted agent(s): {root}"]
        assert any("picked up again" in text for text in conversation_texts(again))
    assert interrupted_note(again) is None  # quit once its work was done: nothing to say


async def test_another_process_session_shows_live_without_running_it(
        db_path: Path, models: ScriptedModels) -> None:
    """Agents a live process runs are shown, not run; new rows appear on the next poll."""
    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        root = tx.threads.create_session(provider="scripted", model="root", title="elsewhere")
        tx.processes.register("elsewhere", 15.0)  # alive: this pid exists, its heartbeat fresh
        tx.agents.update(root.id, status="running", lease_holder="elsewhere")
        tx.inbox.post(root.id, sender="human", kind="message", text="pending elsewhere")
    models.on("root", lambda messages: reply("must not run here"))
    app = create_app(db=str(db_path), continue_thread=root.id, model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert app.runtime.running == frozenset()
        with store.transaction() as tx:
            tx.events.append(root.id, "agent_message", {"message": {
                "role": "assistant", "content": "written by the other process"}})
            child = tx.threads.create_child(root.id)
            tx.agents.create(NewAgent(thread_id=child.id, name="helper", provider="scripted",
                                      model="worker", parent_thread_id=root.id))
        await pilot.pause(1.2)
        assert child.id in app.query_one(ThreadTree).ordered_threads()
        assert any("written by the other process" in t for t in conversation_texts(app))
    assert models.calls == []
    store.close()


def test_continue_reopens_the_latest_or_named_session(db_path: Path,
                                                      models: ScriptedModels) -> None:
    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        first = tx.threads.create_session(provider="scripted", model="root")
        child = tx.threads.create_child(first.id)
        second = tx.threads.create_session(provider="scripted", model="root")
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
    Store(open_database(str(db_path))).close()  # a board with no session yet
    assert main(["--db", str(db_path), "--continue"]) == 2
    assert "No session to continue yet" in capsys.readouterr().err
    nowhere = db_path.parent / "nowhere.db"
    for continued in (["--continue"], ["--continue", "lace_20261125_p6kvrv"]):
        assert main(["--db", str(nowhere), *continued]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"lace: error: No session to continue: no lace board at {nowhere}")
        assert err.count("\n") == 1 and "nothing was created" in err
    assert list(db_path.parent.glob("nowhere.db*")) == []  # no board made only to refuse it


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


BOARD_TASKS = 2000


async def test_the_board_is_read_on_a_thread_not_on_the_event_loop(
        db_path: Path, store: Store) -> None:
    """While the board opens on 2,000 tasks, SQLite runs every statement on the tasks table on
    a thread other than the event loop's, which runs the agents and draws the screen."""
    root = new_session(store).id
    with store.transaction() as tx:
        for number in range(BOARD_TASKS):
            tx.tasks.insert(session_id=root, created_by="human", title=f"Task {number}",
                            prompt="Do it")
    app = create_app(db=str(db_path), continue_thread=root, model="demo/coordinator")
    ran: list[tuple[int, str]] = []

    def record(statement: str) -> None:
        if "FROM tasks" in statement:
            ran.append((threading.get_ident(), statement))

    with traced_statements(app.runtime.store.database.engine, record):
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            ran.clear()
            await pilot.press("escape", "b")
            board = app.screen
            assert isinstance(board, BoardScreen)
            table = board.query_one(DataTable)
            for _ in range(200):
                if table.row_count == BOARD_TASKS:
                    break
                await pilot.pause(0.05)
            assert table.row_count == BOARD_TASKS
    loop = threading.get_ident()
    assert ran
    assert [statement for thread, statement in ran if thread == loop] == []


def app_on_two_children(store: Store) -> tuple[LaceApp, str]:
    """The app continuing a session whose root has spawned `.1` and `.2`; and the root's id."""
    root = new_session(store).id
    spawn_child(store, root)
    spawn_child(store, root)
    app = create_app(db=str(store.database.engine.url.database), continue_thread=root,
                     model="demo/coordinator")
    return app, root


async def test_next_and_previous_follow_the_tree_as_drawn(store: Store) -> None:
    """`.1`, `.2`, then `.1.1` are spawned; the tree draws `.1.1` under `.1`, and so go n/p."""
    app, root = app_on_two_children(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        spawn_child(store, f"{root}.1")
        await app.refresh_view()
        tree = app.query_one(ThreadTree)
        drawn = [root, f"{root}.1", f"{root}.1.1", f"{root}.2"]
        assert tree.ordered_threads() == drawn
        await pilot.press("escape")
        visited = []
        for _ in drawn:
            await pilot.press("n")
            visited.append(app.selected)
            assert tree.cursor_node is not None and tree.cursor_node.data == app.selected
        assert visited == [*drawn[1:], root]
        went_back = []
        for _ in drawn:
            await pilot.press("p")
            went_back.append(app.selected)
        assert went_back == [*reversed(drawn[1:]), root]


async def test_next_unfolds_a_folded_thread_and_lands_on_it(store: Store) -> None:
    """`.2` is folded, then `.1.1` is drawn above its hidden child: `n` from `.2` opens `.2`
    and puts the cursor on `.2.1`, not on the line `.2.1` had before."""
    app, root = app_on_two_children(store)
    spawn_child(store, f"{root}.2")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("escape", "n", "n", "space")
        tree = app.query_one(ThreadTree)
        assert app.selected == f"{root}.2"
        assert not tree.nodes_by_thread[f"{root}.2"].is_expanded
        spawn_child(store, f"{root}.1")
        await app.refresh_view()
        await pilot.press("n")
        await pilot.pause()
        assert app.selected == f"{root}.2.1"
        assert tree.nodes_by_thread[f"{root}.2"].is_expanded
        assert tree.cursor_node is not None and tree.cursor_node.data == f"{root}.2.1"


async def test_an_app_ended_without_q_marks_running_turns_interrupted(
        db_path: Path, models: ScriptedModels) -> None:
    """A closed `lace web` page ends the app with Textual's ExitApp, not the quit key."""
    await end_the_app_mid_turn(db_path, models, by_quit_key=False)
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status FROM agent_metadata").fetchall() == [
            ("interrupted",)]


async def test_an_imported_session_runs_once_the_person_opens_it_in_the_app(
        db_path: Path, models: ScriptedModels) -> None:
    """Inert until a person resumes it (hostile/test_import.py): opening it in the app does."""
    from lace.store.export_format import parse_document
    from lace.store.transfer import import_session
    from tests.hostile.test_import import ROOT, crafted_export

    document = crafted_export()
    for agent in document["agents"]:
        agent.update(provider="scripted", model="root", tools=["task_list"])
    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        import_session(tx, parse_document(document))
    store.close()
    models.on("root", lambda messages: reply("resumed by the person"))
    app = create_app(db=str(db_path), continue_thread=ROOT, model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert any("resumed by the person" in text for text in conversation_texts(app))
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT DISTINCT inert FROM agent_metadata").fetchall() == [
            (0,)]


async def test_the_board_closed_while_a_task_is_read_does_not_crash_the_app(
        db_path: Path, models: ScriptedModels) -> None:
    """Seen under load: the board's detail read came back after the board was closed, and
    its update of the gone detail pane crashed the app."""
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", "b")
        await pilot.pause()
        board = app.screen
        assert isinstance(board, BoardScreen) and board.tasks
        board.dismiss(None)
        await pilot.pause()
        assert not isinstance(app.screen, BoardScreen) and not board.is_attached
        board._describe(board.tasks[0].id)  # as a read that comes back after the close
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert app.return_code in (None, 0)


async def test_the_app_refuses_to_resume_a_helper_whose_worktree_was_pruned(
        store: Store, db_path: Path) -> None:
    from lace.core.worktrees import WorktreeOrigin, not_resumable

    root = new_session(store).id
    child = spawn_child(store, root)
    with store.transaction() as tx:  # a helper a person stopped, then pruned its worktree
        tx.worktrees.insert(child, WorktreeOrigin(repository="/nowhere/repo", base_branch="main",
                                                  base_commit="0" * 40, folders="/nowhere/wt"))
        tx.worktrees.set_status(child, "pruned")
        tx.lifecycle.stop_subtree(child, reason="enough (by human)", by_person=True)
    app = create_app(db=str(db_path), continue_thread=root, model="demo/coordinator")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("escape", "n")
        assert app.selected == child
        await pilot.press("r")
        await settle(app, pilot)
        said = [notification.message for notification in app._notifications]
        assert said == [not_resumable(child, child, f"lace/{child}")]
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT status FROM agent_metadata WHERE thread_id = ?",
                                  (child,)).fetchone() == ("stopped",)
