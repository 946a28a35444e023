"""Row verbs of the `threads` table: sessions (root threads) and their child threads."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from lace.core import ids
from lace.core.clock import now_iso
from lace.core.errors import NotFoundError, UnknownThreadError
from lace.core.records import NewAgent, Place, Thread
from lace.store import schema
from lace.store import statements as sql
from lace.store.agent_rows import AgentRows
from lace.store.rows import Rows, record


class ThreadRows(Rows):
    """Threads: a session is a root thread, an agent's thread is `<parent>.N`."""

    def __init__(self, connection: sa.Connection, raw: Any, agents: AgentRows) -> None:
        super().__init__(connection, raw)
        self.agents = agents
        self._highest_child: dict[str, int] = {}  # per parent, once read in this transaction

    def create_session(
        self, *, provider: str, model: str, title: str | None = None, name: str = "root",
        tools: list[str] | None = None, place: Place | None = None,
        thread_id: str | None = None,
    ) -> Thread:
        """A new root thread (`thread_id`, else a fresh id) with its agent row (created by
        `human`); its agents' workspace is the one at `place`."""
        now = now_iso()
        thread_id = thread_id or ids.new_root_thread_id()
        thread = Thread(id=thread_id, parent_id=None, root_id=thread_id, title=title,
                        created_at=now, updated_at=now)
        sql.INSERT_THREAD.send(self.raw, vars(thread))
        self.agents.create(NewAgent(thread_id=thread.id, name=name, provider=provider,
                                    model=model, tools=tools, place=place))
        return thread

    def create_child(self, parent_id: str, title: str | None = None,
                     root_id: str | None = None, trace_parent: str | None = None) -> Thread:
        """Thread `<parent>.N`, N one more than the highest existing child of the parent
        (`root_id`, the parent's session, saves reading the parent when the caller knows it),
        traced under `trace_parent`. The highest is read once per parent and transaction: a
        `task_create` of 300 agents reads it once, not 300 times."""
        root_id = root_id or self.get(parent_id).root_id
        highest = self._highest_child.get(parent_id)
        if highest is None:
            highest = int(sql.HIGHEST_CHILD.scalar(self.raw, {"parent": parent_id,
                                                           "suffix_at": len(parent_id) + 2}))
        self._highest_child[parent_id] = highest + 1
        now = now_iso()
        thread = Thread(id=ids.child_thread_id(parent_id, highest + 1), parent_id=parent_id,
                        root_id=root_id, title=title, created_at=now, updated_at=now,
                        trace_parent=trace_parent)
        sql.INSERT_THREAD.send(self.raw, vars(thread))
        return thread

    def get(self, thread_id: str) -> Thread:
        """One thread, or NotFoundError."""
        row = sql.THREAD_BY_ID.first(self.raw, {"thread": thread_id})
        if row is None:
            raise UnknownThreadError(f"Unknown thread {thread_id!r}.")
        return record(Thread, row)

    def of_session(self, root_id: str) -> list[Thread]:
        """Every thread of a session, root first, in creation order."""
        rows = sql.SESSION_THREADS.rows(self.raw, {"root": root_id})
        return [record(Thread, row) for row in rows]

    def latest_session(self) -> Thread | None:
        """The most recently created root thread."""
        row = self._execute(
            sa.select(schema.threads).where(schema.threads.c.parent_id.is_(None))
            .order_by(schema.threads.c.created_at.desc(), schema.threads.c.id.desc())).first()
        return record(Thread, row) if row else None

    def sessions(self) -> list[Thread]:
        """Every root thread, the newest first."""
        rows = self._execute(
            sa.select(schema.threads).where(schema.threads.c.parent_id.is_(None))
            .order_by(schema.threads.c.created_at.desc(), schema.threads.c.id.desc())).all()
        return [record(Thread, row) for row in rows]

    def get_session(self, root_id: str) -> Thread:
        """A root thread, or NotFoundError naming it."""
        thread = self.get(root_id)
        if thread.parent_id is not None:
            raise NotFoundError(f"{root_id!r} is not a session (root thread); "
                                f"its session is {thread.root_id}.")
        return thread

    def trace_parent(self, thread_id: str) -> str | None:
        """The `traceparent` a thread's turns are traced under: its own, else its session's."""
        thread = self.get(thread_id)
        if thread.trace_parent is None and thread.parent_id is not None:
            return self.get(thread.root_id).trace_parent
        return thread.trace_parent

    def claim_trace(self, root_id: str, trace_parent: str) -> None:
        """Make `trace_parent` the session's unless it has one already (the first traced turn
        of a session starts its trace)."""
        threads = schema.threads
        self._execute(threads.update().where(
            threads.c.id == root_id, threads.c.trace_parent.is_(None)).values(
                trace_parent=trace_parent))
