"""Row-level verbs over one open connection: insert, fetch and update, with no board rules."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

import sqlalchemy as sa

from lace.core import ids
from lace.core.agents import NOT_RUNNABLE
from lace.core.clock import now_iso
from lace.core.effects import Effects, Notice, Spawned
from lace.core.errors import NotFoundError
from lace.core.records import Agent, Event, InboxItem, Note, Place, Task, Thread
from lace.core.secrets import mask, mask_data
from lace.core.tasks import ACTIVE_STATUSES, OPEN_STATUSES
from lace.core.tool_names import needs_workspace
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.db import driver
from lace.store.prepared import insert_into, update_by_key

_TASK_ID_ATTEMPTS = 20
RecordT = TypeVar("RecordT", Agent, Event, InboxItem, Note, Task, Thread)


def _record(cls: type[RecordT], row: sa.Row[Any] | Mapping[str, Any]) -> RecordT:
    mapping = row._mapping if isinstance(row, sa.Row) else row
    return cls(**{key: mapping[key] for key in cls.__dataclass_fields__ if key in mapping})


def _runnable_at(rows: list[dict[str, Any]], place: Place | None) -> list[str]:
    return [row["thread_id"] for row in rows if place is None or row["workspace"] is None
            or (row["host"], row["workspace"]) == (place.host, place.workspace)]


class RowVerbs:
    """Verbs bound to one open transaction; the `Store` commits or rolls back around it."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.raw = driver(connection)
        self._notices: list[Notice] = []
        self._spawned: list[Spawned] = []
        self._stopped: list[str] = []
        self._tasks: set[str] = set()
        self._touched: set[str] = set()
        self._agents: dict[str, Agent] = {}  # rows read or written in this transaction

    @property
    def effects(self) -> Effects:
        """What this transaction caused so far, for the runtime to act on once it commits."""
        return Effects(notices=tuple(self._notices), spawned=tuple(self._spawned),
                       stopped=tuple(self._stopped), tasks=frozenset(self._tasks))

    def _execute(self, statement: sa.Executable,
                 parameters: dict[str, Any] | None = None) -> sa.CursorResult[Any]:
        return self.connection.execute(statement, parameters)

    # threads and agents

    def create_session(
        self, *, provider: str, model: str, title: str | None = None, name: str = "root",
        tools: list[str] | None = None, place: Place | None = None,
    ) -> Thread:
        """A new root thread with its agent row (created by `human`); its agents' workspace is
        the one at `place`."""
        now = now_iso()
        thread_id = ids.new_root_thread_id()
        thread = Thread(id=thread_id, parent_id=None, root_id=thread_id, title=title,
                        created_at=now, updated_at=now)
        sql.INSERT_THREAD.run(self.raw, vars(thread))
        self.create_agent(thread_id=thread.id, name=name, provider=provider, model=model,
                          parent_thread_id=None, tools=tools, place=place)
        return thread

    def create_child_thread(self, parent_id: str, title: str | None = None,
                            root_id: str | None = None) -> Thread:
        """Thread `<parent>.N`, N one more than the highest existing child of the parent
        (`root_id`, the parent's session, saves reading the parent when the caller knows it)."""
        root_id = root_id or self.get_thread(parent_id).root_id
        highest = sql.HIGHEST_CHILD.scalar(self.raw, {"parent": parent_id,
                                                   "suffix_at": len(parent_id) + 2})
        now = now_iso()
        thread = Thread(id=ids.child_thread_id(parent_id, int(highest) + 1), parent_id=parent_id,
                        root_id=root_id, title=title, created_at=now, updated_at=now)
        sql.INSERT_THREAD.run(self.raw, vars(thread))
        return thread

    def create_agent(
        self, *, thread_id: str, name: str, provider: str, model: str,
        parent_thread_id: str | None, profile: str | None = None, type: str = "persistent",
        status: str = "idle", created_for_task: str | None = None,
        current_task: str | None = None, tools: list[str] | None = None,
        instructions: str | None = None, budget: dict[str, float] | None = None,
        place: Place | None = None,
    ) -> Agent:
        """Write the `agent_metadata` row of a thread. Its place is `place`, else its parent's;
        none when its tools do not act on a workspace (it may run anywhere)."""
        now, instructions = now_iso(), mask_data(instructions, credential_values())
        parent = self.find_agent(parent_thread_id) if parent_thread_id and not place else None
        host, workspace = (place.host, place.workspace) if place else \
            (parent.host, parent.workspace) if parent else (None, None)
        if not needs_workspace(tools):
            host = workspace = None
        agent = Agent(
            thread_id=thread_id, name=name, provider=provider, model=model, profile=profile,
            type=type, status=status, created_for_task=created_for_task,
            parent_thread_id=parent_thread_id, current_task=current_task, tools=tools,
            instructions=instructions, budget=budget, stop_reason=None, turns=0,
            lease_holder=None, tokens_in=0, tokens_out=0, cost_usd=0.0, created_at=now,
            updated_at=now, host=host, workspace=workspace)
        values = vars(agent)
        insert_into("agent_metadata", tuple(values)).run(self.raw, values)
        self._agents[thread_id] = agent
        return agent

    def agent_to_claim(self, thread_id: str) -> Agent | None:
        """The agent row, locked for this transaction; None on PostgreSQL when another
        transaction holds it (it is being claimed there: SKIP LOCKED)."""
        row = sql.AGENT_TO_CLAIM.first(self.raw, {"agent": thread_id})
        if row is None:
            return None
        self._agents[thread_id] = agent = _record(Agent, row)
        return agent

    def get_thread(self, thread_id: str) -> Thread:
        """One thread, or NotFoundError."""
        row = sql.THREAD_BY_ID.first(self.raw, {"thread": thread_id})
        if row is None:
            raise NotFoundError(f"Unknown thread {thread_id!r}.")
        return _record(Thread, row)

    def find_agent(self, thread_id: str) -> Agent | None:
        """The agent row of a thread, if it has one."""
        if thread_id not in self._agents:
            row = sql.AGENT_BY_ID.first(self.raw, {"agent": thread_id})
            if row is None:
                return None
            self._agents[thread_id] = _record(Agent, row)
        return self._agents[thread_id]

    def agents_by_id(self, thread_ids: list[str]) -> list[Agent]:
        """The agent rows among `thread_ids` that exist."""
        missing = [thread_id for thread_id in thread_ids if thread_id not in self._agents]
        if missing:
            for row in sql.AGENTS_BY_IDS.rows(self.raw, {"agents": json.dumps(missing)}):
                self._agents[row["thread_id"]] = _record(Agent, row)
        return [self._agents[thread_id] for thread_id in thread_ids if thread_id in self._agents]

    def count_turn(self, thread_id: str) -> None:
        """One more turn for this agent."""
        self._agents.pop(thread_id, None)
        sql.COUNT_TURN.run(self.raw, {"agent": thread_id})

    def get_agent(self, thread_id: str) -> Agent:
        """The agent row of a thread, or NotFoundError."""
        agent = self.find_agent(thread_id)
        if agent is None:
            raise NotFoundError(f"Thread {thread_id!r} has no agent.")
        return agent

    def set_status(self, thread_id: str, status: str) -> None:
        """Change an agent's status unless it was stopped (only `resume_agent` undoes that)."""
        self._agents.pop(thread_id, None)
        sql.SET_STATUS.run(self.raw, {"agent": thread_id, "new_status": status, "now": now_iso()})

    def update_agent(self, thread_id: str, **values: Any) -> None:
        """Change columns of an agent row (text credential-masked)."""
        self._agents.pop(thread_id, None)
        values = {**mask_data(values, credential_values()), "updated_at": now_iso()}
        update_by_key("agent_metadata", tuple(values)).run(
            self.raw, {**values, "key_value": thread_id})

    def session_threads(self, root_id: str) -> list[Thread]:
        """Every thread of a session, root first, in creation order."""
        rows = sql.SESSION_THREADS.rows(self.raw, {"root": root_id})
        return [_record(Thread, row) for row in rows]

    def session_agents(self, root_id: str) -> list[Agent]:
        """Every agent row of a session."""
        rows = sql.SESSION_AGENTS.rows(self.raw, {"root": root_id})
        return [_record(Agent, row) for row in rows]

    def latest_session(self) -> Thread | None:
        """The most recently created root thread."""
        row = self._execute(
            sa.select(schema.threads).where(schema.threads.c.parent_id.is_(None))
            .order_by(schema.threads.c.created_at.desc(), schema.threads.c.id.desc())).first()
        return _record(Thread, row) if row else None

    def get_session(self, root_id: str) -> Thread:
        """A root thread, or NotFoundError naming it."""
        thread = self.get_thread(root_id)
        if thread.parent_id is not None:
            raise NotFoundError(f"{root_id!r} is not a session (root thread); "
                                f"its session is {thread.root_id}.")
        return thread

    # events and inbox

    def append_event(self, thread_id: str, type: str, data: dict[str, Any]) -> int:
        """Append one conversation row (credential values masked); returns its id."""
        now = now_iso()
        event_id = sql.INSERT_EVENT.inserted_id(self.raw, {
            "thread_id": thread_id, "type": type, "data": mask_data(data, credential_values()),
            "created_at": now})
        if thread_id not in self._touched:  # once per transaction is enough
            self._touched.add(thread_id)
            sql.TOUCH_THREAD.run(self.raw, {"thread": thread_id, "now": now})
        return event_id

    def latest_events(self, thread_id: str, count: int) -> tuple[list[Event], int]:
        """A thread's last `count` events, oldest first, and how many came before them."""
        events = schema.events.c
        rows = self._execute(sa.select(schema.events).where(events.thread_id == thread_id)
                             .order_by(events.id.desc()).limit(count)).all()
        total = self._execute(sa.select(sa.func.count()).where(events.thread_id == thread_id)
                              ).scalar_one()
        return [_record(Event, row) for row in reversed(rows)], max(0, total - len(rows))

    def thread_events(self, thread_id: str, after_id: int = 0) -> list[Event]:
        """A thread's conversation in order."""
        rows = sql.EVENTS_AFTER.rows(self.raw, {"thread": thread_id, "after": after_id})
        return [_record(Event, row) for row in rows]

    def post_inbox(
        self, thread_id: str, *, sender: str, kind: str, text: str,
        task_id: str | None = None, priority: str = "normal", wakes: bool = True,
    ) -> int:
        """Put a message in a thread's inbox (credential values masked); a row that does not
        `wake` the thread waits for its next turn."""
        inbox_id = sql.INSERT_INBOX.inserted_id(self.raw, {
            "thread_id": thread_id, "sender": sender, "task_id": task_id, "kind": kind,
            "text": mask(text, credential_values()), "priority": priority, "wakes": wakes,
            "created_at": now_iso()})
        self._notices.append(Notice(thread_id, kind, task_id, wakes))
        return inbox_id

    def was_told(self, thread_id: str, task_id: str, kind: str) -> bool:
        """Whether a thread ever got a notice of this kind about this task."""
        inbox = schema.inbox.c
        return self._execute(sa.select(inbox.id).where(
            inbox.thread_id == thread_id, inbox.task_id == task_id, inbox.kind == kind)
        ).first() is not None

    def insert_subscription(self, thread_id: str, topic: str) -> None:
        """Subscribe a thread to a topic (it must not be subscribed yet)."""
        self._execute(schema.subscriptions.insert().values(thread_id=thread_id, topic=topic,
                                                           created_at=now_iso()))

    def take_inbox(self, thread_id: str) -> list[InboxItem]:
        """The pending messages of a thread, marked consumed in this transaction."""
        items = self.pending_inbox(thread_id)
        if items:  # exactly these rows: this transaction holds the write lock
            sql.CONSUME_INBOX.run(self.raw, {"thread": thread_id, "now": now_iso()})
        return items

    def runnable_threads(self, root_id: str, place: Place | None = None) -> list[str]:
        """Threads of a session with pending inbox rows that wake them (progress waits for a
        turn started by something else) whose agent may start a turn: not stopped, not
        failed, and not already running (here or in another process); only those a process
        at `place` may run, when given (`Agent.runs_at`)."""
        return _runnable_at(sql.RUNNABLE.rows(self.raw, {"root": root_id}), place)

    def runnable_threads_of(self, thread_id: str) -> list[str]:
        """`[thread_id]` if it has pending inbox rows that wake it and may run, else `[]`."""
        agent = self.find_agent(thread_id)
        if agent is None or agent.status in NOT_RUNNABLE:
            return []
        return [thread_id] if self.has_waking_inbox(thread_id) else []

    def has_waking_inbox(self, thread_id: str) -> bool:
        """Whether a thread has a pending inbox row that starts a turn."""
        return sql.HAS_WAKING_INBOX.first(self.raw, {"thread": thread_id}) is not None

    def open_tasks_by_creator(self, session_id: str) -> dict[str, int]:
        """How many pending or in-progress tasks each creator waits on (not counting tasks
        it assigned to itself)."""
        tasks = schema.tasks.c
        rows = self._execute(
            sa.select(tasks.created_by, sa.func.count().label("open"))
            .where(tasks.thread_id == session_id, tasks.status.in_(ACTIVE_STATUSES),
                   sa.or_(tasks.assigned_to.is_(None), tasks.assigned_to != tasks.created_by))
            .group_by(tasks.created_by))
        return {str(row.created_by): int(row.open) for row in rows}

    def count_active_tasks_of(self, thread_id: str) -> int:
        """How many pending or in-progress tasks are assigned to an agent, not counting those
        that wait for other tasks."""
        return int(sql.COUNT_ACTIVE_ASSIGNED.scalar(self.raw, {"agent": thread_id}))

    def tasks_by_id(self, task_ids: list[str]) -> list[Task]:
        """The tasks among `task_ids` that exist, in no particular order."""
        rows = self._execute(sa.select(schema.tasks).where(schema.tasks.c.id.in_(task_ids)))
        return [_record(Task, row) for row in rows]

    def unawaited_jobs(self, thread_id: str) -> list[str]:
        """Tasks this agent gave to `spawn`ed helpers that no spawn_await returned yet."""
        agents, tasks = schema.agent_metadata, schema.tasks
        jobs = list(self._execute(
            sa.select(tasks.c.id).join(agents, agents.c.created_for_task == tasks.c.id)
            .where(agents.c.parent_thread_id == thread_id, agents.c.type == "ephemeral")
            .order_by(tasks.c.created_at, tasks.c.id)).scalars())
        awaited = {task_id for event in self.thread_events(thread_id)
                   if event.type == "tool_result" and event.data.get("tool_name") == "spawn_await"
                   for task_id in event.data.get("waited_for") or []}
        return [job for job in jobs if job not in awaited]

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

    def wait_edges(self, session_id: str) -> dict[str, set[str]]:
        """Who waits on whom in a session: each agent with a waiting call (`delegate`,
        `spawn_await`) not yet answered, to the assignees of the open tasks it waits for."""
        edges: dict[str, set[str]] = {}
        for row in sql.WAIT_EDGES.rows(self.raw, {"session": session_id}):
            edges.setdefault(row["waiter"], set()).add(row["assignee"])
        return edges

    def live_children(self, parent_id: str) -> int:
        """Children of an agent that still count against `max_children`: not stopped, and
        their task neither completed nor archived."""
        return int(sql.LIVE_CHILDREN.scalar(self.raw, {"parent": parent_id}))

    def children_created_since(self, parent_id: str, since: str) -> int:
        """How many agents `parent_id` spawned at or after `since` (ISO time)."""
        return int(sql.CHILDREN_SINCE.scalar(self.raw, {"parent": parent_id, "since": since}))

    def record_llm_call(self, thread_id: str, *, model: str, prompt_tokens: int,
                        completion_tokens: int, cost_usd: float, latency_ms: float,
                        error: str | None = None) -> None:
        """One `llm_calls` row (its error's credential values masked), added to the agent's
        totals."""
        now = now_iso()
        error = None if error is None else mask(error, credential_values())
        sql.INSERT_LLM_CALL.run(self.raw, {
            "thread_id": thread_id, "model": model, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "cost_usd": cost_usd,
            "latency_ms": latency_ms, "error": error, "created_at": now})
        self._agents.pop(thread_id, None)
        sql.ADD_USAGE.run(self.raw, {"agent": thread_id, "add_in": prompt_tokens,
                                  "add_out": completion_tokens, "add_cost": cost_usd,
                                  "now": now})

    def reserve_tokens(self, thread_id: str, tokens: int) -> None:
        """Set tokens aside for a model call in flight: they count against budgets until
        `release_tokens` gives them back (in the transaction that records the call)."""
        self._agents.pop(thread_id, None)
        sql.RESERVE_TOKENS.run(self.raw, {"agent": thread_id, "add": tokens})

    def release_tokens(self, thread_id: str, tokens: int) -> None:
        """Give back tokens reserved for a call that is over."""
        self.reserve_tokens(thread_id, -tokens)

    def pending_inbox(self, thread_id: str) -> list[InboxItem]:
        """Unconsumed messages for a thread, high priority first, then oldest."""
        rows = sql.PENDING_INBOX.rows(self.raw, {"thread": thread_id})
        return [_record(InboxItem, row) for row in rows]

    # tasks

    def _new_task_id(self) -> str:
        for _ in range(_TASK_ID_ATTEMPTS):
            task_id = ids.new_task_id()
            if sql.TASK_EXISTS.first(self.raw, {"task": task_id}) is None:
                return task_id
        raise RuntimeError("could not allocate a unique task id")

    def insert_task(
        self, *, session_id: str, created_by: str, title: str, prompt: str,
        description: str | None = None, priority: str = "medium",
        assigned_to: str | None = None, status: str = "pending",
    ) -> Task:
        """Insert one task row as given (rules live in `create_task`)."""
        now, task_id = now_iso(), self._new_task_id()
        title, prompt, description = mask_data([title, prompt, description], credential_values())
        values = {"id": task_id, "title": title, "description": description,
                  "prompt": prompt, "status": status, "priority": priority,
                  "assigned_to": assigned_to, "created_by": created_by,
                  "thread_id": session_id, "created_at": now, "updated_at": now}
        sql.INSERT_TASK.run(self.raw, values)
        self._tasks.add(task_id)
        return _record(Task, {**values, "note_count": 0, "notes": ()})

    def get_task(self, task_id: str, *, session_id: str | None = None,
                 with_notes: bool = False) -> Task:
        """One task; NotFoundError if unknown or of another session than `session_id`."""
        row = sql.TASK_BY_ID.first(self.raw, {"task": task_id})
        if row is None or (session_id is not None and row["thread_id"] != session_id):
            raise NotFoundError(
                f"Unknown task {task_id!r} in this session; list the tasks to see their ids.")
        notes = tuple(self.task_notes(task_id)) if with_notes else ()
        return _record(Task, {**row, "note_count": len(notes), "notes": notes})

    def set_task_fields(self, task_id: str, **values: Any) -> str:
        """Change columns of a task row (text credential-masked); returns its new
        `updated_at`."""
        values = {**mask_data(values, credential_values()), "updated_at": now_iso()}
        update_by_key("tasks", tuple(values)).run(self.raw, {**values, "key_value": task_id})
        self._tasks.add(task_id)
        return str(values["updated_at"])

    def insert_note(self, task_id: str, author: str, content: str) -> Note:
        """Insert one note row (credential values masked)."""
        now, content = now_iso(), mask(content, credential_values())
        note_id = sql.INSERT_NOTE.inserted_id(self.raw, {
            "task_id": task_id, "author": author, "content": content, "created_at": now})
        self._tasks.add(task_id)
        return Note(id=note_id, task_id=task_id, author=author, content=content, created_at=now)

    def count_notes(self, task_id: str) -> int:
        """How many notes a task has."""
        return int(sql.COUNT_NOTES.scalar(self.raw, {"task": task_id}))

    def task_notes(self, task_id: str) -> list[Note]:
        """A task's notes, oldest first."""
        rows = sql.TASK_NOTES.rows(self.raw, {"task": task_id})
        return [_record(Note, row) for row in rows]

    def query_tasks(
        self, session_id: str, *, where: sa.ColumnElement[bool] | None = None,
        include_closed: bool = False, limit: int | None = None,
    ) -> tuple[list[Task], int]:
        """Tasks of a session sorted by priority then newest, with the total before `limit`."""
        tasks, notes = schema.tasks, schema.task_notes
        conditions = [tasks.c.thread_id == session_id]
        if where is not None:
            conditions.append(where)
        if not include_closed:
            conditions.append(tasks.c.status.in_(OPEN_STATUSES))
        total = self._execute(sa.select(sa.func.count()).select_from(tasks)
                              .where(*conditions)).scalar_one()
        note_count = (sa.select(sa.func.count()).where(notes.c.task_id == tasks.c.id)
                      .scalar_subquery().label("note_count"))
        rank = sa.case({"high": 0, "medium": 1, "low": 2}, value=tasks.c.priority)
        statement = (sa.select(tasks, note_count).where(*conditions)
                     .order_by(rank, tasks.c.created_at.desc(), tasks.c.id.desc()).limit(limit))
        return [_record(Task, row) for row in self._execute(statement)], int(total)

    def runnable_anywhere(self, place: Place | None = None) -> list[str]:
        """`runnable_threads` of every session of the database."""
        return _runnable_at(sql.RUNNABLE_ANYWHERE.rows(self.raw, {}), place)

    def count_agents_in(self, root_id: str, statuses: tuple[str, ...]) -> int:
        """How many agents of the session have one of `statuses`."""
        return int(sql.SESSION_AGENTS_IN.scalar(
            self.raw, {"root": root_id, "statuses": json.dumps(list(statuses))}))

    def sessions_with_agents_in(self, statuses: tuple[str, ...]) -> dict[str, int]:
        """Each session that has agents with one of `statuses`, and how many."""
        rows = sql.SESSIONS_WITH_AGENTS_IN.rows(self.raw, {"statuses": json.dumps(list(statuses))})
        return {str(row["root_id"]): int(row["agents"]) for row in rows}
