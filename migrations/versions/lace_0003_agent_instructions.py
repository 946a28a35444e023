"""agent_metadata.instructions: the profile's or spawner's addition to an agent's system prompt.

Revision ID: lace_0003
Revises: lace_0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0003"
down_revision = "lace_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_metadata") as batch_op:
        batch_op.add_column(sa.Column("instructions", sa.Text(), nullable=True))


def downgrade() -> None:
    # Native DROP COLUMN (SQLite 3.35+): a batch copy of the table would break the views on it.
    op.execute("ALTER TABLE agent_metadata DROP COLUMN instructions")
