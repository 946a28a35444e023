"""Row verbs of the `tasks` and `task_notes` tables, with no board rules (those live in
`TaskBoard`); every task written is recorded in the transaction's effects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from lace.core import ids
from lace.core.clock import now_iso
from lace.core.effects import EffectLog
from lace.core.errors import NotFoundError
from lace.core.records import Note, Task
from lace.core.secrets import mask, mask_data
from lace.core.tasks import ACTIVE_STATUSES, OPEN_STATUSES
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.prepared import Prepared, update_by_key
from lace.store.rows import Rows, record

_TASK_ID_ATTEMPTS = 20


class NoteRows(Rows):
    """The notes of tasks: progress, results, and why a task stopped."""

    def __init__(self, connection: sa.Connection, raw: Any, effects: EffectLog) -> None:
        super().__init__(connection, raw)
        self.effects = effects

    def insert(self, task_id: str, author: str, content: str) -> None:
        """Insert one note row (credential values masked); nothing waits for its id (on a
        server it goes out with the next statement)."""
        now, content = now_iso(), mask(content, credential_values())
        sql.INSERT_NOTE.send(self.raw, {
            "task_id": task_id, "author": author, "content": content, "created_at": now})
        self.effects.task(task_id)

    def count(self, task_id: str) -> int:
        """How many notes a task has."""
        return int(sql.COUNT_NOTES.scalar(self.raw, {"task": task_id}))

    def of_task(self, task_id: str) -> list[Note]:
        """A task's notes, oldest first."""
        rows = sql.TASK_NOTES.rows(self.raw, {"task": task_id})
        return [record(Note, row) for row in rows]


def _found(task_id: str, row: Mapping[str, Any] | None,
           session_id: str | None) -> Mapping[str, Any]:
    """The task's row; NotFoundError if there is none, or it is of another session than
    `session_id`."""
    if row is None or (session_id is not None and row["thread_id"] != session_id):
        raise NotFoundError(
            f"Unknown task {task_id!r} in this session; list the tasks to see their ids.")
    return row


def _stored_as_is(value: Any) -> bool:
    """Whether a column value reads back as written (no JSON, no NUL for PostgreSQL's text
    to replace)."""
    return value is None or isinstance(value, int | float) or (
        isinstance(value, str) and "\x00" not in value)


