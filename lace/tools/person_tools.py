"""The tools only the person calls (through `lace mcp serve`): wait for tasks, list the threads
of the session, read one; with the six task tools and `agent_stop` they make the served board."""

from __future__ import annotations

import json
from typing import ClassVar

from pydantic import Field

from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.lines import agent_line, event_text, in_tree_order
from lace.core.records import Approval, Event, Task, Thread
from lace.core.tasks import ACTIVE_STATUSES, STALLED_STATUSES
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError
from lace.tools.delegation import last_note
from lace.tools.lifetime import AgentStop
from lace.tools.task_tools import TASK_TOOLS, TaskId

WAIT_DEFAULT_S = 60.0
WAIT_MAX_S = 600.0
EVENT_CHARS = 4000
"""The most of one event thread_read shows (`lace show` prints it whole)."""
ARGUMENT_CHARS = 300


def cut(text: str, limit: int, whole: str) -> str:
    """`text`, or its first `limit` characters and where to read the rest."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters: {whole})"


def session_thread(tx: Tx, context: ToolContext, thread_id: str) -> Thread:
    """A thread of the caller's session, or an error naming the tool that lists them."""
    if root_of(thread_id) != context.session_id:
        raise ToolError(f"Unknown thread {thread_id!r} in this session ({context.session_id}); "
                        "threads_list shows its threads.")
    return tx.threads.get(thread_id)


def waiting_approvals(tx: Tx, task: Task) -> list[Approval]:
    """The pending approvals of the agent working on `task` and of its helpers."""
    worker = task.assigned_to
    if task.status not in ACTIVE_STATUSES or not worker or root_of(worker) != task.thread_id:
        return []
    return [approval for approval in tx.approvals.pending(task.thread_id)
            if approval.thread_id == worker or approval.thread_id.startswith(f"{worker}.")]


def wait_block(tx: Tx, task: Task) -> str:
    """A task as task_wait reports it: its result once completed, why not when blocked, and
    any approval its agent waits on."""
    head = f"[{task.id}: {task.status}] {task.title}"
    if task.status == "completed":
        return f"{head}\nResult: {last_note(tx, task)}"
    if task.status in STALLED_STATUSES:
        return f"{head}\nLast note: {last_note(tx, task)}"
    lines = [f"{head} (assigned to {task.assigned_to or 'nobody'})"]
    for approval in waiting_approvals(tx, task):
        arguments = cut(json.dumps(approval.arguments, ensure_ascii=False), ARGUMENT_CHARS,
                        "lace approvals --full")
        lines.append(f"{approval.thread_id} waits for the person's approval #{approval.id} to "
                     f"run {approval.tool} {arguments}: answer with lace approve {approval.id} "
                     f"or lace deny {approval.id}, or in the app.")
    if len(lines) == 1:
        lines.append("Still open: call task_wait again to keep waiting.")
    return "\n".join(lines)


class TaskWait(Tool):
    """Wait until every given task is completed or blocked, or until an agent working on one
    waits for the person's approval, or until timeout_s passes. Returns each task's status, its
    result once completed, and any approval (with its number) an agent waits for."""

    name: ClassVar[str] = "task_wait"
    task_ids: list[TaskId] = Field(min_length=1, max_length=50)
    timeout_s: float = Field(default=WAIT_DEFAULT_S, gt=0, le=WAIT_MAX_S,
                             description="Seconds to wait at most (default 60, at most 600).")

    def tasks(self, tx: Tx, context: ToolContext) -> list[Task]:
        """The tasks waited on (NotFoundError for one not of this session)."""
        return [tx.tasks.get(task_id, session_id=context.session_id)
                for task_id in dict.fromkeys(self.task_ids)]

    def over(self, tx: Tx, context: ToolContext) -> bool:
        """Whether the wait can end: no task is still open without an approval waiting."""
        return all(task.status not in ACTIVE_STATUSES or waiting_approvals(tx, task)
                   for task in self.tasks(tx, context))

    async def prepared(self, context: ToolContext) -> TaskWait:
        """Wait (with a runtime) until the wait can end or timeout_s passes; an unknown task
        id ends it at once, so the call's own error comes back."""
        if context.wait_until is not None:
            await context.wait_until(lambda tx: self._over_or_refused(tx, context),
                                     self.timeout_s, context.progress)
        return self

    def _over_or_refused(self, tx: Tx, context: ToolContext) -> bool:
        try:
            return self.over(tx, context)
        except LaceError:
            return True

    def run(self, tx: Tx, context: ToolContext) -> str:
        return "\n\n".join(wait_block(tx, task) for task in self.tasks(tx, context))


class ThreadsList(Tool):
    """List the threads of the session as a tree: each agent's model, status, current task
    and usage (tokens and cost, its own and its subtree's)."""

    name: ClassVar[str] = "threads_list"

    def run(self, tx: Tx, context: ToolContext) -> str:
        threads = tx.threads.of_session(context.session_id)
        agents = {agent.thread_id: agent for agent in tx.agents.of_session(context.session_id)}
        tasks = tx.tasks.by_ids([a.current_task for a in agents.values() if a.current_task])
        titles = {task.id: task.title for task in tasks}
        return "\n".join(agent_line(thread, agents.get(thread.id), titles,
                                    tx.usage.subtree(thread.id))
                         for thread in in_tree_order(threads))


class ThreadRead(Tool):
    """Read a thread's conversation: its last events (messages, tool calls and results,
    errors), oldest first. Each event is cut at 4000 characters."""

    name: ClassVar[str] = "thread_read"
    thread_id: str = Field(min_length=1, description="A thread id of this session.")
    last: int = Field(default=20, ge=1, le=200, description="How many events, newest last.")

    def run(self, tx: Tx, context: ToolContext) -> str:
        thread = session_thread(tx, context, self.thread_id)
        agent = tx.agents.find(thread.id)
        events, earlier = tx.events.latest(thread.id, self.last)
        who = f"  {agent.name}  {agent.model_name}  [{agent.status}]" if agent else ""
        lines = [f"Thread {thread.id}{who}"]
        if earlier:
            lines.append(f"({earlier} earlier events: raise last, or lace show {thread.id})")
        lines += [event_line(event, thread.id) for event in events] or ["(no events yet)"]
        return "\n".join(lines)


def event_line(event: Event, thread_id: str) -> str:
    """`[HH:MM:SS] type: text` for thread_read, cut at EVENT_CHARS."""
    text = cut(event_text(event.type, event.data), EVENT_CHARS, f"lace show {thread_id}")
    return f"[{event.created_at[11:19]}] {event.type}: {text}"


PERSON_TOOLS: tuple[type[Tool], ...] = (TaskWait, ThreadsList, ThreadRead, AgentStop)
SERVED_TOOLS: tuple[type[Tool], ...] = TASK_TOOLS + PERSON_TOOLS
"""What `lace mcp serve` offers, in this order."""
