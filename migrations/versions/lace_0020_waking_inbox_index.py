"""An index of the inbox rows that wait to start a turn (pending, `wakes`): the scheduler's look
(`RUNNABLE`, `RUNNABLE_ANYWHERE`) reads those few, not every thread of the session. On
PostgreSQL at 1,000 helpers the look read all 1,001 threads of the session, an agent row and
an inbox probe for each, to return none (about 3 ms, a hundred times a fan-out).

Revision ID: lace_0020
Revises: lace_0019
"""

from __future__ import annotations

from alembic import op

revision = "lace_0020"
down_revision = "lace_0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    wakes = "wakes" if op.get_bind().dialect.name == "postgresql" else "wakes = 1"
    op.execute(f"CREATE INDEX ix_inbox_waking ON inbox (thread_id) "
               f"WHERE consumed_at IS NULL AND {wakes}")


def downgrade() -> None:
    op.execute("DROP INDEX ix_inbox_waking")
