"""The tables, named so a person can query them by hand; alembic migrations must match them."""

from __future__ import annotations

import sqlalchemy as sa

from lace.core.agents import AGENT_STATUSES, AGENT_TYPES
from lace.core.notifications import INBOX_KINDS, INBOX_PRIORITIES
from lace.core.records import APPROVAL_STATUSES, EVENT_TYPES
from lace.core.tasks import PRIORITIES, STATUSES
from lace.core.worktrees import WORKTREE_STATUSES

TOKEN_COUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Token counts add up past 2**31 over an agent's life: BIGINT on PostgreSQL (SQLite's INTEGER
is 64-bit already)."""
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)



def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _created() -> sa.Column[str]:
    return sa.Column("created_at", sa.Text, nullable=False)


def _updated() -> sa.Column[str]:
    return sa.Column("updated_at", sa.Text, nullable=False)


threads = sa.Table(
    "threads",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("parent_id", sa.Text, sa.ForeignKey("threads.id"), nullable=True),
    sa.Column("root_id", sa.Text, nullable=False),
    sa.Column("title", sa.Text, nullable=True),
    _created(),
    _updated(),
    sa.Column("trace_parent", sa.Text, nullable=True),
    sa.Index(None, "root_id"),
    sa.Index(None, "parent_id"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    _created(),
    sa.CheckConstraint(_one_of("type", EVENT_TYPES), name="type"),
    sa.Index(None, "thread_id", "id"),
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=True),
    sa.Column("prompt", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("priority", sa.Text, nullable=False),
    sa.Column("assigned_to", sa.Text, nullable=True),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=False),
    _created(),
    _updated(),
    sa.Column("held_assignment", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("batch", sa.Text, nullable=True),
    sa.CheckConstraint(_one_of("status", STATUSES), name="status"),
    sa.CheckConstraint(_one_of("priority", PRIORITIES), name="priority"),
    sa.Index(None, "thread_id", "status"),
    sa.Index(None, "assigned_to"),
    sa.Index(None, "created_by"),
    sa.Index(None, "batch"),
)
TASK_RANK: sa.ColumnClause[int] = sa.literal_column(
    "(CASE priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 WHEN 'low' THEN 2 END)")
"""A task's place on the board by priority, as text: `ix_tasks_open_page` indexes this very
expression, which bound parameters would keep the query planner from matching."""
_OPEN = sa.text("status IN ('pending', 'in_progress', 'blocked')")
EXPRESSION_INDEXES = frozenset({"ix_tasks_open_page", "ix_agent_usage", "ix_inbox_waking"})
sa.Index("ix_tasks_open_page", tasks.c.thread_id, TASK_RANK, tasks.c.created_at.desc(),
         tasks.c.id.desc(), sqlite_where=_OPEN, postgresql_where=_OPEN)

task_notes = sa.Table(
    "task_notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("author", sa.Text, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    _created(),
    sa.Index(None, "task_id"),
)

task_dependencies = sa.Table(
    "task_dependencies",
    metadata,
    sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("blocked_by", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"),
              primary_key=True),
    _created(),
    sa.Column("satisfied_at", sa.Text, nullable=True),
    sa.CheckConstraint("task_id != blocked_by", name="not_self"),
    sa.Index(None, "blocked_by"),
)

agent_metadata = sa.Table(
    "agent_metadata",
    metadata,
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("profile", sa.Text, nullable=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created_for_task", sa.Text, sa.ForeignKey("tasks.id"), nullable=True),
    sa.Column("parent_thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=True),
    sa.Column("current_task", sa.Text, sa.ForeignKey("tasks.id"), nullable=True),
    sa.Column("tools", sa.JSON, nullable=True),
    sa.Column("instructions", sa.Text, nullable=True),
    sa.Column("stop_reason", sa.Text, nullable=True),
    sa.Column("budget", sa.JSON, nullable=True),
    sa.Column("turns", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_holder", sa.Text, nullable=True),
    sa.Column("lease_epoch", sa.Integer, nullable=False, server_default="0"),
    sa.Column("stopped_by_person", sa.Boolean, nullable=False, server_default="0"),
    sa.Column("host", sa.Text, nullable=True),
    sa.Column("workspace", sa.Text, nullable=True),
    sa.Column("tokens_in", TOKEN_COUNT, nullable=False, server_default="0"),
    sa.Column("tokens_out", TOKEN_COUNT, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Float, nullable=False, server_default="0"),
    _created(),
    _updated(),
    sa.Column("inert", sa.Boolean, nullable=False, server_default="0"),
    sa.CheckConstraint(_one_of("type", AGENT_TYPES), name="type"),
    sa.CheckConstraint(_one_of("status", AGENT_STATUSES), name="status"),
    sa.Index(None, "parent_thread_id"),
)
sa.Index("ix_agent_usage", agent_metadata.c.thread_id,  # a subtree's usage: see lace_0018
         *(agent_metadata.c[name] for name in ("tokens_in", "tokens_out", "cost_usd",
                                                "turns")))

inbox = sa.Table(
    "inbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("sender", sa.Text, nullable=False),
    sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id"), nullable=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("priority", sa.Text, nullable=False, server_default="normal"),
    _created(),
    sa.Column("consumed_at", sa.Text, nullable=True),
    sa.Column("wakes", sa.Boolean, nullable=False, server_default="1"),
    sa.Column("held_for", sa.Text, nullable=True),
    sa.CheckConstraint(_one_of("kind", INBOX_KINDS), name="kind"),
    sa.CheckConstraint(_one_of("priority", INBOX_PRIORITIES), name="priority"),
    sa.Index(None, "thread_id", "consumed_at"),
)
_WAKING = sa.and_(inbox.c.consumed_at.is_(None), inbox.c.wakes)
sa.Index("ix_inbox_waking", inbox.c.thread_id,  # the scheduler's look: see lace_0020
         sqlite_where=_WAKING, postgresql_where=_WAKING)

llm_calls = sa.Table(
    "llm_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("prompt_tokens", TOKEN_COUNT, nullable=False, server_default="0"),
    sa.Column("completion_tokens", TOKEN_COUNT, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Float, nullable=True, server_default="0"),
    sa.Column("latency_ms", sa.Float, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    _created(),
    sa.Column("cache_read_tokens", TOKEN_COUNT, nullable=True),
    sa.Column("cache_write_tokens", TOKEN_COUNT, nullable=True),
    sa.Column("reasoning_tokens", TOKEN_COUNT, nullable=True),
    sa.Index(None, "thread_id"),
)

subscriptions = sa.Table(
    "subscriptions",
    metadata,
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    _created(),
    sa.Index(None, "topic"),
)

approvals = sa.Table(
    "approvals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("arguments", sa.JSON, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("decided_by", sa.Text, nullable=True),
    _created(),
    sa.Column("decided_at", sa.Text, nullable=True),
    sa.CheckConstraint(_one_of("status", APPROVAL_STATUSES), name="status"),
    sa.Index(None, "status"),
)

processes = sa.Table(
    "processes",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("started_at", sa.Text, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
)

token_grants = sa.Table(  # see lace_0019
    "token_grants",
    metadata,
    sa.Column("owner", sa.Text, primary_key=True),
    sa.Column("process_id", sa.Text, primary_key=True),
    sa.Column("tokens", TOKEN_COUNT, nullable=False),
)

worktrees = sa.Table(
    "worktrees",
    metadata,
    sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.id"), primary_key=True),
    sa.Column("repository", sa.Text, nullable=False),
    sa.Column("folder", sa.Text, nullable=False),
    sa.Column("branch", sa.Text, nullable=False),
    sa.Column("base_branch", sa.Text, nullable=False),
    sa.Column("base_commit", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("merged_commit", sa.Text, nullable=True),
    sa.Column("merged_head", sa.Text, nullable=True),
    _created(),
    _updated(),
    sa.CheckConstraint(_one_of("status", WORKTREE_STATUSES), name="status"),
    sa.Index(None, "status"),
)
