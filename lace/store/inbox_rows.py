"""Row verbs of the `inbox` table: what wakes a thread, and which threads may run a turn."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from lace.core.agents import NOT_RUNNABLE
from lace.core.assignee import HUMAN
from lace.core.clock import now_iso
from lace.core.effects import EffectLog, Notice
from lace.core.ids import is_thread_id
from lace.core.records import InboxItem, Place
from lace.core.secrets import mask
from lace.core.tasks import ACTIVE_STATUSES
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.agent_rows import AgentRows
from lace.store.rows import Rows, record


def _runnable_at(rows: list[dict[str, Any]], place: Place | None) -> list[str]:
    return [row["thread_id"] for row in rows if place is None or row["workspace"] is None
            or (row["host"], row["workspace"]) == (place.host, place.workspace)]


class InboxRows(Rows):
    """Each thread's pending messages; every row posted is recorded in `effects`."""

    def __init__(self, connection: sa.Connection, raw: Any, agents: AgentRows,
                 effects: EffectLog) -> None:
        super().__init__(connection, raw)
        self.agents = agents
        self.effects = effects

    def post(
        self, thread_id: str, *, sender: str, kind: str, text: str,
        task_id: str | None = None, priority: str = "normal", wakes: bool = True,
        held_for: str | None = None,
    ) -> None:
        """Put a message in a thread's inbox (credential values masked); a row that does not
        `wake` the thread waits for its next turn, one `held_for` a batch waits for the
        batch's notice (`release_held`)."""
        wakes = wakes and held_for is None
        sql.INSERT_INBOX.send(self.raw, {
            "thread_id": thread_id, "sender": sender, "task_id": task_id, "kind": kind,
            "text": mask(text, credential_values()), "priority": priority, "wakes": wakes,
            "held_for": held_for, "created_at": now_iso()})
        self.effects.notice(Notice(thread_id, kind, task_id, wakes))

    def notify(self, recipient: str | None, *, sender: str, kind: str, text: str,
               task_id: str, wakes: bool = True, held_for: str | None = None) -> None:
        """Put a notice in an agent's inbox; people and the sender themselves get none."""
        if not recipient or recipient in (sender, HUMAN) or not is_thread_id(recipient):
            return
        if self.agents.find(recipient) is not None:
            self.post(recipient, sender=sender, kind=kind, text=text, task_id=task_id,
                      wakes=wakes, held_for=held_for)

    def person_wrote_to(self, thread_id: str) -> bool:
        """Whether the person ever sent this thread a message (a prompt, `lace run --continue
        ROOT "..."`, the app's input line)."""
        inbox = schema.inbox.c
        return self._execute(sa.select(inbox.id).where(
            inbox.thread_id == thread_id, inbox.sender == HUMAN, inbox.kind == "message")
        ).first() is not None

    def release_held(self, thread_id: str, batch: str) -> list[str]:
        """The texts of a thread's notices held for `batch` and not delivered otherwise
        (a wait's tool result), oldest first. They go out inside the batch's one notice, so
        their rows are removed: every consumed row is one a turn delivered."""
        inbox = schema.inbox.c
        held = self._execute(sa.select(inbox.id, inbox.text).where(
            inbox.thread_id == thread_id, inbox.held_for == batch,
            inbox.consumed_at.is_(None)).order_by(inbox.id)).all()
        if held:
            self._execute(schema.inbox.delete().where(inbox.id.in_([row.id for row in held])))
        return [row.text for row in held]

    def was_told(self, thread_id: str, task_id: str, kind: str) -> bool:
        """Whether a thread ever got a notice of this kind about this task."""
        inbox = schema.inbox.c
        return self._execute(sa.select(inbox.id).where(
            inbox.thread_id == thread_id, inbox.task_id == task_id, inbox.kind == kind)
        ).first() is not None

    def texts(self, inbox_ids: list[int]) -> dict[int, str]:
        """The text each of these rows was posted with (as written, before a budget note
        joined it in the conversation)."""
        inbox = schema.inbox.c
        return {row.id: row.text for row in self._execute(
            sa.select(inbox.id, inbox.text).where(inbox.id.in_(inbox_ids)))}

    def pending(self, thread_id: str) -> list[InboxItem]:
        """Unconsumed messages for a thread, high priority first, then oldest."""
        rows = sql.PENDING_INBOX.rows(self.raw, {"thread": thread_id})
        return [record(InboxItem, row) for row in rows]

    def take(self, thread_id: str) -> list[InboxItem]:
        """The pending messages of a thread, marked consumed in this transaction."""
        items = self.pending(thread_id)
        if items:  # exactly these rows: this transaction holds the write lock
            sql.CONSUME_INBOX.send(self.raw, {"thread": thread_id, "now": now_iso()})
        return items

    def consume_notices(self, thread_id: str, task_ids: list[str]) -> None:
        """Mark a thread's pending completion notices for these tasks, and the progress of
        those that settled, delivered: the result already reached it as a tool result, so it
        must not wake it a second time, nor come back as stale news on its next turn (the
        progress of a task still running stays, for a wait that timed out)."""
        inbox, tasks = schema.inbox.c, schema.tasks.c
        settled = sa.select(tasks.id).where(tasks.id.in_(task_ids),
                                            tasks.status.not_in(ACTIVE_STATUSES))
        self._execute(schema.inbox.update().where(
            inbox.thread_id == thread_id, inbox.task_id.in_(task_ids),
            sa.or_(inbox.kind == "completion",
                   sa.and_(sa.not_(inbox.wakes), inbox.task_id.in_(settled))),
            inbox.consumed_at.is_(None)).values(consumed_at=now_iso()))

    def runnable(self, root_id: str, place: Place | None = None) -> list[str]:
        """Threads of a session with pending inbox rows that wake them (progress waits for a
        turn started by something else) whose agent may start a turn: not stopped, not
        failed, not inert, and not already running (here or in another process); only those a
        process at `place` may run, when given (`Agent.runs_at`)."""
        return _runnable_at(sql.RUNNABLE.rows(self.raw, {"root": root_id}), place)

    def runnable_of(self, thread_id: str) -> list[str]:
        """`[thread_id]` if it has pending inbox rows that wake it and may run, else `[]`."""
        found = self.agents.find_waking(thread_id)
        if found is None:
            return []
        agent, waking = found
        return [] if agent.status in NOT_RUNNABLE or agent.inert or not waking else [thread_id]

    def runnable_anywhere(self, place: Place | None = None) -> list[str]:
        """`runnable` of every session of the database."""
        return _runnable_at(sql.RUNNABLE_ANYWHERE.rows(self.raw, {}), place)
