"""An index that serves the first page of a session's open tasks (`lace tasks`, the app's board).

- `ix_tasks_open_page`: a session's pending, in-progress and blocked tasks in the order the board
  shows them (priority, then newest), so a page of 50 reads 50 index entries instead of sorting
  every open task of the session (28 ms for 7,000 on PostgreSQL, measured by
  `benchmarks/tasks_scale.py`). Its expressions must stay those of `TaskRows.query`.

Revision ID: lace_0016
Revises: lace_0015
"""

from __future__ import annotations

from alembic import op

revision = "lace_0016"
down_revision = "lace_0015"
branch_labels = None
depends_on = None

RANK = "(CASE priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 WHEN 'low' THEN 2 END)"


def upgrade() -> None:
    op.execute(f"CREATE INDEX ix_tasks_open_page ON tasks (thread_id, {RANK}, created_at DESC, "
               "id DESC) WHERE status IN ('pending', 'in_progress', 'blocked')")


def downgrade() -> None:
    op.execute("DROP INDEX ix_tasks_open_page")
