"""An index that serves a subtree's usage (`UsageRows.subtree`, read before every model call
of a session with a cap): the thread id range of the subtree with the usage columns beside it,
so the sum reads index entries, not the agent rows (with their tools and instructions).
Measured with 1,000 agents on SQLite: 1.36 ms a sum before, 0.60 ms after. On PostgreSQL the
range compares ids byte by byte (`COLLATE "C"`), which no index served before.

Revision ID: lace_0018
Revises: lace_0017
"""

from __future__ import annotations

from alembic import op

revision = "lace_0018"
down_revision = "lace_0017"
branch_labels = None
depends_on = None

USAGE = "tokens_in, tokens_out, tokens_reserved, cost_usd, turns"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX ix_agent_usage ON agent_metadata ((thread_id COLLATE "C")) '
                   f"INCLUDE ({USAGE})")
    else:
        op.execute(f"CREATE INDEX ix_agent_usage ON agent_metadata (thread_id, {USAGE})")


def downgrade() -> None:
    op.execute("DROP INDEX ix_agent_usage")
