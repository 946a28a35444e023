"""Token counts as BIGINT on PostgreSQL: an agent's running totals (and a provider's reported
usage) pass 2**31 - 1, where INTEGER ends and every later write of the agent failed. SQLite's
INTEGER is 64-bit already: nothing changes there. The `agents` view reads two of the columns,
so it is dropped and made again around the change.

Revision ID: lace_0012
Revises: lace_0011
"""

from __future__ import annotations

from alembic import op

revision = "lace_0012"
down_revision = "lace_0011"
branch_labels = None
depends_on = None

COLUMNS = (("agent_metadata", "tokens_reserved"), ("agent_metadata", "tokens_in"),
           ("agent_metadata", "tokens_out"), ("llm_calls", "prompt_tokens"),
           ("llm_calls", "completion_tokens"))
AGENTS_VIEW = """
CREATE VIEW agents AS
SELECT a.thread_id, a.name, a.provider || '/' || a.model AS model, a.profile, a.type, a.status,
       t.parent_id, t.root_id, t.title AS thread_title, a.current_task,
       ct.title AS current_task_title, a.created_for_task, a.tokens_in, a.tokens_out, a.cost_usd,
       a.created_at, a.updated_at
FROM agent_metadata a
JOIN threads t ON t.id = a.thread_id
LEFT JOIN tasks ct ON ct.id = a.current_task
"""
"""As lace_0002 made it."""


def _retype(sql_type: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP VIEW agents")
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {sql_type}")
    op.execute(AGENTS_VIEW)


def upgrade() -> None:
    _retype("BIGINT")


def downgrade() -> None:
    _retype("INTEGER")
