"""Tokens set aside per process, not per call: `token_grants` holds, for each capped subtree
(`owner`) and each lace process, the tokens that process may still spend on model calls there
without asking again. A model call takes its share from its process's grant in memory, and only
a call that finds too little writes (`lace.store.budgets.grant_before_call`); before, every model
call under a token cap wrote its own reservation (`agent_metadata.tokens_reserved`, gone) and
waited for that write, and on PostgreSQL those writes, all reading the session's usage, ended in
serialization failures whenever two processes made them at once. A process's grant counts while
its `processes` row is live, so a process that dies gives its grant back when its lease expires.

The usage index loses the reserved column with it.

Revision ID: lace_0019
Revises: lace_0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0019"
down_revision = "lace_0018"
branch_labels = None
depends_on = None

TOKENS = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _usage_index(columns: str) -> None:
    op.execute("DROP INDEX ix_agent_usage")
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX ix_agent_usage ON agent_metadata ((thread_id COLLATE "C")) '
                   f"INCLUDE ({columns})")
    else:
        op.execute(f"CREATE INDEX ix_agent_usage ON agent_metadata (thread_id, {columns})")


def upgrade() -> None:
    op.create_table(
        "token_grants",
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("process_id", sa.Text(), nullable=False),
        sa.Column("tokens", TOKENS, nullable=False),
        sa.PrimaryKeyConstraint("owner", "process_id", name=op.f("pk_token_grants")),
    )
    _usage_index("tokens_in, tokens_out, cost_usd, turns")
    op.execute("ALTER TABLE agent_metadata DROP COLUMN tokens_reserved")


def downgrade() -> None:
    op.execute(f"ALTER TABLE agent_metadata ADD COLUMN tokens_reserved "
               f"{'BIGINT' if op.get_bind().dialect.name == 'postgresql' else 'INTEGER'} "
               "NOT NULL DEFAULT 0")
    _usage_index("tokens_in, tokens_out, tokens_reserved, cost_usd, turns")
    op.drop_table("token_grants")
