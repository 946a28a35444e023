"""Imported agents are inert until a person resumes them.

- `agent_metadata.inert`: the agent came in through `lace import` and no person has resumed its
  session yet (`lace run --continue`, the app); no process runs a turn of it meanwhile, so an
  export edited to plant work runs nothing by being imported.

Revision ID: lace_0013
Revises: lace_0012
"""

from __future__ import annotations

from alembic import op

revision = "lace_0013"
down_revision = "lace_0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Native ADD COLUMN: a batch copy of the table would break the views on it.
    false = "FALSE" if op.get_bind().dialect.name == "postgresql" else "0"
    op.execute(f"ALTER TABLE agent_metadata ADD COLUMN inert BOOLEAN NOT NULL DEFAULT {false}")


def downgrade() -> None:
    op.execute("ALTER TABLE agent_metadata DROP COLUMN inert")
