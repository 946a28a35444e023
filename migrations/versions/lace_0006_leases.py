"""Leases: each lace process has a row with a heartbeat, and an agent that runs names its holder.

A thread is run by one process at a time. `begin_turn` writes the process id into
`agent_metadata.lease_holder`; the process renews `processes.heartbeat_at` and `expires_at`
(heartbeat plus its own lease timeout) every few seconds. A starting process treats a `running`
agent as cut off only when its holder's lease expired or its pid is gone, so it never interrupts
another live process. No index: a session's agents are
found through `threads.root_id`, and `processes` holds one row per live (or crashed) process.

Revision ID: lace_0006
Revises: lace_0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0006"
down_revision = "lace_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "processes",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Text(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processes")),
    )
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE agent_metadata ADD COLUMN lease_holder TEXT")


def downgrade() -> None:
    op.execute("ALTER TABLE agent_metadata DROP COLUMN lease_holder")
    op.drop_table("processes")
