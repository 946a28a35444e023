"""Row verbs of task dependencies: the `task_dependencies` edges, and the edges and results read
with a task. No board rules here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.effects import EffectLog
from lace.core.notifications import WaitedResult
from lace.core.records import Task
from lace.core.tasks import FINISHED_STATUSES
from lace.store import schema
from lace.store import statements as sql
from lace.store.rows import Rows, record

_edges, _tasks, _notes = schema.task_dependencies, schema.tasks, schema.task_notes


class EdgeRows(Rows):
    """The edges between tasks (`task_id` waits for `blocked_by`); every task whose edges
    change is recorded in `effects`."""

    def __init__(self, connection: sa.Connection, raw: Any, effects: EffectLog) -> None:
        super().__init__(connection, raw)
        self.effects = effects

    def insert(self, task_id: str, blockers: dict[str, bool]) -> None:
        """`task_id` waits for each blocker; a blocker already completed (True) satisfies its
        edge at once."""
        now = now_iso()
        for blocker, completed in blockers.items():
            self._execute(_edges.insert().values(task_id=task_id, blocked_by=blocker,
                                                 created_at=now,
                                                 satisfied_at=now if completed else None))
        self.effects.task(task_id)

    def delete(self, task_id: str, blockers: Iterable[str]) -> None:
        """`task_id` no longer waits for these."""
        self._execute(_edges.delete().where(_edges.c.task_id == task_id,
                                            _edges.c.blocked_by.in_(list(blockers))))
        self.effects.task(task_id)

    def satisfy(self, blocker: str) -> list[str]:
        """Mark every open edge to a blocker just completed satisfied; returns the tasks that
        waited for it."""
        dependents = [row["task_id"] for row in sql.WAITING_ON.rows(self.raw,
                                                                    {"blocker": blocker})]
        if dependents:
            self._execute(_edges.update().where(_edges.c.blocked_by == blocker,
                                                _edges.c.satisfied_at.is_(None))
                          .values(satisfied_at=now_iso()))
        return dependents

    def open_blockers(self, task_id: str) -> list[Task]:
        """The tasks `task_id` still waits for, oldest first (one prepared statement when
        there are none, the common case)."""
        if sql.OPEN_BLOCKER_IDS.first(self.raw, {"task": task_id}) is None:
            return []
        rows = self._execute(sa.select(_tasks).join(_edges, _edges.c.blocked_by == _tasks.c.id)
                             .where(_edges.c.task_id == task_id, _edges.c.satisfied_at.is_(None))
                             .order_by(_tasks.c.created_at, _tasks.c.id))
        return [record(Task, row) for row in rows]

    def waiting_on(self, blocker: str) -> list[Task]:
        """The open tasks that still wait for `blocker`."""
        rows = self._execute(sa.select(_tasks).join(_edges, _edges.c.task_id == _tasks.c.id)
                             .where(_edges.c.blocked_by == blocker,
                                    _edges.c.satisfied_at.is_(None),
                                    _tasks.c.status.not_in(FINISHED_STATUSES))
                             .order_by(_tasks.c.created_at, _tasks.c.id))
        return [record(Task, row) for row in rows]

    def of_session(self, session_id: str) -> dict[str, list[str]]:
        """Every edge of a session: each task to the tasks it depends on."""
        rows = self._execute(sa.select(_edges.c.task_id, _edges.c.blocked_by)
                             .join(_tasks, _tasks.c.id == _edges.c.task_id)
                             .where(_tasks.c.thread_id == session_id))
        edges: dict[str, list[str]] = {}
        for row in rows:
            edges.setdefault(row.task_id, []).append(row.blocked_by)
        return edges

    def attach(self, tasks: list[Task], session_id: str | None = None) -> list[Task]:
        """`tasks` with their `blocked_by`, `waits_for` and `blocks` (the tasks not archived
        that still wait for it) read: one statement, for the tasks' own edges, or for every
        edge of `session_id` when many tasks are shown."""
        if not tasks:
            return tasks
        where = (_tasks.c.thread_id == session_id) if session_id is not None else sa.or_(
            _edges.c.task_id.in_([task.id for task in tasks]),
            _edges.c.blocked_by.in_([task.id for task in tasks]))
        blocker = _tasks.alias("blocker")
        rows = self._execute(sa.select(_edges.c.task_id, _edges.c.blocked_by,
                                       _edges.c.satisfied_at, _tasks.c.status)
                             .join(_tasks, _tasks.c.id == _edges.c.task_id)
                             .join(blocker, blocker.c.id == _edges.c.blocked_by).where(where)
                             .order_by(blocker.c.created_at, blocker.c.id, _tasks.c.created_at,
                                       _tasks.c.id)).all()
        if not rows:
            return tasks
        blocked_by: dict[str, list[str]] = {}
        waits_for: dict[str, list[str]] = {}
        blocks: dict[str, list[str]] = {}
        for row in rows:
            blocked_by.setdefault(row.task_id, []).append(row.blocked_by)
            if row.satisfied_at is None:
                waits_for.setdefault(row.task_id, []).append(row.blocked_by)
                if row.status != "archived":  # an archived task waits for nothing any more
                    blocks.setdefault(row.blocked_by, []).append(row.task_id)
        return [replace(task, blocked_by=tuple(blocked_by.get(task.id, ())),
                        waits_for=tuple(waits_for.get(task.id, ())),
                        blocks=tuple(blocks.get(task.id, ()))) for task in tasks]

    def blocker_results(self, task_id: str) -> list[WaitedResult]:
        """The completed blockers of a task with their results (each one's last note), oldest
        first."""
        last_note = (sa.select(_notes.c.content).where(_notes.c.task_id == _tasks.c.id)
                     .order_by(_notes.c.id.desc()).limit(1).scalar_subquery())
        rows = self._execute(sa.select(_tasks.c.id, _tasks.c.title, last_note.label("result"))
                             .join(_edges, _edges.c.blocked_by == _tasks.c.id)
                             .where(_edges.c.task_id == task_id,
                                    _edges.c.satisfied_at.is_not(None))
                             .order_by(_tasks.c.created_at, _tasks.c.id))
        return [WaitedResult(row.id, row.title, row.result or "(no result was recorded)")
                for row in rows]

