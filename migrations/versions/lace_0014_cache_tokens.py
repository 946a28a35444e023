"""The prompt-cache and reasoning parts of each model call, and unknown prices.

- `llm_calls.cache_read_tokens`, `cache_write_tokens`: the part of `prompt_tokens` read from and
  written to the provider's prompt cache (priced at their own rates); `reasoning_tokens`: the
  part of `completion_tokens` spent thinking. NULL: the provider did not say (and every call
  recorded before this revision).
- `llm_calls.cost_usd` may be NULL: a model with no known price has an unknown cost, not $0.

Revision ID: lace_0014
Revises: lace_0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "lace_0014"
down_revision = "lace_0013"
branch_labels = None
depends_on = None

TOKEN_COUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
COLUMNS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def upgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, TOKEN_COUNT, nullable=True))
        batch.alter_column("cost_usd", existing_type=sa.Float, nullable=True,
                           existing_server_default="0")


def downgrade() -> None:
    op.execute("UPDATE llm_calls SET cost_usd = 0 WHERE cost_usd IS NULL")
    with op.batch_alter_table("llm_calls") as batch:
        batch.alter_column("cost_usd", existing_type=sa.Float, nullable=False,
                           existing_server_default="0")
        for column in reversed(COLUMNS):
            batch.drop_column(column)
