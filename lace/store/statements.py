"""The runtime's statements: built with SQLAlchemy from the schema, compiled once (see
`prepared`), and run by the row verbs on the raw connection of the open transaction."""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from lace.core.agents import HELD_STATUSES, NOT_RUNNABLE
from lace.core.tasks import ACTIVE_STATUSES
from lace.store import schema
from lace.store.prepared import Insert, Prepared, binary, insert_into, json_list

_agents, _threads, _events = schema.agent_metadata, schema.threads, schema.events
_inbox, _tasks, _notes = schema.inbox, schema.tasks, schema.task_notes
AGENT_BY_ID = Prepared(sa.select(_agents).where(_agents.c.thread_id == sa.bindparam("agent")))
_WAKING = sa.exists().where(_inbox.c.thread_id == sa.bindparam("agent"),
                            _inbox.c.consumed_at.is_(None), _inbox.c.wakes).label("waking")
"""Whether the agent's thread has a pending inbox row that starts a turn."""
AGENT_WAKING = Prepared(sa.select(_agents, _WAKING)
                        .where(_agents.c.thread_id == sa.bindparam("agent")))
TASK_COLUMN = "task_{}"
"""How a statement that reads an agent row names the columns of a task it reads with it."""
_TASK_COLUMNS = [column.label(TASK_COLUMN.format(column.name)) for column in _tasks.c]
_WORKTREE = sa.exists().where(schema.worktrees.c.thread_id == sa.bindparam("agent"))
"""Whether the agent's thread has its own worktree (given when it is spawned, never taken)."""
_UNTOLD = ~sa.exists().where(_events.c.thread_id == sa.bindparam("agent"),
                             _events.c.type != "error")
"""Whether the agent's thread has no events yet but a stop's `error` rows: before its first
turn (an agent stopped before it, then resumed, still starts with its system prompt)."""
AGENT_TO_CLAIM = Prepared(  # PostgreSQL: the row is locked until the claim commits, or skipped
    sa.select(_agents, _WAKING, _UNTOLD.label("untold"),
              _WORKTREE.label("worktree"), *_TASK_COLUMNS)
    .select_from(_agents.outerjoin(_tasks, sa.and_(
        _tasks.c.id == _agents.c.created_for_task, _UNTOLD)))
    .where(_agents.c.thread_id == sa.bindparam("agent"))
    .with_for_update(of=_agents, skip_locked=True))
"""An agent row to claim, whether its thread has an inbox row that starts a turn, whether it
has its own worktree, whether it has had no turn yet (`untold`), and then the task it was
created for (TASK_COLUMN): one read."""
AGENTS_BY_IDS = Prepared(sa.select(_agents).where(json_list(_agents.c.thread_id, "agents")))
STOPPED_AMONG = Prepared(sa.select(_agents.c.thread_id).where(
    json_list(_agents.c.thread_id, "agents"), _agents.c.status == "stopped"))
THREAD_BY_ID = Prepared(sa.select(_threads).where(_threads.c.id == sa.bindparam("thread")))
SESSION_THREADS = Prepared(sa.select(_threads).where(_threads.c.root_id == sa.bindparam("root"))
                           .order_by(_threads.c.created_at, _threads.c.id))
SESSION_AGENTS = Prepared(
    sa.select(_agents).join(_threads, _threads.c.id == _agents.c.thread_id)
    .where(_threads.c.root_id == sa.bindparam("root")).order_by(_threads.c.created_at))
CUT_OFF_AGENTS = Prepared(  # Leases.cut_off_agents: only the few it names, not every row
    sa.select(_agents.c.thread_id).join(_threads, _threads.c.id == _agents.c.thread_id)
    .where(_threads.c.root_id == sa.bindparam("root"), sa.not_(_agents.c.inert),
           sa.or_(_agents.c.status == "interrupted",
                  sa.and_(sa.or_(*(_agents.c.status == status for status in HELD_STATUSES)),
                          sa.or_(_agents.c.lease_holder.is_(None),
                                 sa.not_(json_list(_agents.c.lease_holder, "live"))))))
    .order_by(_threads.c.created_at))
RUNNABLE = Prepared(
    sa.select(_inbox.c.thread_id, _agents.c.host, _agents.c.workspace).distinct()
    .join(_agents, _agents.c.thread_id == _inbox.c.thread_id)
    .join(_threads, _threads.c.id == _inbox.c.thread_id)
    .where(_inbox.c.consumed_at.is_(None), _inbox.c.wakes, sa.not_(_agents.c.inert),
           _threads.c.root_id == sa.bindparam("root"),
           *(_agents.c.status != status for status in NOT_RUNNABLE)))
_edges = schema.task_dependencies


