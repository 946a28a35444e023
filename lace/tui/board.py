"""The task board: tasks grouped by status (a task that waits for others apart, with what it
waits for); the selected task's prompt, dependencies and notes; add a task, add a note,
complete a task assigned to `human`, or jump to the assignee's thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from lace.core.lines import related_list
from lace.core.records import Task
from lace.core.tasks import PRIORITY_RANK, task_symbol
from lace.tui.literal import literal, literal_line
from lace.tui.widgets.prompt_modal import PromptModal

if TYPE_CHECKING:
    from lace.runtime.public import Tx
    from lace.tui.app import LaceApp

COLUMNS = ("", "status", "priority", "title", "assignee", "waits for", "notes", "id")
STATUS_ORDER = {"in_progress": 0, "pending": 1, "waiting": 2, "blocked": 3, "completed": 4,
                "archived": 5}


def board_status(task: Task) -> str:
    """The group a task is shown in: its status, or `waiting` for a pending task that waits
    for others."""
    return "waiting" if task.status == "pending" and task.waits_for else task.status


def board_order(tasks: list[Task]) -> list[Task]:
    """Grouped by status (working first, ready before waiting), then priority, then oldest
    first."""
    return sorted(tasks, key=lambda t: (STATUS_ORDER[board_status(t)],
                                        PRIORITY_RANK[t.priority], t.created_at))


def _shown_row(task: Task) -> tuple[object, ...]:
    """What the table shows of a task: a redraw is needed only when this changes."""
    return (task.id, task.status, task.assigned_to, task.note_count, task.priority, task.title,
            task.waits_for, task.blocks)


def _dependencies(task: Task, related: dict[str, Task]) -> str:
    """Lines naming what a task waits for (and what it waited for) and what it blocks."""
    lines = [f"\nwaits for {related_list(task.waits_for, related)}: starts when they are "
             "completed" if task.waits_for else "",
             f"\nwaited for {related_list(task.waited_for, related)}" if task.waited_for else "",
             f"\nblocks {related_list(task.blocks, related)}" if task.blocks else ""]
    return "".join(lines)


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
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.ready = True
        self.lace.pending_refresh = True  # the app reads every task while the board is open

    def show_tasks(self, tasks: list[Task]) -> None:
        """Redraw the table, keeping the cursor on the same task."""
        if not self.ready:
            return
        table = self.query_one(DataTable)
        ordered = board_order(tasks)
        if [_shown_row(t) for t in ordered] == [_shown_row(t) for t in self.tasks]:
            return
        current = self.selected()
        self.tasks = ordered
        titles = {task.id: task.title for task in ordered}
        rows = [[Text(task_symbol(task)), Text(board_status(task)), Text(task.priority),
                 literal_line(task.title), literal_line(task.assigned_to or "—"),
                 literal_line(", ".join(titles.get(b, b) for b in task.waits_for)[:40] or "—"),
                 Text(str(task.note_count)), literal_line(task.id)] for task in ordered]
        # widths set here, not left to the table: it measures new rows only when its own
        # message queue goes idle, which under load came after the screen was drawn, and a
        # later redraw with the same rows did not measure them again (ids cut at 8 cells)
        table.clear(columns=True)
        for column, label in enumerate(COLUMNS):
            table.add_column(label, key=label or "symbol", width=max(
                [len(label), *(row[column].cell_len for row in rows)]))
        for task, row in zip(ordered, rows, strict=True):
            table.add_row(*row, key=task.id)
        if current is not None and any(t.id == current.id for t in ordered):
            table.move_cursor(row=table.get_row_index(current.id))
        self.query_one("#board-title", Static).update(literal(
            f"Task board · {len(ordered)} tasks · "
            + " · ".join(f"{sum(board_status(t) == s for t in ordered)} {s}"
                         for s in STATUS_ORDER if any(board_status(t) == s for t in ordered))))
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
        def read(tx: Tx) -> tuple[Task, dict[str, Task]]:
            task = tx.edges.attach([tx.tasks.get(task_id, with_notes=True)])[0]
            related = tx.tasks.by_ids([*task.blocked_by, *task.blocks])
            return task, {other.id: other for other in related}

        task, related = await self.lace.reader.read(read)
        notes = "\n".join(f"{n}. {note.author}: {note.content}"
                          for n, note in enumerate(task.notes, start=1)) or "(no notes)"
        for detail in self.query("#task-detail").results(Static):  # none: closed meanwhile
            detail.update(literal(
                f"{task.id} · {board_status(task)} · {task.priority} · created by "
                f"{task.created_by} · assigned to {task.assigned_to or 'nobody'}"
                f"{_dependencies(task, related)}\n\n{task.prompt}\n\nNotes:\n{notes}"))

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
