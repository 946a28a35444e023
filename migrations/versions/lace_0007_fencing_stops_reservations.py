"""Fencing, stops that stick, and budget reservations.

- `agent_metadata.lease_epoch`: one more each time a process claims the agent for a turn; every
  write of that turn checks the holder and the epoch in its own transaction, so a process that
  lost the lease (paused past it, or cut off) commits nothing for the agent.
- `agent_metadata.stopped_by_person`: a stop made by a person lasts until a person resumes the
  agent; assigning it a task does not.
- `agent_metadata.tokens_reserved`: tokens set aside for the model calls in flight, counted
  against budgets until the call's real usage is recorded.

Revision ID: lace_0007
Revises: lace_0006
"""

from __future__ import annotations

from alembic import op

revision = "lace_0007"
down_revision = "lace_0006"
branch_labels = None
depends_on = None

COLUMNS = (
    ("lease_epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("stopped_by_person", "BOOLEAN NOT NULL DEFAULT {false}"),
    ("tokens_reserved", "INTEGER NOT NULL DEFAULT 0"),
)


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    false = "FALSE" if op.get_bind().dialect.name == "postgresql" else "0"
    for name, definition in COLUMNS:
        op.execute(f"ALTER TABLE agent_metadata ADD COLUMN {name} "
                   f"{definition.format(false=false)}")


def downgrade() -> None:
    for name, _definition in reversed(COLUMNS):
        op.execute(f"ALTER TABLE agent_metadata DROP COLUMN {name}")