def _free(tasks: sa.FromClause) -> sa.ColumnElement[bool]:
    """A task of `tasks` that is pending or in progress and waits for no open blocker."""
    return sa.and_(sa.or_(*(tasks.c.status == status for status in ACTIVE_STATUSES)),
                   ~sa.exists().where(_edges.c.task_id == tasks.c.id,
                                      _edges.c.satisfied_at.is_(None)))


_ACTIVE_ASSIGNED = sa.select(sa.func.count()).select_from(_tasks).where(
    _tasks.c.assigned_to == sa.bindparam("agent"), _free(_tasks))
_CURRENT_TASK_STATUS = (sa.select(_tasks.c.status)
                        .where(_tasks.c.id == _agents.c.current_task).scalar_subquery())
AGENT_WITH_OPEN_WORK = Prepared(sa.select(_agents, sa.case((
    sa.and_(_agents.c.type == "persistent", _agents.c.created_for_task.is_not(None),
            _agents.c.current_task != ""),
    sa.case((_CURRENT_TASK_STATUS == "completed", _ACTIVE_ASSIGNED.scalar_subquery())))
).label("open_work")).where(_agents.c.thread_id == sa.bindparam("agent")))
"""An agent row and, for a `new:` helper whose current task is completed, how many tasks
assigned to it are pending or in progress and wait for none (else NULL): one read, the tasks
read only when the count is wanted (nested CASEs: a branch is evaluated only when its
condition holds)."""
AGENT_WITH_CURRENT_TASK = Prepared(
    sa.select(_agents, *_TASK_COLUMNS)
    .select_from(_agents.outerjoin(_tasks, sa.and_(
        _agents.c.created_for_task.is_not(None), _tasks.c.id == _agents.c.current_task)))
    .where(_agents.c.thread_id == sa.bindparam("agent")))
"""An agent row and, for an agent created for a task, the row of its current task (columns
named TASK_COLUMN; NULL when there is none): one read."""
FREE_BATCH_TASK = Prepared(sa.select(_tasks.c.id).where(
    _tasks.c.batch == sa.bindparam("batch"), _free(_tasks)).limit(1))
LEASE_LOST = "lace: lease lost"
"""The text LEASE_STILL_HELD fails to read as a number (invalid_text_representation, 22P02)."""
_LEASE_HELD = sa.exists().where(_agents.c.thread_id == sa.bindparam("agent"),
                                _agents.c.lease_holder == sa.bindparam("holder"),
                                _agents.c.lease_epoch == sa.bindparam("epoch"))
LEASE_STILL_HELD = Prepared(sa.select(sa.cast(
    sa.case((_LEASE_HELD, sa.null()), else_=sa.literal(LEASE_LOST)), sa.Integer)))
"""PostgreSQL: an error unless the agent's lease is still (holder, epoch), and nothing to read
otherwise, so it rides with the next statement (`Leases.holding`). The condition is not a
constant, so the server casts only when it is false."""
COUNT_TURN = Prepared(_agents.update().where(_agents.c.thread_id == sa.bindparam("agent"))
                      .values(turns=_agents.c.turns + 1))
HIGHEST_CHILD = Prepared(sa.select(sa.func.coalesce(sa.func.max(sa.cast(
    sa.func.substr(_threads.c.id, sa.bindparam("suffix_at")), sa.Integer)), 0))
    .where(_threads.c.parent_id == sa.bindparam("parent")))
INSERT_THREAD = insert_into("threads", ("id", "parent_id", "root_id", "title", "created_at",
                                        "updated_at", "trace_parent"))
INSERT_EVENT = insert_into("events", ("thread_id", "type", "data", "created_at"))


@lru_cache(maxsize=16)
def insert_events(count: int) -> Prepared:
    """`count` events in one INSERT that returns their ids (`<column>_<n>` for the n-th row):
    on PostgreSQL one round trip, not one per event."""
    rows = [{column: sa.bindparam(f"{column}_{index}", type_=_events.c[column].type)
             for column in ("thread_id", "type", "data", "created_at")}
            for index in range(count)]
    return Prepared(_events.insert().values(rows).returning(_events.c.id))


TOUCH_THREAD = Prepared(_threads.update().where(_threads.c.id == sa.bindparam("thread"))
                        .values(updated_at=sa.bindparam("now")))
SET_STATUS = Prepared(_agents.update().where(
    _agents.c.thread_id == sa.bindparam("agent"), _agents.c.status != "stopped").values(
        status=sa.bindparam("new_status"), updated_at=sa.bindparam("now")))
EVENTS_AFTER = Prepared(sa.select(_events).where(
    _events.c.thread_id == sa.bindparam("thread"), _events.c.id > sa.bindparam("after"))
    .order_by(_events.c.id))
