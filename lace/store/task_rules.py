"""Board rules as verbs: who may change a task, which moves are allowed, what it waits for, and
who is told."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import sqlalchemy as sa

from lace.core import notifications
from lace.core.assignee import HUMAN, Assignment, ThreadAssignee, assignee_text
from lace.core.dependencies import (
    any_cycle,
    call_ref,
    check_not_waiting,
    cycle_error,
    find_cycle,
    task_label,
)
from lace.core.errors import (
    DependencyError,
    InvalidTransitionError,
    NotFoundError,
    PermissionDeniedError,
)
from lace.core.ids import is_thread_id
from lace.core.records import AgentPlan, Task
from lace.core.tasks import FINISHED_STATUSES, check_transition
from lace.store import schema
from lace.store import statements as sql
from lace.store.assignment_rules import AssignmentRules, is_progress
from lace.store.dependencies import EdgeRows
from lace.store.inbox_rows import InboxRows
from lace.store.task_rows import NoteRows, TaskRows
from lace.store.thread_rows import ThreadRows

TaskFilter = Literal["mine", "created", "thread", "all"]
UPDATABLE_FIELDS = ("status", "assigned_to", "priority", "title", "description", "prompt",
                    "add_blocked_by", "remove_blocked_by")


@dataclass(frozen=True)
class TaskDraft:
    """One task to create: `blocked_by` holds task ids of the session and `#N`, the N-th
    draft of the same call (1-based)."""

    title: str
    prompt: str
    description: str | None = None
    priority: str = "medium"
    assignee: Assignment | None = None
    blocked_by: tuple[str, ...] = ()


def joins_batch(draft: TaskDraft, blockers: dict[str | int, bool | None]) -> bool:
    """Whether a new task joins its creator's batch: it is for an agent (not a person, not
    unassigned) and waits for no task outside its `task_create` call (`#N` only)."""
    return isinstance(draft.assignee, AgentPlan | ThreadAssignee) and all(
        isinstance(ref, int) for ref in blockers)


class TaskBoard:
    """The task board's rules: who may change a task, which moves are allowed, what it waits
    for, and who is told."""

    def __init__(self, *, threads: ThreadRows, tasks: TaskRows, notes: NoteRows,
                 edges: EdgeRows, inbox: InboxRows, assignments: AssignmentRules) -> None:
        self.threads = threads
        self.tasks = tasks
        self.notes = notes
        self.edges = edges
        self.inbox = inbox
        self.assignments = assignments

    @staticmethod
    def _check_may_change(task: Task, actor: str) -> None:
        if actor not in (task.created_by, task.assigned_to):
            raise PermissionDeniedError(
                f"Only the creator ({task.created_by}) or the assignee "
                f"({task.assigned_to or 'nobody'}) of task {task.id} may change it; "
                f"you are {actor}.")

    def create_task(
        self, *, session_id: str, actor: str, title: str, prompt: str,
        description: str | None = None, priority: str = "medium",
        assignee: Assignment | None = None, blocked_by: Sequence[str] = (),
    ) -> Task:
        """Create one task (see `create_tasks`)."""
        draft = TaskDraft(title=title, prompt=prompt, description=description,
                          priority=priority, assignee=assignee, blocked_by=tuple(blocked_by))
        return self.create_tasks(session_id=session_id, actor=actor, drafts=[draft])[0]

    def create_tasks(self, *, session_id: str, actor: str, drafts: Sequence[TaskDraft],
                     batch: str | None = None) -> list[Task]:
        """Create tasks with the edges between them: a task whose blockers are all completed
        gets its assignment now (an agent assignee is told, a planned agent spawned); one that
        waits holds it until the last of them is completed. Bad blockers and cycles raise, and
        the caller's transaction writes nothing. With a `batch` (the model reply that creates
        them), the tasks assigned to agents that wait for nothing outside this call join it:
        their creator hears of them once, when the last of them settles."""
        self.threads.get_session(session_id)
        for draft in drafts:
            if draft.assignee is not None:
                self.assignments.check_assignee(session_id, draft.assignee, actor)
        refs = [self._draft_blockers(session_id, draft, number, len(drafts))
                for number, draft in enumerate(drafts, start=1)]
        waits = [any(done is not True for done in blockers.values()) for blockers in refs]
        self.tasks.reserve_ids(len(drafts))
        tasks = [self.tasks.insert(
            session_id=session_id, created_by=actor, title=draft.title, prompt=draft.prompt,
            description=draft.description, priority=draft.priority,
            assigned_to=self._assigned_text(draft.assignee, held=waiting),
            batch=batch if joins_batch(draft, blockers) else None)
            for draft, waiting, blockers in zip(drafts, waits, refs, strict=True)]
        for task, blockers in zip(tasks, refs, strict=True):
            if blockers:
                self.edges.insert(task.id, {(tasks[ref].id if isinstance(ref, int) else ref):
                                            done is True for ref, done in blockers.items()})
        self._refuse_cycles(tasks, refs)
        created = []
        with self.assignments.spawn_run():
            for task, draft, blockers, waiting in zip(tasks, drafts, refs, waits, strict=True):
                if blockers:  # its assignment carries the results of those already completed
                    task = self.edges.attach([task])[0]
                created.append(self.assignments.assign(task, draft.assignee, actor,
                                                       waits=waiting))
        if actor == HUMAN:
            self._tell_root(session_id, created)
        return created

    def _tell_root(self, session_id: str, tasks: Sequence[Task]) -> None:
        """The root hears of the tasks the person created once the person has written to it
        (`AssignmentRules.who_hears`: asked once for them all), but for those given to it,
        whose assignment notice says it all; of one the person gave themselves, with its next
        turn: it has nothing to do for it now."""
        told = [task for task in tasks if task.assigned_to != session_id]
        if not told or not self.inbox.person_wrote_to(session_id):
            return  # else the notices would go to the person, who gets none
        for task in told:
            self.inbox.notify(session_id, sender=HUMAN, kind="status",
                              text=notifications.person_added(task), task_id=task.id,
                              wakes=task.assigned_to != HUMAN)

    @staticmethod
    def _assigned_text(assignee: Assignment | None, *, held: bool) -> str | None:
        """The `assigned_to` a new task is inserted with: a planned agent shows as its `new:`
        spec while it is held, and is set when spawned."""
        if assignee is None:
            return None
        if isinstance(assignee, AgentPlan):
            return assignee.assignee if held else None
        return assignee_text(assignee)

    def _draft_blockers(self, session_id: str, draft: TaskDraft, number: int,
                        count: int) -> dict[str | int, bool | None]:
        """A draft's blockers: `#N` as the index of a draft of this call (None: not done),
        a task id as whether that task is completed; unknown ids, tasks of other sessions and
        archived tasks are refused."""
        who = f"Task #{number} (\"{draft.title}\")" if count > 1 else \
            f"The task (\"{draft.title}\")"
        blockers: dict[str | int, bool | None] = {}
        for ref in draft.blocked_by:
            index = call_ref(ref, count, who)
            if index == number - 1:
                label = f"#{number} (\"{draft.title}\")"
                raise cycle_error([label, label], {})
            if index is not None:
                blockers[index] = None
                continue
            blocker = self._blocker(session_id, ref, who)
            blockers[blocker.id] = blocker.status == "completed"
        return blockers

    def _blocker(self, session_id: str, task_id: str, who: str) -> Task:
        """An existing task another may wait for: of this session, and not archived."""
        try:
            blocker = self.tasks.get(task_id, session_id=session_id)
        except NotFoundError:
            raise NotFoundError(
                f"{who} is blocked_by {task_id!r}, which is no task of this session; list "
                "the tasks to see their ids (\"#N\" names the N-th task of the same "
                "task_create).") from None
        if blocker.status == "archived":
            raise DependencyError(
                f"{who} cannot wait for {task_label(blocker.id, blocker.title)}: it is "
                "archived and will never be completed.")
        return blocker

    def _refuse_cycles(self, tasks: list[Task], refs: list[dict[str | int, bool | None]]
                       ) -> None:
        """Refuse a task of this call that waits for itself through others of this call (a
        task that existed before cannot wait for a new one)."""
        if not any(isinstance(ref, int) for blockers in refs for ref in blockers):
            return
        graph = {task.id: [tasks[ref].id for ref in blockers if isinstance(ref, int)]
                 for task, blockers in zip(tasks, refs, strict=True)}
        labels = {task.id: f"#{number} (\"{task.title}\")"
                  for number, task in enumerate(tasks, start=1)}
        path = any_cycle(graph)
        if path is not None:
            raise cycle_error(path, labels)

    def update_task(self, task_id: str, *, session_id: str, actor: str,
                    changes: dict[str, Any], assignee: Assignment | None = None,
                    reason: str | None = None, add_blocked_by: Sequence[str] = (),
                    remove_blocked_by: Sequence[str] = ()) -> Task:
        """Change what a task waits for, then apply field changes (and a new assignee) under
        the transition table; the other party is told. A task that waits holds a new
        assignment; one that no longer waits gets its held assignment now."""
        changes = {key: value for key, value in changes.items() if value is not None}
        if not changes and assignee is None and not add_blocked_by and not remove_blocked_by:
            raise InvalidTransitionError(
                f"Nothing to update: give at least one of {', '.join(UPDATABLE_FIELDS)}.")
        before = self.tasks.get(task_id, session_id=session_id)
        self._check_may_change(before, actor)
        if "status" in changes:
            check_transition(task_id, before.status, changes["status"])
        if add_blocked_by or remove_blocked_by:
            self._change_blockers(before, actor, add_blocked_by, remove_blocked_by,
                                  status=changes.get("status", before.status))
        waiting = self.edges.open_blockers(task_id)
        if "status" in changes:
            check_not_waiting(task_id, changes["status"],
                              [f"{task_label(b.id, b.title)} [{b.status}]" for b in waiting])
        if assignee is not None:
            self.assignments.check_assignee(session_id, assignee, actor)
            if waiting:
                self.assignments.hold(before, assignee)
                changes["assigned_to"] = self._assigned_text(assignee, held=True)
            else:
                changes["held_assignment"] = None
                if not isinstance(assignee, AgentPlan):
                    changes["assigned_to"] = assignee_text(assignee)
        elif waiting and add_blocked_by and self._given_to_agent(before):
            self.assignments.hold(before, ThreadAssignee(str(before.assigned_to)))
        after = before
        if changes:
            self.tasks.set_fields(task_id, **changes)
            after = self.tasks.get(task_id)
            if assignee is not None:  # its assignment carries the results of its blockers
                after = self.edges.attach([after])[0]
            self.assignments.tell_about_update(before, after, actor, reason, held=bool(waiting))
            if after.status != before.status:
                self.assignments.settle_dependents(after, actor, reason)
        if isinstance(assignee, AgentPlan) and not waiting:
            after = self.assignments.spawn_for_task(after, actor=actor, plan=assignee)
        elif not waiting and (remove_blocked_by or "status" in changes):
            after = self.assignments.release(task_id) or after
        if add_blocked_by or remove_blocked_by:
            after = self.edges.attach([self.tasks.get(task_id)])[0]
        return after

    def _given_to_agent(self, task: Task) -> bool:
        """Whether an agent already has this task (told of it, or spawned for it), so a
        blocker added now holds it until released."""
        return bool(task.assigned_to and is_thread_id(task.assigned_to)
                    and task.status == "pending" and self.tasks.held_assignment(task.id) is None)

    def _change_blockers(self, task: Task, actor: str, add: Sequence[str],
                         remove: Sequence[str], *, status: str) -> None:
        """Add and remove edges of `task` (by its creator), refusing what cannot be: a
        finished task, an edge that is (or is not) there, a blocker that will never be
        completed, a started task made to wait, a cycle."""
        if actor != task.created_by:
            raise PermissionDeniedError(
                f"Only the creator ({task.created_by}) of task {task.id} may change what it "
                f"waits for; you are {actor}.")
        if task.status in FINISHED_STATUSES:
            raise DependencyError(
                f"Task {task.id} is {task.status}: a finished task waits for nothing. Create "
                "a follow-up task with blocked_by instead.")
        both = sorted(set(add) & set(remove))
        if both:
            raise DependencyError(f"{', '.join(both)} is both in add_blocked_by and in "
                                  "remove_blocked_by; give each task once.")
        current = set(self.edges.attach([task])[0].blocked_by)
        missing = [blocker for blocker in dict.fromkeys(remove) if blocker not in current]
        if missing:
            listed = ", ".join(sorted(current)) or "nothing"
            raise DependencyError(f"Task {task.id} does not wait for {', '.join(missing)} "
                                  f"(it depends on: {listed}); nothing to remove.")
        if remove:
            self.edges.delete(task.id, remove)
        self._add_blockers(task, list(dict.fromkeys(add)), current, status=status)

    def _add_blockers(self, task: Task, add: list[str], current: set[str], *,
                      status: str) -> None:
        """Add edges; a task in progress (`status`, as the update leaves it) is not made to
        wait."""
        who = f"Task {task_label(task.id, task.title)}"
        blockers = {}
        for task_id in add:
            if task_id.startswith("#"):
                raise DependencyError(f"{task_id!r}: \"#N\" names a task of the same "
                                      "task_create call; task_update takes task ids.")
            if task_id in current:
                raise DependencyError(f"{who} already waits for {task_id}.")
            if task_id == task.id:
                raise cycle_error([task.id, task.id], {task.id: task_label(task.id, task.title)})
            blocker = self._blocker(task.thread_id, task_id, who)
            if status == "in_progress" and blocker.status != "completed":
                raise DependencyError(
                    f"{who} is in progress: it cannot start waiting for {task_id} now. Set "
                    "it back to pending first, or create a follow-up task with blocked_by.")
            blockers[blocker.id] = blocker.status == "completed"
        if not blockers:
            return
        self.edges.insert(task.id, blockers)
        path = find_cycle(self.edges.of_session(task.thread_id), task.id)
        if path is not None:
            titles = {found.id: task_label(found.id, found.title)
                      for found in self.tasks.by_ids(list(set(path)))}
            raise cycle_error(path, titles)

    def add_note(self, task_id: str, *, session_id: str, actor: str, content: str) -> Task:
        """Add a note; the creator and the assignee hear of it unless they wrote it (the
        assignee's own notes are progress, read with the creator's next turn)."""
        task, row = self.tasks.get_with(sql.TASK_COUNTING_NOTES, task_id, session_id=session_id)
        self._check_may_change(task, actor)
        self.notes.insert(task_id, actor, content)
        if is_progress(actor, task):  # the creator reads it with its next turn
            self.inbox.notify(task.created_by, sender=actor, kind="note", task_id=task_id,
                              text=notifications.progress_note(task, actor, content), wakes=False)
        else:
            text = notifications.note_added(task, actor, content)
            for recipient in dict.fromkeys((task.created_by, task.assigned_to)):
                self.inbox.notify(recipient, sender=actor, kind="note", text=text, task_id=task_id)
        return replace(task, note_count=row["note_rows"] + 1)

    def complete_task(self, task_id: str, *, session_id: str, actor: str, message: str) -> Task:
        """Record `message` as a note and mark the task completed; the creator gets the result
        and the tasks that waited for it alone start. Returns the task with its note count
        (its notes are not read)."""
        task, row = self.tasks.get_with(sql.TASK_TO_COMPLETE, task_id, session_id=session_id)
        self._check_may_change(task, actor)
        if task.status == "completed":
            raise InvalidTransitionError(f"Task {task_id} is already completed.")
        check_transition(task_id, task.status, "completed")
        blockers = self.edges.open_blockers(task_id) if row["waits"] else []
        check_not_waiting(task_id, "completed", [
            f"{task_label(b.id, b.title)} [{b.status}]" for b in blockers])
        self.notes.insert(task_id, actor, message)
        self.tasks.set_fields(task_id, status="completed")
        done = replace(self.tasks.get(task_id), note_count=row["note_rows"] + 1)
        self.assignments.tell_creator(done, sender=actor, kind="completion",
                                      text=notifications.completion(done, actor, message),
                                      batch_runs=row["batch_runs"])
        if row["awaited"]:  # else no task waits for it: nothing to settle
            self.assignments.settle_dependents(done, actor)
        return done

    def list_tasks(self, session_id: str, *, actor: str, filter: TaskFilter = "thread",
                   include_completed: bool = False, limit: int | None = None,
                   ) -> tuple[list[Task], int]:
        """Tasks of a session as the actor sees them through `filter`, with their edges."""
        self.threads.get_session(session_id)
        columns = schema.tasks.c
        where: sa.ColumnElement[bool] | None = {
            "mine": columns.assigned_to == actor,
            "created": columns.created_by == actor,
            "thread": sa.or_(columns.assigned_to.is_(None), columns.assigned_to == actor,
                             columns.created_by == actor),
            "all": None,
        }[filter]
        tasks, total = self.tasks.query(session_id, where=where,
                                        include_closed=include_completed, limit=limit)
        return self.edges.attach(tasks, session_id), total
