"""approvals: requests to run a tool whose policy is `ask`, and the person's decisions.

Revision ID: lace_0005
Revises: lace_0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0005"
down_revision = "lace_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("decided_at", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'approved', 'approved_session', 'denied')",
                           name=op.f("ck_approvals_status")),
        sa.ForeignKeyConstraint(["thread_id"], ["threads.id"],
                                name=op.f("fk_approvals_thread_id_threads")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
    )
    op.create_index("ix_approvals_status", "approvals", ["status"])


def downgrade() -> None:
    op.drop_index("ix_approvals_status", table_name="approvals")
    op.drop_table("approvals")
