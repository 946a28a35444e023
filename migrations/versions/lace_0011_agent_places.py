"""Where an agent may run: the host and workspace folder of the process that started its
session, for agents whose tools act on a workspace (files, bash, MCP servers of the folder).
A worker claims such an agent only on that host and for that folder; an agent with only board
tools (`host` and `workspace` NULL) runs anywhere.

Revision ID: lace_0011
Revises: lace_0010
"""

from __future__ import annotations

from alembic import op

revision = "lace_0011"
down_revision = "lace_0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE agent_metadata ADD COLUMN host TEXT")
    op.execute("ALTER TABLE agent_metadata ADD COLUMN workspace TEXT")


def downgrade() -> None:
    op.execute("ALTER TABLE agent_metadata DROP COLUMN workspace")
    op.execute("ALTER TABLE agent_metadata DROP COLUMN host")
