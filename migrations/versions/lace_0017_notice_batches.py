"""One wake per fan-out: the tasks an agent creates in one model reply form a batch.

- `tasks.batch`: the batch a task belongs to (NULL: it notifies its creator on its own).
- `inbox.held_for`: a notice held for a batch still running; it is delivered inside the batch's
  one notice when the last of its tasks settles (NULL: an ordinary row).

Revision ID: lace_0017
Revises: lace_0016
"""

from __future__ import annotations

from alembic import op

revision = "lace_0017"
down_revision = "lace_0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE tasks ADD COLUMN batch TEXT")
    op.execute("ALTER TABLE inbox ADD COLUMN held_for TEXT")
    op.create_index("ix_tasks_batch", "tasks", ["batch"])


def downgrade() -> None:
    op.drop_index("ix_tasks_batch", "tasks")
    op.execute("ALTER TABLE inbox DROP COLUMN held_for")
    op.execute("ALTER TABLE tasks DROP COLUMN batch")
