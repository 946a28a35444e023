"""The six task tools: create, list, view, update, add a note, complete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from lace.core.lines import related_list, task_line
from lace.core.records import Task
from lace.core.tasks import ACTIVE_STATUSES, Priority, Status, task_symbol
from lace.store import Tx
from lace.store.task_rules import TaskDraft, TaskFilter
from lace.tools.base import Answer, Tool, ToolContext, ToolError
from lace.tools.spawning import assignment, assignments_checked, parse_assignment

LIST_LIMIT = 50
TaskId = Annotated[str, Field(min_length=1, description="A task id such as task_20261122_a1b2c3.")]
BlockerRef = Annotated[str, Field(min_length=1, max_length=100)]
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


def task_details(task: Task, related: Mapping[str, Task] | None = None) -> str:
    """A task in full: header, prompt, people, what it waits for and blocks (`related`: those
    tasks by id), and numbered notes."""
    related = related or {}
    lines = [
        f"{task_symbol(task)} {task.id}: {task.title}",
        f"Status: {task.status}{' (waiting)' if task.waits_for else ''}  "
        f"Priority: {task.priority}",
        f"Assigned to: {task.assigned_to or 'unassigned'}",
        f"Created by: {task.created_by} at {task.created_at}",
    ]
    if task.waits_for:
        lines.append(f"Waits for: {related_list(task.waits_for, related)}; it starts when "
                     "they are completed.")
    if task.waited_for:
        lines.append(f"Waited for: {related_list(task.waited_for, related)}")
    if task.blocks:
        lines.append(f"Blocks: {related_list(task.blocks, related)}")
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
    blocked_by: list[BlockerRef] | None = Field(
        default=None, max_length=20,
        description=("Tasks that must be completed first: task ids of this session, or \"#N\" "
                     "for the N-th task of this call (1-based). Until then this task waits "
                     "(pending) and its assignee is not told; then it starts with their "
                     "results."))


class TaskCreate(Tool):
    """Create 1 to 20 tasks on the board (all or nothing). Assign one to new:provider/model to
    spawn a new agent that works on it and reports back to you when it completes it. A task
    with blocked_by waits for those tasks: a whole plan is one call. The tasks you give to
    agents in one reply report back together, once the last of them is done."""

    name: ClassVar[str] = "task_create"
    tasks: list[NewTask] = Field(min_length=1, max_length=20)
    notify_each: bool = Field(default=False, description=(
        "true: hear of each task of this call as soon as it is done, instead of once with "
        "the other tasks of your reply."))

    async def prepared(self, context: ToolContext) -> TaskCreate:
        await assignments_checked([item.assigned_to for item in self.tasks], context)
        return self

    def run(self, tx: Tx, context: ToolContext) -> Answer:
        assignees = [parse_assignment(item.assigned_to, context) for item in self.tasks]
        drafts = [TaskDraft(title=item.title, prompt=item.prompt, description=item.description,
                            priority=item.priority, assignee=assignment(tx, context, assignee),
                            blocked_by=tuple(item.blocked_by or ()))
                  for item, assignee in zip(self.tasks, assignees, strict=True)]
        lines = []
        created = tx.board.create_tasks(session_id=context.session_id, actor=context.thread_id,
                                        drafts=drafts,
                                        batch=None if self.notify_each else context.batch)
        for task in created:
            suffix = f" (assigned to {task.assigned_to})" if task.assigned_to else ""
            lines.append(f"Created task {task.id}: {task.title}{suffix}")
            if task.waits_for:
                lines.append(f"  {task.id} waits for {', '.join(task.waits_for)}: it starts "
                             "when they are completed.")
        return Answer("\n".join(lines), {"task_ids": [task.id for task in created]})


class TaskList(Tool):
    """List tasks of this session, highest priority first, then newest. filter: mine (assigned
    to you), created (by you), thread (unassigned, mine or created by you), all (the session)."""

    name: ClassVar[str] = "task_list"
    filter: TaskFilter = "thread"
    include_completed: bool = Field(default=False,
                                    description="Also list completed and archived tasks.")

    def run(self, tx: Tx, context: ToolContext) -> str:
        tasks, total = tx.board.list_tasks(
            context.session_id, actor=context.thread_id, filter=self.filter,
            include_completed=self.include_completed, limit=LIST_LIMIT)
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
        task = tx.edges.attach([tx.tasks.get(self.task_id, session_id=context.session_id,
                                             with_notes=True)])[0]
        related = tx.tasks.by_ids([*task.blocked_by, *task.blocks])
        return task_details(task, {other.id: other for other in related})


class TaskUpdate(Tool):
    """Change a task you created or are assigned: status, assignee, priority, title,
    description, prompt, or (its creator) what it waits for (at least one). A completed task is
    not reopened: create a follow-up task."""

    name: ClassVar[str] = "task_update"
    task_id: TaskId
    status: Status | None = None
    assigned_to: Assignee | None = None
    priority: Priority | None = None
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=1000)
    prompt: str | None = Field(default=None, min_length=1)
    add_blocked_by: list[TaskId] | None = Field(
        default=None, max_length=20,
        description="Tasks this one must also wait for (it waits until they are completed).")
    remove_blocked_by: list[TaskId] | None = Field(
        default=None, max_length=20,
        description="Tasks it no longer waits for; without any left it starts at once.")

    async def prepared(self, context: ToolContext) -> TaskUpdate:
        await assignments_checked([self.assigned_to], context)
        return self

    def run(self, tx: Tx, context: ToolContext) -> str:
        changes = self.model_dump(exclude={"task_id", "add_blocked_by", "remove_blocked_by"},
                                  exclude_none=True)
        if not changes and not self.add_blocked_by and not self.remove_blocked_by:
            raise ToolError("task_update needs at least one of status, assigned_to, priority, "
                            "title, description, prompt, add_blocked_by, remove_blocked_by.")
        assignee = parse_assignment(self.assigned_to, context)
        before = tx.edges.attach([tx.tasks.get(self.task_id, session_id=context.session_id)])[0]
        after = tx.board.update_task(self.task_id, session_id=context.session_id,
                                     actor=context.thread_id,
                                     changes={**changes, "assigned_to": None},
                                     assignee=assignment(tx, context, assignee),
                                     add_blocked_by=self.add_blocked_by or (),
                                     remove_blocked_by=self.remove_blocked_by or ())
        moves = [f"{key}: {getattr(before, key)} → {getattr(after, key)}"
                 if key in ("status", "assigned_to", "priority") else f"{key} changed"
                 for key in changes]
        if self.add_blocked_by or self.remove_blocked_by:
            moves.append(f"waits for: {', '.join(after.waits_for) or 'nothing'}")
        if before.waits_for and not after.waits_for and after.status in ACTIVE_STATUSES:
            moves.append(f"it can start now (assigned to {after.assigned_to or 'nobody'}, "
                         f"{after.status})")
        return f"Updated task {after.id}: " + "; ".join(moves)


class TaskAddNote(Tool):
    """Add a progress note to a task you created or are assigned."""

    name: ClassVar[str] = "task_add_note"
    task_id: TaskId
    note: str = Field(min_length=1, max_length=20_000)

    def run(self, tx: Tx, context: ToolContext) -> str:
        task = tx.board.add_note(self.task_id, session_id=context.session_id,
                                 actor=context.thread_id, content=self.note)
        return f"Added note {task.note_count} to task {task.id}."


class TaskComplete(Tool):
    """Complete a task with a message giving the result; the creator receives that message."""

    name: ClassVar[str] = "task_complete"
    task_id: TaskId
    message: str = Field(min_length=1, max_length=50_000,
                         description="The result: what was done, found or decided.")

    async def prepared(self, context: ToolContext) -> TaskComplete:
        """With a worktree, the message also names the commit of the helper's work."""
        if context.commit_work is None:
            return self
        message = await context.commit_work(context.thread_id, self.task_id, self.message)
        return self.model_copy(update={"message": message})

    def run(self, tx: Tx, context: ToolContext) -> str:
        task = tx.board.complete_task(self.task_id, session_id=context.session_id,
                                      actor=context.thread_id, message=self.message)
        return f"Completed task {task.id}: {task.title}"

    def ends_work(self, tx: Tx, context: ToolContext) -> bool:
        return finished_its_work(tx, context.thread_id)


def finished_its_work(tx: Tx, thread_id: str) -> bool:
    """Whether a `new:` helper has nothing left to do: its current task is completed and no
    other task assigned to it is open."""
    agent, open_work = tx.agents.get_with_open_work(thread_id)
    if agent.type != "persistent" or agent.created_for_task is None or not agent.current_task:
        return False
    if tx.tasks.get(agent.current_task).status != "completed":
        return False
    return not open_work


TASK_TOOLS: tuple[type[Tool], ...] = (
    TaskCreate, TaskList, TaskView, TaskUpdate, TaskAddNote, TaskComplete)