_INBOX_COLUMNS = ("thread_id", "sender", "task_id", "kind", "text", "priority", "wakes",
                  "held_for", "created_at")
INBOX_LOCKS = 0x6C616365
"""PostgreSQL: the first key of the advisory lock each inbox row takes for its recipient
(the second is the hash of the thread id) until its transaction ends, so that one inbox's rows
get their ids in the order they commit, whichever processes write them at once."""
_INBOX_VALUES = ", ".join(f"CAST(:{name} AS {_inbox.c[name].type.compile()})"
                         for name in _INBOX_COLUMNS)
INSERT_INBOX = Insert(schema.inbox, _INBOX_COLUMNS, postgresql=sa.text(
    f"INSERT INTO inbox ({', '.join(_INBOX_COLUMNS)}) SELECT {_INBOX_VALUES} "
    f"FROM (SELECT pg_advisory_xact_lock({INBOX_LOCKS}, hashtext(:thread_id))) AS in_order "
    "RETURNING id"))
PENDING_INBOX = Prepared(sa.select(_inbox).where(
    _inbox.c.thread_id == sa.bindparam("thread"), _inbox.c.consumed_at.is_(None),
    _inbox.c.held_for.is_(None))
    .order_by(sa.case((_inbox.c.priority == "high", 0), else_=1), _inbox.c.id))
CONSUME_INBOX = Prepared(_inbox.update().where(
    _inbox.c.thread_id == sa.bindparam("thread"), _inbox.c.consumed_at.is_(None),
    _inbox.c.held_for.is_(None)).values(
        consumed_at=sa.bindparam("now")))
LIVE_CHILDREN = Prepared(
    sa.select(sa.func.count()).select_from(_agents)
    .outerjoin(_tasks, _tasks.c.id == _agents.c.created_for_task)
    .where(_agents.c.parent_thread_id == sa.bindparam("parent"), _agents.c.status != "stopped",
           sa.or_(_tasks.c.status.is_(None),
                  sa.and_(_tasks.c.status != "completed", _tasks.c.status != "archived"))))
CHILDREN_SINCE = Prepared(sa.select(sa.func.count()).select_from(_agents).where(
    _agents.c.parent_thread_id == sa.bindparam("parent"),
    _agents.c.created_at >= sa.bindparam("since")))
