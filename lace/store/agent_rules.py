"""Agent rules over the board: stopping a subtree (its open tasks blocked, their creators told)
and resuming an agent."""

from __future__ import annotations

from lace.core import notifications
from lace.core.agents import RESUMABLE_STATUSES
from lace.core.effects import EffectLog
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Place
from lace.core.tasks import ACTIVE_STATUSES
from lace.core.tool_names import needs_workspace
from lace.core.worktrees import not_resumable
from lace.store import schema
from lace.store.agent_rows import AgentRows
from lace.store.event_rows import EventRows
from lace.store.inbox_rows import InboxRows
from lace.store.task_rows import NoteRows, TaskRows
from lace.store.task_rules import TaskBoard
from lace.store.worktree_rows import WorktreeRows


class AgentLifecycle:
    """Stopping and resuming agents, with what that means for their tasks."""

    def __init__(self, *, agents: AgentRows, events: EventRows, inbox: InboxRows,
                 tasks: TaskRows, notes: NoteRows, board: TaskBoard,
                 worktrees: WorktreeRows, effects: EffectLog) -> None:
        self.agents = agents
        self.worktrees = worktrees
        self.events = events
        self.inbox = inbox
        self.tasks = tasks
        self.notes = notes
        self.board = board
        self.effects = effects

    def stop_subtree(self, thread_id: str, *, reason: str, by_person: bool = False) -> list[str]:
        """Stop an agent and everything below it: status `stopped` with the reason, their open
        tasks blocked with a note, and the creators of those tasks told. A stop by a person
        lasts until a person resumes the agent."""
        stopped = []
        for agent in self.agents.subtree(thread_id):
            if agent.status == "stopped":
                if by_person and not agent.stopped_by_person:
                    self.agents.update(agent.thread_id, stopped_by_person=True)
                continue
            self.agents.update(agent.thread_id, status="stopped", stop_reason=reason,
                               stopped_by_person=by_person)
            self.events.append(agent.thread_id, "error", {"error": f"stopped: {reason}",
                                                          "stopped": True})
            stopped.append(agent.thread_id)
            tasks, _ = self.tasks.query(root_of(agent.thread_id),
                                        where=schema.tasks.c.assigned_to == agent.thread_id)
            for task in tasks:
                if task.status in ACTIVE_STATUSES:
                    self.notes.insert(task.id, agent.thread_id, f"Blocked: stopped: {reason}")
                    self.board.update_task(task.id, session_id=task.thread_id,
                                           actor=agent.thread_id, changes={"status": "blocked"},
                                           reason=f"stopped: {reason}")
        self.effects.stop(stopped)
        return stopped

    def resume(self, thread_id: str) -> bool:
        """A person resumes an agent: a stopped (or failed, or interrupted) one becomes idle
        with a `resume` message; an inert one (imported) may run from now on. Refused when
        the worktree it worked in was pruned: it has nowhere to work."""
        agent = self.agents.get(thread_id)
        place = self.worktrees.nearest(thread_id)
        if place is not None and place.status == "pruned":
            raise LaceError(not_resumable(thread_id, place.thread_id, place.branch))
        if agent.inert:
            self.agents.update(thread_id, inert=False)
        if agent.status not in RESUMABLE_STATUSES:
            return agent.inert
        self.agents.update(thread_id, status="idle", stop_reason=None, stopped_by_person=False)
        self.inbox.post(thread_id, sender=notifications.LACE_SENDER, kind="resume",
                        priority="high",
                        text=notifications.resumed(agent.stop_reason or agent.status))
        return True

    def release_imported(self, root_id: str, place: Place | None) -> list[str]:
        """A person resumed the session: its inert agents (imported, not yet resumed) may run
        from now on, those whose tools act on a workspace in the person's (`place`); returns
        them."""
        released = []
        for agent in self.agents.of_session(root_id):
            if not agent.inert:
                continue
            where = {"host": place.host, "workspace": place.workspace} \
                if place is not None and needs_workspace(agent.tools) else {}
            self.agents.update(agent.thread_id, inert=False, **where)
            released.append(agent.thread_id)
        return released
