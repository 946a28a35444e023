"""The task board: tasks grouped by status; the selected task's prompt and notes; add a task,
add a note, complete a task assigned to `human`, or jump to the assignee's thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from lace.core.records import Task
from lace.core.tasks import PRIORITY_RANK, STATUS_SYMBOL
from lace.tui.literal import literal, literal_line
from lace.tui.widgets.prompt_modal import PromptModal

if TYPE_CHECKING:
    from lace.tui.app import LaceApp

STATUS_ORDER = {"in_progress": 0, "pending": 1, "blocked": 2, "completed": 3, "archived": 4}


def board_order(tasks: list[Task]) -> list[Task]:
    """Grouped by status (working first), then priority, then oldest first."""
    return sorted(tasks, key=lambda t: (STATUS_ORDER[t.status], PRIORITY_RANK[t.priority],
                                        t.created_at))


class BoardScreen(Screen[str | None]):
    """Dismissed with a thread id to jump to, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,b", "close", "Threads"),
        Binding("enter", "jump", "Go to assignee"),
        Binding("a", "add_task", "Add task"),
        Binding("n", "add_note", "Add note"),
        Binding("c", "complete", "Complete (human)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Task] = []
        self.ready = False  # a refresh may come before the table has its columns

    @property
    def lace(self) -> LaceApp:
        from lace.tui.app import LaceApp

        assert isinstance(self.app, LaceApp)
        return self.app

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Task board", id="board-title")
            yield DataTable(id="board-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="task-detail", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("", "status", "priority", "title", "assignee", "notes", "id")
        self.ready = True
        self.lace.pending_refresh = True  # the app reads every task while the board is open

    def show_tasks(self, tasks: list[Task]) -> None:
        """Redraw the table, keeping the cursor on the same task."""
        if not self.ready:
            return
        table = self.query_one(DataTable)
        ordered = board_order(tasks)
        if [(t.id, t.status, t.assigned_to, t.note_count, t.priority, t.title)
                for t in ordered] == [(t.id, t.status, t.assigned_to, t.note_count, t.priority,
                                       t.title) for t in self.tasks]:
            return
        current = self.selected()
        self.tasks = ordered
        table.clear()
        for task in ordered:
            table.add_row(STATUS_SYMBOL[task.status], task.status, task.priority,
                          literal_line(task.title), literal_line(task.assigned_to or "—"),
                          str(task.note_count), literal_line(task.id), key=task.id)
        if current is not None and any(t.id == current.id for t in ordered):
            table.move_cursor(row=table.get_row_index(current.id))
        self.query_one("#board-title", Static).update(literal(
            f"Task board · {len(ordered)} tasks · "
            + " · ".join(f"{sum(t.status == s for t in ordered)} {s}" for s in STATUS_ORDER
                         if any(t.status == s for t in ordered))))
        self.describe(self.selected())

    def selected(self) -> Task | None:
        """The task under the cursor."""
        table = self.query_one(DataTable)
        if not self.tasks or table.cursor_row >= len(self.tasks):
            return None
        return self.tasks[table.cursor_row]

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.describe(self.selected())

    def describe(self, task: Task | None) -> None:
        """Show the task's prompt and notes below the table."""
        detail = self.query_one("#task-detail", Static)
        if task is None:
            detail.update("No tasks yet: press a to add one.")
            return
        self._describe(task.id)

    @work(exclusive=True, group="detail")
    async def _describe(self, task_id: str) -> None:
        task = await self.lace.reader.read(lambda tx: tx.get_task(task_id, with_notes=True))
        notes = "\n".join(f"{n}. {note.author}: {note.content}"
                          for n, note in enumerate(task.notes, start=1)) or "(no notes)"
        self.query_one("#task-detail", Static).update(literal(
            f"{task.id} · {task.status} · {task.priority} · created by {task.created_by} · "
            f"assigned to {task.assigned_to or 'nobody'}\n\n{task.prompt}\n\nNotes:\n{notes}"))

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_jump()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_jump(self) -> None:
        task = self.selected()
        if task is not None and task.assigned_to and task.assigned_to.startswith("lace_"):
            self.dismiss(task.assigned_to)

    def action_add_task(self) -> None:
        self.app.push_screen(PromptModal("New task (assigned to human unless it starts with "
                                         "'new:provider/model '):", "title"), self._add_task)

    def _add_task(self, text: str | None) -> None:
        if text:
            assignee, _, title = text.partition(" ") if text.startswith("new:") else (
                "human", "", text)
            self.lace.human_tool("task_create", {"tasks": [
                {"title": title[:200], "prompt": title, "assigned_to": assignee}]})

    def action_add_note(self) -> None:
        task = self.selected()
        if task is None:
            return

        def add(note: str | None) -> None:
            if note:
                self.lace.human_tool("task_add_note", {"task_id": task.id, "note": note})

        self.app.push_screen(PromptModal(f"Note on {task.title}:"), add)

    def action_complete(self) -> None:
        task = self.selected()
        if task is None or task.assigned_to != "human":
            self.notify("Only a task assigned to human can be completed here.", severity="warning")
            return

        def complete(message: str | None) -> None:
            if message:
                self.lace.human_tool("task_complete", {"task_id": task.id, "message": message})

        self.app.push_screen(PromptModal(f"Result of {task.title}:"), complete)
