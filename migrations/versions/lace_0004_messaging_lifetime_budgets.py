"""Topic subscriptions; why an agent was stopped; subtree budgets; turns counted per agent.

Revision ID: lace_0004
Revises: lace_0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0004"
down_revision = "lace_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "subscriptions",
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["threads.id"],
                                name=op.f("fk_subscriptions_thread_id_threads")),
        sa.PrimaryKeyConstraint("thread_id", "topic", name=op.f("pk_subscriptions")),
    )
    op.create_index("ix_subscriptions_topic", "subscriptions", ["topic"])
    with op.batch_alter_table("agent_metadata") as batch_op:
        batch_op.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("budget", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("turns", sa.Integer(), server_default="0",
                                      nullable=False))


def downgrade() -> None:
    # Native DROP COLUMN (SQLite 3.35+): a batch copy of the table would break the views on it.
    for column in ("turns", "budget", "stop_reason"):
        op.execute(f"ALTER TABLE agent_metadata DROP COLUMN {column}")
    op.drop_index("ix_subscriptions_topic", table_name="subscriptions")
    op.drop_table("subscriptions")
