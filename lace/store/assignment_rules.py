"""Assignments take effect: an existing agent is told, a planned agent is spawned under the
spawn limits. While a task waits for its blockers its assignment is held instead, and applied
in the transaction that completes the last of them (or removes it), so a planned agent is
spawned exactly once and never early, whoever finishes the blocker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NamedTuple

from lace.core import notifications
from lace.core.assignee import HUMAN, Assignment, ThreadAssignee
from lace.core.clock import iso_ago
from lace.core.dependencies import batch_running
from lace.core.effects import EffectLog, Spawned
from lace.core.errors import NotFoundError, PermissionDeniedError, SpawnRefusedError
from lace.core.ids import depth_of, is_thread_id
from lace.core.records import AgentPlan, NewAgent, SpawnLimits, Task
from lace.core.tasks import ACTIVE_STATUSES, STALLED_STATUSES, check_transition
from lace.store.agent_rows import AgentRows
from lace.store.dependencies import EdgeRows
from lace.store.inbox_rows import InboxRows
from lace.store.subscriptions import SubscriptionRows
from lace.store.task_rows import NoteRows, TaskRows
from lace.store.thread_rows import ThreadRows
from lace.store.worktree_rows import WorktreeRows


class SpawnCounts(NamedTuple):
    """What the spawn limits count of one parent: its live children, its spawns this minute."""

    live: int
    recent: int


def is_progress(actor: str, task: Task) -> bool:
    """Whether a change to `task` by `actor` is progress, which waits for the creator's next
    turn: made by the agent assigned to it. A person's note or move (on a task assigned to
    `human`) is input, and wakes the creator at once."""
    return actor == task.assigned_to and is_thread_id(actor)


class AssignmentRules:
    """Applying, holding and releasing assignments, and telling the people concerned."""

    def __init__(self, *, threads: ThreadRows, agents: AgentRows, inbox: InboxRows,
                 tasks: TaskRows, notes: NoteRows, edges: EdgeRows, worktrees: WorktreeRows,
                 subscriptions: SubscriptionRows, effects: EffectLog) -> None:
        self.threads = threads
        self.agents = agents
        self.inbox = inbox
        self.tasks = tasks
        self.notes = notes
        self.edges = edges
        self.worktrees = worktrees
        self.subscriptions = subscriptions
        self.effects = effects
        self._spawn_counts: dict[str, SpawnCounts] | None = None  # during `spawn_run`

    @contextmanager
    def spawn_run(self) -> Iterator[None]:
        """Spawns made inside are counted against the limits from one reading per parent (a
        `task_create` of 300 agents reads its parent's counts once, not 300 times): nothing
        but these spawns changes the counts meanwhile."""
        self._spawn_counts = {}
        try:
            yield
        finally:
            self._spawn_counts = None

    def _counts(self, parent: str) -> SpawnCounts:
        """`parent`'s live children and its spawns in the last minute, as of now (inside a
        `spawn_run`, read once and then counted)."""
        counts = None if self._spawn_counts is None else self._spawn_counts.get(parent)
        if counts is None:
            counts = SpawnCounts(live=self.agents.live_children(parent),
                                 recent=self.agents.children_since(parent, iso_ago(60)))
            if self._spawn_counts is not None:
                self._spawn_counts[parent] = counts
        return counts

    def _count_spawn(self, parent: str) -> None:
        """One more child of `parent`, live and spawned this minute, in the counts kept."""
        counts = None if self._spawn_counts is None else self._spawn_counts.get(parent)
        if self._spawn_counts is not None and counts is not None:
            self._spawn_counts[parent] = SpawnCounts(counts.live + 1, counts.recent + 1)

    def check_assignee(self, session_id: str, assignee: Assignment, actor: str) -> None:
        """An existing agent assignee must be an agent of this session, and one a person
        stopped takes work only from a person."""
        if not isinstance(assignee, ThreadAssignee):
            return
        agent = self.agents.find(assignee.thread_id)
        thread = self.threads.get(assignee.thread_id) if agent else None
        if agent is None or thread is None or thread.root_id != session_id:
            raise NotFoundError(
                f"Unknown agent thread {assignee.thread_id!r} in this session. Assign to "
                "new:provider/model to spawn an agent, or to an existing agent's thread id.")
        if agent.status == "stopped" and agent.stopped_by_person and actor != HUMAN:
            raise PermissionDeniedError(
                f"{agent.thread_id} was stopped by a person ({agent.stop_reason}); only a "
                "person can resume it. Assign the task to another agent or to new:...")

    def check_spawn_limits(self, parent: str, limits: SpawnLimits | None, *,
                           now: bool = True) -> None:
        """Refuse a spawn under `parent` past `max_depth`, or (a spawn `now`, not one held
        for later) past `max_children` or `spawns_per_minute`."""
        if limits is None:
            return
        depth = depth_of(parent) + 1
        if depth > limits.max_depth:
            raise SpawnRefusedError(
                f"Spawn refused: a new agent here would be at depth {depth}, past max_depth = "
                f"{limits.max_depth} ([limits] max_depth). Do the work yourself or hand it back "
                "to your creator.")
        if not now:
            return
        live, recent = self._counts(parent)
        if live >= limits.max_children:
            raise SpawnRefusedError(
                f"Spawn refused: {parent} has {live} live children, the limit is max_children "
                f"= {limits.max_children} ([limits] max_children). Wait for some to finish, or "
                "reuse one by assigning it a task.")
        if recent >= limits.spawns_per_minute:
            raise SpawnRefusedError(
                f"Spawn refused: {recent} spawns by {parent} in the last minute, the limit is "
                f"spawns_per_minute = {limits.spawns_per_minute} ([limits] spawns_per_minute). "
                "Wait a little, or reuse an agent.")

    def _spawn(self, task: Task, plan: AgentPlan) -> Task:
        """Check the limits, then create agent `<parent>.N` for `task` (its row as just read)
        and give it the task, in progress; returns the task as it is now."""
        self.check_spawn_limits(plan.parent_id, plan.limits)
        self._count_spawn(plan.parent_id)
        child = self.threads.create_child(plan.parent_id, title=task.title,
                                          root_id=task.thread_id, trace_parent=plan.trace_parent)
        self.agents.create(NewAgent(
            thread_id=child.id, name=plan.name, provider=plan.provider, model=plan.model,
            profile=plan.profile, type=plan.type, parent_thread_id=plan.parent_id,
            created_for_task=task.id, current_task=task.id, instructions=plan.instructions,
            tools=list(plan.tools) if plan.tools is not None else None, budget=plan.budget))
        for topic in plan.topics:
            self.subscriptions.insert(child.id, topic)
        if plan.worktree is not None:
            self.worktrees.insert(child.id, plan.worktree)
        if task.status != "in_progress":
            check_transition(task.id, task.status, "in_progress")
        updated_at = self.tasks.set_fields(task.id, assigned_to=child.id, status="in_progress")
        self.effects.spawn(Spawned(child.id, plan.parent_id, plan.model_name, task.id))
        return replace(task, assigned_to=child.id, status="in_progress", updated_at=updated_at)

    def spawn_for_task(self, task: Task, *, actor: str, plan: AgentPlan) -> Task:
        """Apply `plan` to `task` now: a new agent works on it, with the assignment in its
        inbox; returns the task as it is now."""
        after = self._spawn(task, plan)
        self.tell_about_update(task, after, actor)
        return after

    def _assign_to_agent(self, task: Task, actor: str) -> None:
        """Tell an agent assignee about its task, with the results of the tasks it waited for,
        and make it the agent's current task (a stopped agent is resumed by it, unless a
        person stopped it and no person assigns it)."""
        agent = self.agents.find(task.assigned_to) if task.assigned_to else None
        if agent is not None and (agent.current_task != task.id or agent.status == "stopped"):
            resume = agent.status == "stopped" and (not agent.stopped_by_person or actor == HUMAN)
            self.agents.update(agent.thread_id, current_task=task.id,
                               **({"status": "idle", "stop_reason": None} if resume else {}))
        results = self.edges.blocker_results(task.id) if task.blocked_by else ()
        self.inbox.notify(task.assigned_to, sender=actor, kind="assignment",
                          text=notifications.assignment(task, results), task_id=task.id)

    def tell_about_update(self, before: Task, after: Task, actor: str,
                          reason: str | None = None, *, held: bool = False) -> None:
        """Tell the other party of a change: the assignees old and new, and the creator of a
        status move. While the task waits (its assignment `held`) its assignee hears nothing:
        it is told when the task can start."""
        reassigned = after.assigned_to != before.assigned_to
        if reassigned:
            old = before.assigned_to
            if old and self.inbox.was_told(old, after.id, "assignment"):
                self.inbox.notify(old, sender=actor, kind="unassigned",
                                  text=notifications.unassigned(after, actor), task_id=after.id)
            if not held:
                self._assign_to_agent(after, actor)
        elif after.prompt != before.prompt and not held:
            self.inbox.notify(after.assigned_to, sender=actor, kind="assignment",
                              text=notifications.prompt_changed(after, actor), task_id=after.id)
        if after.status == before.status:
            return
        text = notifications.status_changed(after, actor, reason)
        if after.status == "completed":
            self.tell_creator(after, sender=actor, kind="completion",
                              text=notifications.completion(after, actor, "(no message)"))
        elif is_progress(actor, after) and after.status in ACTIVE_STATUSES:
            self.inbox.notify(after.created_by, sender=actor, kind="status", task_id=after.id,
                              text=notifications.progress_status(after, actor), wakes=False)
        elif after.status in ACTIVE_STATUSES:
            self.inbox.notify(after.created_by, sender=actor, kind="status", text=text,
                              task_id=after.id)
        else:
            self.tell_creator(after, sender=actor, kind="status", text=text)
        if not reassigned and not held and after.assigned_to != after.created_by:
            self.inbox.notify(after.assigned_to, sender=actor, kind="status", text=text,
                              task_id=after.id)

    def who_hears(self, task: Task) -> str:
        """Who hears that a task settled: its creator, or for a task the person created, the
        root of its session once the person has written to it (the agent that answers them
        there; a root started without a prompt, by `lace task add`, runs only when written
        to)."""
        if task.created_by == HUMAN and self.inbox.person_wrote_to(task.thread_id):
            return task.thread_id
        return task.created_by

    def tell_creator(self, task: Task, *, sender: str, kind: str, text: str,
                     batch_runs: bool | None = None) -> None:
        """Tell a task's creator that the task settled (completed, blocked or archived): at
        once, or for a task of a batch (`TaskBoard.create_tasks`) inside the batch's one
        notice, which wakes the creator when the last of its tasks settles; until then the
        notice is held. A task the person created and settled themselves wakes no one: the
        root hears of it with its next turn. `batch_runs`: whether a task of its batch is
        free (`batch_has_free_task`), when the caller read it with the task."""
        batch = self.tasks.batch_of(task.id)
        if batch is None:
            self.inbox.notify(self.who_hears(task), sender=sender, kind=kind, text=text,
                              task_id=task.id, wakes=not sender == task.created_by == HUMAN)
            return
        if batch_runs is None:
            batch_runs = self.tasks.batch_has_free_task(batch)
        members = None if batch_runs else self.edges.attach(
            self.tasks.in_batch(batch))  # a free task still runs: no need to read them all
        if members is None or batch_running(members):
            self.inbox.notify(task.created_by, sender=sender, kind=kind, text=text,
                              task_id=task.id, held_for=batch)
            return
        blocks = [*self.inbox.release_held(task.created_by, batch), text]
        self.inbox.notify(task.created_by, sender=sender, task_id=task.id,
                          kind="completion" if len(blocks) > 1 else kind,
                          text=notifications.batch_settled(len(members), blocks))

    # held assignments

    def assign(self, task: Task, assignee: Assignment | None, actor: str, *,
               waits: bool) -> Task:
        """Apply a new task's assignment now, or hold it while the task `waits` (a planned
        agent's depth is checked at once: it cannot change)."""
        if waits:
            self.hold(task, assignee)
            return task
        if isinstance(assignee, AgentPlan):
            return self.spawn_for_task(task, actor=actor, plan=assignee)
        self._assign_to_agent(task, actor)
        return task

    def hold(self, task: Task, assignee: Assignment | None) -> None:
        """Keep what `assignee` does until the task's last blocker is completed."""
        held: dict[str, Any] | None = None
        if isinstance(assignee, AgentPlan):
            self.check_spawn_limits(assignee.parent_id, assignee.limits, now=False)
            held = {"agent": assignee.to_json()}
        elif isinstance(assignee, ThreadAssignee):
            held = {"thread": assignee.thread_id}
        self.tasks.set_fields(task.id, held_assignment=held)

    def release(self, task_id: str) -> Task | None:
        """Apply the held assignment of a task that no longer waits and is still to be done;
        returns the task as it is then (None if nothing was held or it still waits). A spawn
        refused now does not fail the caller: the task is left pending and unassigned, and
        its creator is told."""
        held = self.tasks.held_assignment(task_id)
        if held is None:
            return None
        task = self.edges.attach([self.tasks.get(task_id)])[0]
        if task.waits_for or task.status not in ACTIVE_STATUSES:
            return None
        self.tasks.set_fields(task_id, held_assignment=None)
        if "agent" not in held:
            self._assign_to_agent(task, notifications.LACE_SENDER)
            return task
        try:
            plan = AgentPlan.from_json(held["agent"])
            self._check_parent_runs(plan.parent_id)
            after = self._spawn(task, plan)
        except SpawnRefusedError as refusal:
            self.tasks.set_fields(task_id, assigned_to=None)
            self.notes.insert(task_id, notifications.LACE_SENDER, f"Not started: {refusal}")
            self.inbox.notify(task.created_by, sender=notifications.LACE_SENDER, kind="status",
                              text=notifications.release_refused(task, str(refusal)),
                              task_id=task_id)
            return replace(task, assigned_to=None)
        self._assign_to_agent(after, notifications.LACE_SENDER)
        return after

    def _check_parent_runs(self, parent_id: str) -> None:
        """Refuse a helper an agent planned while it ran, now that it is stopped: the stop
        holds for everything below it until it is resumed."""
        parent = self.agents.find(parent_id)
        if parent is not None and parent.status == "stopped":
            raise SpawnRefusedError(
                f"Spawn refused: {parent_id}, which planned this helper, is stopped "
                f"({parent.stop_reason}); assign the task again once it is resumed.")

    def settle_dependents(self, blocker: Task, actor: str, reason: str | None = None) -> None:
        """What a blocker's new status means for the tasks that wait for it: completed, the
        last of their blockers releases them; blocked or archived, their creators are told
        (each once, with every task of theirs it holds back)."""
        if blocker.status == "completed":
            for task_id in self.edges.satisfy(blocker.id):
                self.release(task_id)
        elif blocker.status in STALLED_STATUSES:
            stuck: dict[str, list[Task]] = {}
            for dependent in self.edges.waiting_on(blocker.id):
                stuck.setdefault(dependent.created_by, []).append(dependent)
            for creator, dependents in stuck.items():
                self.inbox.notify(creator, sender=actor, kind="status", task_id=blocker.id,
                                  text=notifications.cannot_start(blocker, reason, dependents))
