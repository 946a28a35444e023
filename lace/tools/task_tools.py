"""The six task tools: create, list, view, update, add a note, complete."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from lace.core.records import Task
from lace.core.tasks import STATUS_SYMBOL, Priority, Status
from lace.store import Tx
from lace.store.task_rules import TaskFilter
from lace.tools.base import Tool, ToolContext, ToolError
from lace.tools.spawning import assignment, parse_assignment

LIST_LIMIT = 50
TaskId = Annotated[str, Field(min_length=1, description="A task id such as task_20261122_a1b2c3.")]
Assignee = Annotated[
    str,
    Field(
        min_length=1,
        description=(
            "Who does the task: new:provider/model spawns a new agent (e.g. new:openai/gpt-4o), "
            "new:<profile> or new:<profile>:<provider>/<model> uses a profile, an existing "
            "thread id assigns an agent of this session, 'human' assigns the person."
        ),
    ),
]


def task_line(task: Task) -> str:
    """One line of a task list: symbol, id, priority, title, assignee, status."""
    assignee = task.assigned_to or "unassigned"
    return (f"{STATUS_SYMBOL[task.status]} {task.id} [{task.priority}] {task.title} "
            f"→ {assignee} [{task.status}]")


def task_details(task: Task) -> str:
    """A task in full: header, prompt, people and numbered notes."""
    lines = [
        f"{STATUS_SYMBOL[task.status]} {task.id}: {task.title}",
        f"Status: {task.status}  Priority: {task.priority}",
        f"Assigned to: {task.assigned_to or 'unassigned'}",
        f"Created by: {task.created_by} at {task.created_at}",
    ]
    if task.description:
        lines.append(f"Description: {task.description}")
    lines += ["", "Prompt:", task.prompt, "", f"Notes ({len(task.notes)}):"]
    lines += [f"{number}. [{note.created_at}] {note.author}: {note.content}"
              for number, note in enumerate(task.notes, start=1)] or ["(none)"]
    return "\n".join(lines)


class NewTask(BaseModel):
    """One task to create."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=200, description="A short title.")
    description: str | None = Field(default=None, max_length=1000,
                                    description="Optional context for people reading the board.")
    prompt: str = Field(min_length=1, description="The full instructions for whoever does it.")
    priority: Priority = "medium"
    assigned_to: Assignee | None = None


class TaskCreate(Tool):
    """Create 1 to 20 tasks on the board (all or nothing). Assign one to new:provider/model to
    spawn a new agent that works on it and reports back to you when it completes it."""

    name: ClassVar[str] = "task_create"
    tasks: list[NewTask] = Field(min_length=1, max_length=20)

    def run(self, tx: Tx, context: ToolContext) -> str:
        assignees = [parse_assignment(item.assigned_to, context) for item in self.tasks]
        lines = []
        for item, assignee in zip(self.tasks, assignees, strict=True):
            task = tx.create_task(
                session_id=context.session_id, actor=context.thread_id, title=item.title,
                prompt=item.prompt, description=item.description, priority=item.priority,
                assignee=assignment(tx, context, assignee))
            suffix = f" (assigned to {task.assigned_to})" if task.assigned_to else ""
            lines.append(f"Created task {task.id}: {task.title}{suffix}")
        return "\n".join(lines)


class TaskList(Tool):
    """List tasks of this session, highest priority first, then newest. filter: mine (assigned
    to you), created (by you), thread (unassigned, mine or created by you), all (the session)."""

    name: ClassVar[str] = "task_list"
    filter: TaskFilter = "thread"
    include_completed: bool = Field(default=False,
                                    description="Also list completed and archived tasks.")

    def run(self, tx: Tx, context: ToolContext) -> str:
        tasks, total = tx.list_tasks(context.session_id, actor=context.thread_id,
                                     filter=self.filter, include_completed=self.include_completed,
                                     limit=LIST_LIMIT)
        if not tasks:
            return f"No tasks (filter: {self.filter})."
        lines = [task_line(task) for task in tasks]
        if total > len(tasks):
            lines.append(f"… {total - len(tasks)} more")
        return "\n".join(lines)


class TaskView(Tool):
    """Show one task in full: its prompt, assignee, creator and numbered notes."""

    name: ClassVar[str] = "task_view"
    task_id: TaskId

    def run(self, tx: Tx, context: ToolContext) -> str:
        return task_details(tx.get_task(self.task_id, session_id=context.session_id,
                                        with_notes=True))


class TaskUpdate(Tool):
    """Change a task you created or are assigned: status, assignee, priority, title, description
    or prompt (at least one). A completed task is not reopened: create a follow-up task."""

    name: ClassVar[str] = "task_update"
    task_id: TaskId
    status: Status | None = None
    assigned_to: Assignee | None = None
    priority: Priority | None = None
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=1000)
    prompt: str | None = Field(default=None, min_length=1)

    def run(self, tx: Tx, context: ToolContext) -> str:
        changes = self.model_dump(exclude={"task_id"}, exclude_none=True)
        if not changes:
            raise ToolError("task_update needs at least one of status, assigned_to, priority, "
                            "title, description, prompt.")
        assignee = parse_assignment(self.assigned_to, context)
        before = tx.get_task(self.task_id, session_id=context.session_id)
        after = tx.update_task(self.task_id, session_id=context.session_id,
                               actor=context.thread_id,
                               changes={**changes, "assigned_to": None},
                               assignee=assignment(tx, context, assignee))
        moves = [f"{key}: {getattr(before, key)} → {getattr(after, key)}"
                 if key in ("status", "assigned_to", "priority") else f"{key} changed"
                 for key in changes]
        return f"Updated task {after.id}: " + "; ".join(moves)


class TaskAddNote(Tool):
    """Add a progress note to a task you created or are assigned."""

    name: ClassVar[str] = "task_add_note"
    task_id: TaskId
    note: str = Field(min_length=1, max_length=20_000)

    def run(self, tx: Tx, context: ToolContext) -> str:
        task = tx.add_note(self.task_id, session_id=context.session_id,
                           actor=context.thread_id, content=self.note)
        return f"Added note {task.note_count} to task {task.id}."


class TaskComplete(Tool):
    """Complete a task with a message giving the result; the creator receives that message."""

    name: ClassVar[str] = "task_complete"
    task_id: TaskId
    message: str = Field(min_length=1, max_length=50_000,
                         description="The result: what was done, found or decided.")

    def run(self, tx: Tx, context: ToolContext) -> str:
        task = tx.complete_task(self.task_id, session_id=context.session_id,
                                actor=context.thread_id, message=self.message)
        return f"Completed task {task.id}: {task.title}"


TASK_TOOLS: tuple[type[Tool], ...] = (
    TaskCreate, TaskList, TaskView, TaskUpdate, TaskAddNote, TaskComplete)
