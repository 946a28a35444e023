"""Board rules as verbs: who may change a task, which moves are allowed, and who is told."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import sqlalchemy as sa

from lace.core import notifications
from lace.core.assignee import HUMAN, Assignment, ThreadAssignee, assignee_text
from lace.core.effects import Spawned
from lace.core.errors import InvalidTransitionError, NotFoundError, PermissionDeniedError
from lace.core.ids import is_thread_id
from lace.core.records import AgentPlan, Task
from lace.core.tasks import ACTIVE_STATUSES, check_transition
from lace.store import schema
from lace.store.rows import RowVerbs

TaskFilter = Literal["mine", "created", "thread", "all"]
UPDATABLE_FIELDS = ("status", "assigned_to", "priority", "title", "description", "prompt")


def is_progress(actor: str, task: Task) -> bool:
    """Whether a change to `task` by `actor` is progress, which waits for the creator's next
    turn: made by the agent assigned to it. A person's note or move (on a task assigned to
    `human`) is input, and wakes the creator at once."""
    return actor == task.assigned_to and is_thread_id(actor)


class TaskRules(RowVerbs):
    """Row verbs plus the task board's rules."""

    def _check_assignee(self, session_id: str, assignee: Assignment, actor: str) -> None:
        """An existing agent assignee must be an agent of this session, and one a person
        stopped takes work only from a person."""
        if not isinstance(assignee, ThreadAssignee):
            return
        agent = self.find_agent(assignee.thread_id)
        thread = self.get_thread(assignee.thread_id) if agent else None
        if agent is None or thread is None or thread.root_id != session_id:
            raise NotFoundError(
                f"Unknown agent thread {assignee.thread_id!r} in this session. Assign to "
                "new:provider/model to spawn an agent, or to an existing agent's thread id.")
        if agent.status == "stopped" and agent.stopped_by_person and actor != HUMAN:
            raise PermissionDeniedError(
                f"{agent.thread_id} was stopped by a person ({agent.stop_reason}); only a "
                "person can resume it. Assign the task to another agent or to new:...")

    def _notify(self, recipient: str | None, *, sender: str, kind: str, text: str,
                task_id: str, wakes: bool = True) -> None:
        """Put a notice in an agent's inbox; people and the sender themselves get none."""
        if not recipient or recipient in (sender, HUMAN) or not is_thread_id(recipient):
            return
        if self.find_agent(recipient) is not None:
            self.post_inbox(recipient, sender=sender, kind=kind, text=text, task_id=task_id,
                            wakes=wakes)

    @staticmethod
    def _check_may_change(task: Task, actor: str) -> None:
        if actor not in (task.created_by, task.assigned_to):
            raise PermissionDeniedError(
                f"Only the creator ({task.created_by}) or the assignee "
                f"({task.assigned_to or 'nobody'}) of task {task.id} may change it; "
                f"you are {actor}.")

    def spawn_for_task(self, task: Task, *, actor: str, plan: AgentPlan) -> Task:
        """Apply `plan` to `task` (its row as just read): create agent `<parent>.N` working
        on it, assign the task to it in progress, and put the assignment in the new agent's
        inbox; returns the task as it is now."""
        child = self.create_child_thread(plan.parent_id, title=task.title, root_id=task.thread_id)
        self.create_agent(thread_id=child.id, name=plan.name, provider=plan.provider,
                          model=plan.model, profile=plan.profile, type=plan.type,
                          parent_thread_id=plan.parent_id, created_for_task=task.id,
                          current_task=task.id, instructions=plan.instructions,
                          tools=list(plan.tools) if plan.tools is not None else None,
                          budget=plan.budget)
        for topic in plan.topics:
            self.insert_subscription(child.id, topic)
        if task.status != "in_progress":
            check_transition(task.id, task.status, "in_progress")
        updated_at = self.set_task_fields(task.id, assigned_to=child.id, status="in_progress")
        self._spawned.append(Spawned(child.id, plan.parent_id, plan.model_name, task.id))
        after = replace(task, assigned_to=child.id, status="in_progress", updated_at=updated_at)
        self._tell_about_update(task, after, actor)
        return after

    def create_task(
        self, *, session_id: str, actor: str, title: str, prompt: str,
        description: str | None = None, priority: str = "medium",
        assignee: Assignment | None = None, status: str = "pending",
    ) -> Task:
        """Create a task; an agent assignee gets the assignment notification, and a planned
        new agent is spawned for it."""
        self.get_session(session_id)
        if assignee is not None:
            self._check_assignee(session_id, assignee, actor)
        existing = None if assignee is None or isinstance(assignee, AgentPlan) \
            else assignee_text(assignee)
        task = self.insert_task(session_id=session_id, created_by=actor, title=title,
                                prompt=prompt, description=description, priority=priority,
                                assigned_to=existing, status=status)
        if isinstance(assignee, AgentPlan):
            return self.spawn_for_task(task, actor=actor, plan=assignee)
        self._assign_to_agent(task, actor)
        return task

    def _assign_to_agent(self, task: Task, actor: str) -> None:
        """Tell an agent assignee about its task and make it the agent's current task (a
        stopped agent is resumed by it)."""
        agent = self.find_agent(task.assigned_to) if task.assigned_to else None
        if agent is not None and (agent.current_task != task.id or agent.status == "stopped"):
            resumed = {"status": "idle", "stop_reason": None} if agent.status == "stopped" else {}
            self.update_agent(agent.thread_id, current_task=task.id, **resumed)
        self._notify(task.assigned_to, sender=actor, kind="assignment",
                     text=notifications.assignment(task), task_id=task.id)

    def update_task(self, task_id: str, *, session_id: str, actor: str,
                    changes: dict[str, Any], assignee: Assignment | None = None,
                    reason: str | None = None) -> Task:
        """Apply field changes (and a new assignee) under the transition table; the other
        party is told."""
        changes = {key: value for key, value in changes.items() if value is not None}
        if not changes and assignee is None:
            raise InvalidTransitionError(
                f"Nothing to update: give at least one of {', '.join(UPDATABLE_FIELDS)}.")
        before = self.get_task(task_id, session_id=session_id)
        self._check_may_change(before, actor)
        if "status" in changes:
            check_transition(task_id, before.status, changes["status"])
        if assignee is not None:
            self._check_assignee(session_id, assignee, actor)
            if not isinstance(assignee, AgentPlan):
                changes["assigned_to"] = assignee_text(assignee)
        after = before
        if changes:
            self.set_task_fields(task_id, **changes)
            after = self.get_task(task_id)
            self._tell_about_update(before, after, actor, reason)
        if isinstance(assignee, AgentPlan):
            after = self.spawn_for_task(after, actor=actor, plan=assignee)
        return after

    def _tell_about_update(self, before: Task, after: Task, actor: str,
                           reason: str | None = None) -> None:
        reassigned = after.assigned_to != before.assigned_to
        if reassigned:
            self._notify(before.assigned_to, sender=actor, kind="unassigned",
                         text=notifications.unassigned(after, actor), task_id=after.id)
            self._assign_to_agent(after, actor)
        elif after.prompt != before.prompt:
            self._notify(after.assigned_to, sender=actor, kind="assignment",
                         text=notifications.prompt_changed(after, actor), task_id=after.id)
        if after.status == before.status:
            return
        text = notifications.status_changed(after, actor, reason)
        if after.status == "completed":
            self._notify(after.created_by, sender=actor, kind="completion", task_id=after.id,
                         text=notifications.completion(after, actor, "(no message)"))
        elif is_progress(actor, after) and after.status in ACTIVE_STATUSES:
            self._notify(after.created_by, sender=actor, kind="status", task_id=after.id,
                         text=notifications.progress_status(after, actor), wakes=False)
        else:
            self._notify(after.created_by, sender=actor, kind="status", text=text,
                         task_id=after.id)
        if not reassigned and after.assigned_to != after.created_by:
            self._notify(after.assigned_to, sender=actor, kind="status", text=text,
                         task_id=after.id)

    def add_note(self, task_id: str, *, session_id: str, actor: str, content: str) -> Task:
        """Add a note; the creator and the assignee hear of it unless they wrote it (the
        assignee's own notes are progress, read with the creator's next turn)."""
        task = self.get_task(task_id, session_id=session_id)
        self._check_may_change(task, actor)
        self.insert_note(task_id, actor, content)
        if is_progress(actor, task):  # the creator reads it with its next turn
            self._notify(task.created_by, sender=actor, kind="note", task_id=task_id,
                         text=notifications.progress_note(task, actor, content), wakes=False)
        else:
            text = notifications.note_added(task, actor, content)
            for recipient in dict.fromkeys((task.created_by, task.assigned_to)):
                self._notify(recipient, sender=actor, kind="note", text=text, task_id=task_id)
        return replace(task, note_count=self.count_notes(task_id))

    def complete_task(self, task_id: str, *, session_id: str, actor: str, message: str) -> Task:
        """Record `message` as a note and mark the task completed; the creator gets the result."""
        task = self.get_task(task_id, session_id=session_id)
        self._check_may_change(task, actor)
        if task.status == "completed":
            raise InvalidTransitionError(f"Task {task_id} is already completed.")
        check_transition(task_id, task.status, "completed")
        self.insert_note(task_id, actor, message)
        self.set_task_fields(task_id, status="completed")
        done = self.get_task(task_id, with_notes=True)
        self._notify(task.created_by, sender=actor, kind="completion", task_id=task_id,
                     text=notifications.completion(done, actor, message))
        return done

    def list_tasks(self, session_id: str, *, actor: str, filter: TaskFilter = "thread",
                   include_completed: bool = False, limit: int | None = None,
                   ) -> tuple[list[Task], int]:
        """Tasks of a session as the actor sees them through `filter`."""
        self.get_session(session_id)
        columns = schema.tasks.c
        where: sa.ColumnElement[bool] | None = {
            "mine": columns.assigned_to == actor,
            "created": columns.created_by == actor,
            "thread": sa.or_(columns.assigned_to.is_(None), columns.assigned_to == actor,
                             columns.created_by == actor),
            "all": None,
        }[filter]
        return self.query_tasks(session_id, where=where, include_closed=include_completed,
                                limit=limit)

