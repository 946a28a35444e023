"""The trace context of each thread (docs/tracing.md).

- `threads.trace_parent`: the W3C `traceparent` its agent's turns are traced under: the span
  of the tool call that spawned it (a helper), or the session's first traced turn (a root), so
  a process that runs the agent later, on another host too, continues the session's one trace.

Revision ID: lace_0015
Revises: lace_0014
"""

from __future__ import annotations

from alembic import op

revision = "lace_0015"
down_revision = "lace_0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE threads ADD COLUMN trace_parent TEXT")


def downgrade() -> None:
    op.execute("ALTER TABLE threads DROP COLUMN trace_parent")
