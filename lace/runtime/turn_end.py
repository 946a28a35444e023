"""What happens to a task when its agent's turn ends or fails (inside one store transaction)."""

from __future__ import annotations

from lace.core import notifications
from lace.core.records import Agent, Task
from lace.core.tasks import ACTIVE_STATUSES
from lace.store import Tx


def open_task_of(tx: Tx, agent: Agent) -> Task | None:
    """The agent's current task if it is still its own and not yet done or blocked."""
    if not agent.current_task:
        return None
    task = tx.tasks.get(agent.current_task)
    if task.assigned_to != agent.thread_id or task.status not in ACTIVE_STATUSES:
        return None
    return task


def end_turn(tx: Tx, thread_id: str, final_text: str | None) -> None:
    """Mark the agent idle. A spawned (ephemeral) agent's final answer completes its open task;
    a `new:` (persistent) agent that left its task open is reminded once, then the task is
    blocked with its last answer as the reason and the creator is told."""
    agent, current_task = tx.agents.get_with_current_task(thread_id)
    if current_task is not None:
        tx.tasks.keep(current_task)  # open_task_of reads it no more
    tx.agents.set_status(thread_id, "idle")
    task = open_task_of(tx, agent) if agent.created_for_task is not None else None
    if task is not None and agent.type == "ephemeral":
        tx.board.complete_task(task.id, session_id=task.thread_id, actor=thread_id,
                               message=(final_text or "").strip() or "(no answer)")
    elif task is not None:
        _remind_or_block(tx, thread_id, task, final_text)


def _remind_or_block(tx: Tx, thread_id: str, task: Task, final_text: str | None) -> None:
    text = (final_text or "").strip() or "(no answer)"
    if not tx.inbox.was_told(thread_id, task.id, "reminder"):
        tx.notes.insert(task.id, thread_id, f"Turn ended without completing the task: {text}")
        tx.inbox.post(thread_id, sender=notifications.LACE_SENDER, kind="reminder",
                      task_id=task.id, text=notifications.reminder(task),
                      priority="high")
        return
    reason = f"ended its turn twice without completing the task; last answer: {text}"
    tx.notes.insert(task.id, thread_id, f"Blocked: {reason}")
    tx.board.update_task(task.id, session_id=task.thread_id, actor=thread_id,
                         changes={"status": "blocked"}, reason=reason)


def fail_turn(tx: Tx, thread_id: str, error: str) -> None:
    """Mark the agent `error`; its open task is blocked with a note and the creator is told."""
    tx.agents.set_status(thread_id, "error")
    tx.events.append(thread_id, "error", {"error": error})
    agent = tx.agents.get(thread_id)
    task = open_task_of(tx, agent)
    if task is not None:
        reason = f"the agent's model failed: {error}"
        tx.notes.insert(task.id, thread_id, f"Blocked: {reason}")
        tx.board.update_task(task.id, session_id=task.thread_id, actor=thread_id,
                             changes={"status": "blocked"}, reason=reason)
