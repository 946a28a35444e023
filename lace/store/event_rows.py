"""Row verbs of the `events` table: each thread's conversation, one row per message or call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.records import Event
from lace.core.secrets import mask_data
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.prepared import Later, dialect_of
from lace.store.rows import Rows, record


class EventRows(Rows):
    """A thread's conversation; appending to it touches the thread once per transaction."""

    def __init__(self, connection: sa.Connection, raw: Any) -> None:
        super().__init__(connection, raw)
        self._touched: set[str] = set()

    def append(self, thread_id: str, type: str, data: dict[str, Any]) -> Later[int]:
        """Append one conversation row (credential values masked); its id, which on
        PostgreSQL arrives with the transaction's next round trip (`Later`)."""
        now = now_iso()
        event_id = sql.INSERT_EVENT.later_id(self.raw, {
            "thread_id": thread_id, "type": type, "data": mask_data(data, credential_values()),
            "created_at": now})
        self._touch(thread_id, now)
        return event_id

    def append_all(self, thread_id: str, rows: Sequence[tuple[str, dict[str, Any]]]
                   ) -> Later[list[int]]:
        """Append conversation rows (type, data) in order; their ids (`Later`). On
        PostgreSQL in one statement, not one each."""
        if dialect_of(self.raw) == "sqlite" or not rows:  # in process: nothing to save
            return Later.known([self.append(thread_id, type, data).value for type, data in rows])
        now, secrets = now_iso(), credential_values()
        params: dict[str, Any] = {}
        for index, (type, data) in enumerate(rows):
            params.update({f"thread_id_{index}": thread_id, f"type_{index}": type,
                           f"data_{index}": mask_data(data, secrets),
                           f"created_at_{index}": now})
        event_ids = sql.insert_events(len(rows)).later(  # ids drawn in the rows' order
            self.raw, params, lambda inserted: sorted(int(row["id"]) for row in inserted),
            inserts=len(rows))
        self._touch(thread_id, now)
        return event_ids

    def _touch(self, thread_id: str, now: str) -> None:
        if thread_id not in self._touched:  # once per transaction is enough
            self._touched.add(thread_id)
            sql.TOUCH_THREAD.send(self.raw, {"thread": thread_id, "now": now})

    def latest(self, thread_id: str, count: int) -> tuple[list[Event], int]:
        """A thread's last `count` events, oldest first, and how many came before them."""
        events = schema.events.c
        rows = self._execute(sa.select(schema.events).where(events.thread_id == thread_id)
                             .order_by(events.id.desc()).limit(count)).all()
        total = self._execute(sa.select(sa.func.count()).where(events.thread_id == thread_id)
                              ).scalar_one()
        return [record(Event, row) for row in reversed(rows)], max(0, total - len(rows))

    def of_thread(self, thread_id: str, after_id: int = 0) -> list[Event]:
        """A thread's conversation in order."""
        rows = sql.EVENTS_AFTER.rows(self.raw, {"thread": thread_id, "after": after_id})
        return [record(Event, row) for row in rows]

    def of_session(self, root_id: str, since: str | None = None) -> list[Event]:
        """The events of every thread of a session, in order; only those written at `since`
        or later, when given."""
        events, threads = schema.events.c, schema.threads.c
        query = (sa.select(schema.events)
                 .join_from(schema.events, schema.threads, threads.id == events.thread_id)
                 .where(threads.root_id == root_id).order_by(events.id))
        if since is not None:
            query = query.where(events.created_at >= since)
        return [record(Event, row) for row in self._execute(query).all()]

    def mark_waiting(self, thread_id: str, call_id: str, task_ids: list[str]) -> None:
        """Persist what a tool call waits for (in its `tool_call` event), so a turn resumed
        after a crash waits for the same tasks instead of creating them again."""
        events = schema.events.c
        row = self._execute(sa.select(events.id, events.data).where(
            events.thread_id == thread_id, events.type == "tool_call",
            events.data["call_id"].as_string() == call_id)).first()
        if row is not None:
            self._execute(schema.events.update().where(events.id == row.id)
                          .values(data={**row.data, "waiting_for": task_ids}))

    def unawaited_jobs(self, thread_id: str) -> list[str]:
        """Tasks this agent gave to `spawn`ed helpers that no spawn_await returned yet."""
        agents, tasks = schema.agent_metadata, schema.tasks
        jobs = list(self._execute(
            sa.select(tasks.c.id).join(agents, agents.c.created_for_task == tasks.c.id)
            .where(agents.c.parent_thread_id == thread_id, agents.c.type == "ephemeral")
            .order_by(tasks.c.created_at, tasks.c.id)).scalars())
        awaited = {task_id for event in self.of_thread(thread_id)
                   if event.type == "tool_result" and event.data.get("tool_name") == "spawn_await"
                   for task_id in event.data.get("waited_for") or []}
        return [job for job in jobs if job not in awaited]
