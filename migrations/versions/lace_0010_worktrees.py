"""worktrees: one git worktree per writing helper, on branch `lace/<thread id>`, with the branch
it merges back into, the commit it started from, and whether it was merged (the target's new
commit, and the branch head that was merged) or pruned.

Revision ID: lace_0010
Revises: lace_0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0010"
down_revision = "lace_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worktrees",
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("repository", sa.Text(), nullable=False),
        sa.Column("folder", sa.Text(), nullable=False),
        sa.Column("branch", sa.Text(), nullable=False),
        sa.Column("base_branch", sa.Text(), nullable=False),
        sa.Column("base_commit", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("merged_commit", sa.Text(), nullable=True),
        sa.Column("merged_head", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.CheckConstraint("status IN ('active', 'merged', 'pruned')",
                           name=op.f("ck_worktrees_status")),
        sa.ForeignKeyConstraint(["thread_id"], ["threads.id"],
                                name=op.f("fk_worktrees_thread_id_threads")),
        sa.PrimaryKeyConstraint("thread_id", name=op.f("pk_worktrees")),
    )
    op.create_index("ix_worktrees_status", "worktrees", ["status"])


def downgrade() -> None:
    op.drop_index("ix_worktrees_status", table_name="worktrees")
    op.drop_table("worktrees")
