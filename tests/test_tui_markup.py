"""The app never parses text from models, tools or the database as markup: every field it shows
(task title, tool name, arguments, result, thread title, agent name, notes, approval text, error
text) holds markup-like text here, and the app stays up and shows it literally."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import DataTable, Static
from textual.widgets._toast import Toast

from lace.core.assignee import HumanAssignee
from lace.core.records import NewAgent
from lace.store import Store
from lace.tui.app import LaceApp
from lace.tui.board import BoardScreen
from lace.tui.factory import create_app
from lace.tui.widgets.approval_modal import ApprovalModal
from lace.tui.widgets.conversation import Conversation, ToolCallView
from lace.tui.widgets.prompt_modal import PromptModal
from lace.tui.widgets.thread_tree import ThreadTree
from tests.conftest import new_session
from tests.piloted_app import SIZE

MARKUP = "[/]a[link=http://x]b[/link][bold red]c"
"""A closing tag with nothing open, a link and a style: each raised MarkupError or vanished."""
DEEP = '{"x": ' + "[" * 1100 + "]" * 1100 + "}"


@pytest.fixture(autouse=True)
def test_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_TEST_PROVIDERS", "1")


def seed(store: Store) -> tuple[str, str, str]:
    """A session whose every shown field holds MARKUP: (root, child, task id)."""
    session = new_session(store, title=f"title {MARKUP}")
    with store.transaction() as tx:
        tx.agents.update(session.id, model=f"root{MARKUP}")
        task = tx.board.create_task(session_id=session.id, actor=session.id, title=f"task {MARKUP}",
                                    prompt=f"prompt {MARKUP}", assignee=HumanAssignee())
        tx.notes.insert(task.id, f"author{MARKUP}", f"note {MARKUP}")
        child = tx.threads.create_child(session.id)
        tx.agents.create(NewAgent(thread_id=child.id, name=f"name{MARKUP}", provider="scripted",
                                  model="worker", parent_thread_id=session.id,
                                  current_task=task.id))
        events: list[tuple[str, dict[str, Any]]] = [
            ("user_message", {"message": {"role": "user", "content": f"you {MARKUP}"}}),
            ("notification", {"kind": f"kind{MARKUP}", "sender": f"sender{MARKUP}",
                              "message": {"role": "user", "content": f"notice {MARKUP}"}}),
            ("agent_message", {"message": {"role": "assistant", "content": f"answer {MARKUP}"}}),
            ("tool_call", {"call_id": "c1", "tool_name": f"tool{MARKUP}",
                           "arguments": json.dumps({"arg": MARKUP})}),
            ("tool_result", {"call_id": "c1", "tool_name": f"tool{MARKUP}", "is_error": True,
                             "files_changed": [f"file{MARKUP}"],
                             "message": {"role": "tool", "content": f"result {MARKUP}"}}),
            ("tool_result", {"call_id": "c0", "tool_name": "t", "is_error": False,
                             "message": {"role": "tool", "content": f"orphan {MARKUP}"}}),
            ("tool_call", {"call_id": "c2", "tool_name": "deep", "arguments": DEEP}),
            ("error", {"error": f"error {MARKUP}"}),
        ]
        for kind, data in events:
            tx.events.append(child.id, kind, data)
        tx.approvals.request(child.id, f"bash{MARKUP}", {"command": f"echo {MARKUP}"})
    return session.id, child.id, task.id


def screen_text(app: LaceApp) -> str:
    """What the terminal shows, as plain text."""
    console = Console(width=SIZE[0], height=SIZE[1], file=io.StringIO(), record=True,
                      force_terminal=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def static_text(widget: Static) -> str:
    return str(widget.render())


async def test_every_field_is_shown_literally(store: Store, db_path: Path) -> None:
    root, child, task_id = seed(store)
    app = create_app(db=str(db_path), model="scripted/root", continue_thread=child)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()

        assert isinstance(app.screen, ApprovalModal)  # the approval prompt
        shown = " ".join(static_text(widget) for widget in app.screen.query(Static))
        assert f"bash{MARKUP}" in shown and f"echo {MARKUP}" in shown
        assert f"bash{MARKUP}" in screen_text(app)
        await pilot.press("d")
        for _ in range(100):  # the decision is written, then the prompt closes (5 s at most)
            await app.workers.wait_for_complete()
            if not isinstance(app.screen, ApprovalModal):
                break
            await pilot.pause(0.05)
        assert not isinstance(app.screen, ApprovalModal)

        tree = app.query_one(ThreadTree)  # agent name, the root's model, the task title
        labels = [str(node.label) for node in tree.nodes_by_thread.values()]
        assert any(f"root{MARKUP}" in label for label in labels)
        assert any(f"name{MARKUP}" in label and "task [/]a[link" in label for label in labels)

        assert app.selected == child  # the conversation
        conversation = app.query_one(Conversation)
        for call in conversation.query(ToolCallView):
            call.collapsed = False
        await pilot.pause()
        texts = [str(widget.render()) for widget in conversation.query(Static)]
        joined = "\n".join(texts)
        for expected in (f"you {MARKUP}", f"notice {MARKUP}", f"sender{MARKUP}",
                         f"result {MARKUP}", f"file{MARKUP}", f"orphan {MARKUP}",
                         f"error {MARKUP}", f'"arg": "{MARKUP}"', f"tool{MARKUP}",
                         '{"x": [[[['):
            assert expected in joined, expected
        assert f"answer {MARKUP}" in screen_text(app)

        await pilot.press("escape", "b")  # the board
        await pilot.pause()
        await app.workers.wait_for_complete()
        await app.refresh_view()
        await pilot.pause()
        assert isinstance(app.screen, BoardScreen)
        table = app.screen.query_one(DataTable)
        assert [str(cell) for cell in table.get_row_at(0)][3] == f"task {MARKUP}"
        await app.screen.workers.wait_for_complete()
        await pilot.pause()
        detail = static_text(app.screen.query_one("#task-detail", Static))
        assert f"prompt {MARKUP}" in detail and f"author{MARKUP}: note {MARKUP}" in detail

        await pilot.press("n")  # a question naming the task
        await pilot.pause()
        assert isinstance(app.screen, PromptModal)
        assert f"Note on task {MARKUP}:" in " ".join(
            static_text(widget) for widget in app.screen.query(Static))
        await pilot.press(*MARKUP, "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()

        app.human_tool("task_view", {"task_id": MARKUP})  # an error notification
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        toasts = [str(toast.render()) for toast in app.screen.query(Toast)]
        assert any(f"Unknown task '{MARKUP}'" in toast for toast in toasts), toasts
        assert app.is_running
    assert app.return_code in (None, 0)
    with store.reading() as tx:
        task = tx.tasks.get(task_id, with_notes=True)
    assert [note.content for note in task.notes] == [f"note {MARKUP}", MARKUP]
    assert task.thread_id == root
