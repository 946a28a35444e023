"""Progress waits for the next turn.

- `inbox.wakes`: whether the row starts a turn of its own. An assignee's notes and status
  changes reach its creator with the creator's next turn (in one block) instead of waking it:
  a fan-out's waves of "started on ..." no longer cost the coordinator a model call each.

Revision ID: lace_0008
Revises: lace_0007
"""

from __future__ import annotations

from alembic import op

revision = "lace_0008"
down_revision = "lace_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    true = "TRUE" if op.get_bind().dialect.name == "postgresql" else "1"
    op.execute(f"ALTER TABLE inbox ADD COLUMN wakes BOOLEAN NOT NULL DEFAULT {true}")


def downgrade() -> None:
    op.execute("ALTER TABLE inbox DROP COLUMN wakes")