INSERT_LLM_CALL = insert_into("llm_calls", (
    "thread_id", "model", "prompt_tokens", "completion_tokens", "cost_usd", "latency_ms",
    "error", "created_at", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"))
ADD_USAGE = Prepared(_agents.update().where(  # bind names must not be column names
    _agents.c.thread_id == sa.bindparam("agent")).values(
        tokens_in=_agents.c.tokens_in + sa.bindparam("add_in"),
        tokens_out=_agents.c.tokens_out + sa.bindparam("add_out"),
        cost_usd=_agents.c.cost_usd + sa.bindparam("add_cost"),
        updated_at=sa.bindparam("now")))
_WAIT_EDGES = """
    SELECT call.thread_id AS waiter, task.assigned_to AS assignee
    FROM events AS call
    JOIN {elements} AS waited {on}
    JOIN tasks AS task ON task.id = waited.value
    WHERE task.thread_id = :session AND task.status IN ('pending', 'in_progress')
      AND task.assigned_to IS NOT NULL AND call.type = 'tool_call'
      AND call.thread_id IN (SELECT value FROM {waiters})
      AND {waiting_for} IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM events AS answer
                      WHERE answer.thread_id = call.thread_id AND answer.type = 'tool_result'
                        AND {answer_call_id} = {call_id})"""
WAIT_EDGES = Prepared(
    sa.text(_WAIT_EDGES.format(
        elements="json_each(json_extract(call.data, '$.waiting_for'))", on="",
        waiters="json_each(:waiters)",
        waiting_for="json_extract(call.data, '$.waiting_for')",
        answer_call_id="json_extract(answer.data, '$.call_id')",
        call_id="json_extract(call.data, '$.call_id')"))
    .columns(waiter=sa.Text, assignee=sa.Text),
    postgresql=sa.text(_WAIT_EDGES.format(
        elements="LATERAL json_array_elements_text(CASE WHEN json_typeof(call.data -> "
                 "'waiting_for') = 'array' THEN call.data -> 'waiting_for' END)", on="ON TRUE",
        waiters="json_array_elements_text(CAST(:waiters AS JSON))",
        waiting_for="call.data -> 'waiting_for'",
        answer_call_id="answer.data ->> 'call_id'", call_id="call.data ->> 'call_id'"))
    .columns(waiter=sa.Text, assignee=sa.Text))
OPEN_BLOCKER_IDS = Prepared(sa.select(_edges.c.blocked_by).where(
    _edges.c.task_id == sa.bindparam("task"), _edges.c.satisfied_at.is_(None)))
WAITING_ON = Prepared(sa.select(_edges.c.task_id).where(
    _edges.c.blocked_by == sa.bindparam("blocker"), _edges.c.satisfied_at.is_(None)))
TASK_BY_ID = Prepared(sa.select(_tasks).where(_tasks.c.id == sa.bindparam("task")))
_others = _tasks.alias("others")
_NOTES_OF_TASK = (sa.select(sa.func.count()).where(_notes.c.task_id == sa.bindparam("task"))
                  .scalar_subquery())
TASK_COUNTING_NOTES = Prepared(sa.select(_tasks, _NOTES_OF_TASK.label("note_rows"))
                               .where(_tasks.c.id == sa.bindparam("task")))
"""A task row and how many notes it has (`TaskBoard.add_note`): one read."""
TASK_TO_COMPLETE = Prepared(sa.select(
    _tasks, _NOTES_OF_TASK.label("note_rows"),
    sa.exists().where(_edges.c.task_id == sa.bindparam("task"),
                      _edges.c.satisfied_at.is_(None)).label("waits"),
    sa.exists().where(_edges.c.blocked_by == sa.bindparam("task"),
                      _edges.c.satisfied_at.is_(None)).label("awaited"),
    sa.case((_tasks.c.batch.is_not(None), sa.exists().where(
        _others.c.batch == _tasks.c.batch, _others.c.id != _tasks.c.id, _free(_others)),
    )).label("batch_runs"))
    .where(_tasks.c.id == sa.bindparam("task")))
"""A task row, how many notes it has, whether it waits for an open blocker, whether a task
waits for it, and for a task of a batch whether another task of it is free (FREE_BATCH_TASK
once this one is completed) (`TaskBoard.complete_task`): one read where there were four."""
TASKS_BY_IDS = Prepared(sa.select(_tasks).where(json_list(_tasks.c.id, "tasks")))
COUNT_ACTIVE_AMONG = Prepared(sa.select(sa.func.count()).select_from(_tasks).where(
    json_list(_tasks.c.id, "tasks"), sa.or_(*(_tasks.c.status == status
                                              for status in ACTIVE_STATUSES))))
TASK_EXISTS = Prepared(sa.select(_tasks.c.id).where(_tasks.c.id == sa.bindparam("task")))
INSERT_TASK = insert_into("tasks", (
    "id", "title", "description", "prompt", "status", "priority", "assigned_to", "created_by",
    "thread_id", "created_at", "updated_at", "batch"))
INSERT_NOTE = insert_into("task_notes", ("task_id", "author", "content", "created_at"))
COUNT_NOTES = Prepared(sa.select(sa.func.count()).select_from(_notes).where(
    _notes.c.task_id == sa.bindparam("task")))
TASK_NOTES = Prepared(sa.select(_notes).where(_notes.c.task_id == sa.bindparam("task"))
                      .order_by(_notes.c.id))
SUBTREE_USAGE = Prepared(sa.select(
    sa.func.coalesce(sa.func.sum(_agents.c.tokens_in + _agents.c.tokens_out), 0).label("tokens"),
    sa.func.coalesce(sa.func.sum(_agents.c.cost_usd), 0.0).label("cost_usd"),
    sa.func.coalesce(sa.func.sum(_agents.c.turns), 0).label("turns"))
    .where(sa.or_(_agents.c.thread_id == sa.bindparam("me"),  # the thread_id index serves it
                  sa.and_(binary(_agents.c.thread_id) > sa.bindparam("after"),
                          binary(_agents.c.thread_id) < sa.bindparam("before")))))

RUNNABLE_ANYWHERE = Prepared(  # RUNNABLE without the session: `lace worker` serving them all
    sa.select(_inbox.c.thread_id, _agents.c.host, _agents.c.workspace).distinct()
    .join(_agents, _agents.c.thread_id == _inbox.c.thread_id)
    .where(_inbox.c.consumed_at.is_(None), _inbox.c.wakes, sa.not_(_agents.c.inert),
           *(_agents.c.status != status for status in NOT_RUNNABLE)))
SESSION_AGENTS_IN = Prepared(
    sa.select(sa.func.count()).select_from(_agents)
    .join(_threads, _threads.c.id == _agents.c.thread_id)
    .where(_threads.c.root_id == sa.bindparam("root"), json_list(_agents.c.status, "statuses")))
SESSIONS_WITH_AGENTS_IN = Prepared(
    sa.select(_threads.c.root_id, sa.func.count().label("agents")).select_from(_agents)
    .join(_threads, _threads.c.id == _agents.c.thread_id)
    .where(json_list(_agents.c.status, "statuses")).group_by(_threads.c.root_id))
