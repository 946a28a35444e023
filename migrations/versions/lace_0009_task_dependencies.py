"""Task dependencies: a plan as a graph.

- `task_dependencies(task_id, blocked_by)`: task_id waits for blocked_by. `satisfied_at` is set
  in the transaction that completes the blocker (an edge once satisfied stays so, even if the
  blocker is archived later); an edge still open makes its task wait.
- `tasks.held_assignment`: the assignment of a waiting task, applied when its last blocker is
  completed: `{"agent": <plan>}` spawns that agent then, `{"thread": <id>}` tells that agent
  then.
- The `task_board` view gains `waits_for`: the ids of the open blockers, oldest first.

Revision ID: lace_0009
Revises: lace_0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0009"
down_revision = "lace_0008"
branch_labels = None
depends_on = None

BOARD_COLUMNS = """t.id, t.thread_id AS session_id, t.status, t.priority, t.title, t.assigned_to,
       COALESCE(assignee.name, t.assigned_to) AS assignee_name, t.created_by,
       COALESCE(creator.name, t.created_by) AS creator_name,
       (SELECT COUNT(*) FROM task_notes n WHERE n.task_id = t.id) AS note_count,
       t.created_at, t.updated_at"""
BOARD_JOINS = """FROM tasks t
LEFT JOIN agent_metadata assignee ON assignee.thread_id = t.assigned_to
LEFT JOIN agent_metadata creator ON creator.thread_id = t.created_by"""
WAITS_FOR = """(SELECT {group_concat}(open.id, ', ') FROM (
            SELECT b.id FROM task_dependencies d JOIN tasks b ON b.id = d.blocked_by
            WHERE d.task_id = t.id AND d.satisfied_at IS NULL ORDER BY b.created_at, b.id
        ) AS open) AS waits_for"""


def upgrade() -> None:
    op.create_table(
        "task_dependencies",
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("blocked_by", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("satisfied_at", sa.Text(), nullable=True),
        sa.CheckConstraint("task_id != blocked_by", name=op.f("ck_task_dependencies_not_self")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE",
                                name=op.f("fk_task_dependencies_task_id_tasks")),
        sa.ForeignKeyConstraint(["blocked_by"], ["tasks.id"], ondelete="CASCADE",
                                name=op.f("fk_task_dependencies_blocked_by_tasks")),
        sa.PrimaryKeyConstraint("task_id", "blocked_by", name=op.f("pk_task_dependencies")),
    )
    op.create_index("ix_task_dependencies_blocked_by", "task_dependencies", ["blocked_by"])
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE tasks ADD COLUMN held_assignment JSON")
    op.execute("DROP VIEW task_board")
    postgres = op.get_bind().dialect.name == "postgresql"
    waits_for = WAITS_FOR.format(group_concat="string_agg" if postgres else "group_concat")
    op.execute(f"CREATE VIEW task_board AS\nSELECT {BOARD_COLUMNS},\n       {waits_for}\n"
               f"{BOARD_JOINS}")


def downgrade() -> None:
    op.execute("DROP VIEW task_board")
    op.execute(f"CREATE VIEW task_board AS\nSELECT {BOARD_COLUMNS}\n{BOARD_JOINS}")
    op.execute("ALTER TABLE tasks DROP COLUMN held_assignment")
    op.drop_index("ix_task_dependencies_blocked_by", table_name="task_dependencies")
    op.drop_table("task_dependencies")