class TaskRows(Rows):
    """Task rows as given: inserted, read, queried and changed."""

    def __init__(self, connection: sa.Connection, raw: Any, notes: NoteRows,
                 effects: EffectLog) -> None:
        super().__init__(connection, raw)
        self.notes = notes
        self.effects = effects
        self._fresh_ids: list[str] = []  # checked unused by `reserve_ids`, taken in order
        self._read: dict[str, Mapping[str, Any]] = {}
        """The rows `get` read in this transaction, with the changes it made to them since:
        a completion reads its task once, not three times."""

    def reserve_ids(self, count: int) -> None:
        """Make the next `count` inserts take ids checked unused in one read (a task_create
        of 300 tasks: one read, not 300)."""
        if count < 2:
            return
        fresh: list[str] = []
        for _ in range(_TASK_ID_ATTEMPTS):
            wanted = [task_id for task_id in dict.fromkeys(
                ids.new_task_id() for _ in range(count - len(fresh))) if task_id not in fresh]
            taken = {task.id for task in self.by_ids(wanted)}
            fresh += [task_id for task_id in wanted if task_id not in taken]
            if len(fresh) >= count:
                self._fresh_ids = fresh
                return
        raise RuntimeError("could not allocate unique task ids")

    def _new_id(self) -> str:
        if self._fresh_ids:
            return self._fresh_ids.pop(0)
        for _ in range(_TASK_ID_ATTEMPTS):
            task_id = ids.new_task_id()
            if sql.TASK_EXISTS.first(self.raw, {"task": task_id}) is None:
                return task_id
        raise RuntimeError("could not allocate a unique task id")

    def insert(
        self, *, session_id: str, created_by: str, title: str, prompt: str,
        description: str | None = None, priority: str = "medium",
        assigned_to: str | None = None, status: str = "pending", batch: str | None = None,
    ) -> Task:
        """Insert one task row as given (rules live in `TaskBoard.create_tasks`)."""
        now, task_id = now_iso(), self._new_id()
        title, prompt, description = mask_data([title, prompt, description], credential_values())
        values = {"id": task_id, "title": title, "description": description,
                  "prompt": prompt, "status": status, "priority": priority,
                  "assigned_to": assigned_to, "created_by": created_by,
                  "thread_id": session_id, "created_at": now, "updated_at": now,
                  "batch": batch}
        sql.INSERT_TASK.send(self.raw, values)
        self.effects.task(task_id)
        return record(Task, {**values, "note_count": 0, "notes": ()})

    def get(self, task_id: str, *, session_id: str | None = None,
            with_notes: bool = False) -> Task:
        """One task; NotFoundError if unknown or of another session than `session_id`."""
        row = self._read.get(task_id)
        if row is None:
            row = sql.TASK_BY_ID.first(self.raw, {"task": task_id})
            if row is not None:
                self._read[task_id] = row
        row = _found(task_id, row, session_id)
        notes = tuple(self.notes.of_task(task_id)) if with_notes else ()
        return record(Task, {**row, "note_count": len(notes), "notes": notes})

    def get_with(self, statement: Prepared, task_id: str, *,
                 session_id: str) -> tuple[Task, Mapping[str, Any]]:
        """`get` through `statement`, which reads the task row with more columns, of what the
        caller needs with it (one read): the task (without its notes), and the row with
        them."""
        row = _found(task_id, statement.first(self.raw, {"task": task_id}), session_id)
        self._read[task_id] = {column.name: row[column.name] for column in schema.tasks.c}
        return record(Task, {**self._read[task_id], "note_count": 0, "notes": ()}), row

    def keep(self, row: Mapping[str, Any]) -> None:
        """A task row read in this transaction with another (`AgentRows.to_claim`,
        `AgentRows.get_with_current_task`): `get` reads it no more."""
        self._read[row["id"]] = row

    def set_fields(self, task_id: str, **values: Any) -> str:
        """Change columns of a task row (text credential-masked); returns its new
        `updated_at`."""
        values = {**mask_data(values, credential_values()), "updated_at": now_iso()}
        update_by_key("tasks", tuple(values)).send(self.raw, {**values, "key_value": task_id})
        self.effects.task(task_id)
        read = self._read.pop(task_id, None)
        if read is not None and all(_stored_as_is(value) for value in values.values()):
            self._read[task_id] = {**read, **values}
        return str(values["updated_at"])

    def held_assignment(self, task_id: str) -> dict[str, Any] | None:
        """What a task's assignment does when its last blocker is completed (None: nothing
        is held)."""
        tasks = schema.tasks
        held = self._execute(sa.select(tasks.c.held_assignment)
                             .where(tasks.c.id == task_id)).scalar()
        return held if isinstance(held, dict) else None

    def batch_of(self, task_id: str) -> str | None:
        """The batch a task belongs to (None: it notifies its creator on its own)."""
        read = self._read.get(task_id)
        if read is not None:
            batch = read["batch"]
        else:
            tasks = schema.tasks
            batch = self._execute(sa.select(tasks.c.batch).where(tasks.c.id == task_id)).scalar()
        return batch if isinstance(batch, str) else None

    def batch_has_free_task(self, batch: str) -> bool:
        """Whether a task of the batch is pending or in progress and waits for none: one row
        read, where `in_batch` reads every task of the batch."""
        return sql.FREE_BATCH_TASK.first(self.raw, {"batch": batch}) is not None

    def in_batch(self, batch: str) -> list[Task]:
        """The tasks of a batch."""
        rows = self._execute(sa.select(schema.tasks).where(schema.tasks.c.batch == batch))
        return [record(Task, row) for row in rows]

    def query(
        self, session_id: str, *, where: sa.ColumnElement[bool] | None = None,
        include_closed: bool = False, limit: int | None = None,
    ) -> tuple[list[Task], int]:
        """Tasks of a session sorted by priority then newest, with the total before `limit`."""
        tasks, notes = schema.tasks, schema.task_notes
        conditions = [tasks.c.thread_id == session_id]
        if where is not None:
            conditions.append(where)
        if not include_closed:
            conditions.append(tasks.c.status.in_(sa.bindparam(  # as ix_tasks_open_page's
                "open", OPEN_STATUSES, expanding=True, literal_execute=True)))
        total = self._execute(sa.select(sa.func.count()).select_from(tasks)
                              .where(*conditions)).scalar_one()
        note_count = (sa.select(sa.func.count()).where(notes.c.task_id == tasks.c.id)
                      .scalar_subquery().label("note_count"))
        statement = (sa.select(tasks, note_count).where(*conditions)
                     .order_by(schema.TASK_RANK, tasks.c.created_at.desc(), tasks.c.id.desc())
                     .limit(limit))
        return [record(Task, row) for row in self._execute(statement)], int(total)

    def by_ids(self, task_ids: list[str]) -> list[Task]:
        """The tasks among `task_ids` that exist, in no particular order."""
        rows = sql.TASKS_BY_IDS.rows(self.raw, {"tasks": json.dumps(list(task_ids))})
        return [record(Task, row) for row in rows]

    def count_active(self, task_ids: list[str]) -> int:
        """How many of `task_ids` are still pending or in progress (unknown ids: none)."""
        return int(sql.COUNT_ACTIVE_AMONG.scalar(self.raw, {"tasks": json.dumps(list(task_ids))}))

    def open_by_creator(self, session_id: str) -> dict[str, int]:
        """How many pending or in-progress tasks each creator waits on (not counting tasks
        it assigned to itself)."""
        tasks = schema.tasks.c
        rows = self._execute(
            sa.select(tasks.created_by, sa.func.count().label("open"))
            .where(tasks.thread_id == session_id, tasks.status.in_(ACTIVE_STATUSES),
                   sa.or_(tasks.assigned_to.is_(None), tasks.assigned_to != tasks.created_by))
            .group_by(tasks.created_by))
        return {str(row.created_by): int(row.open) for row in rows}
