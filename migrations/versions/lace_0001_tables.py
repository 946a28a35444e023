"""The tables: threads, events, tasks, task_notes, agent_metadata, inbox, llm_calls.

Revision ID: lace_0001
Revises: (none)
Create Date: 2026-11-22 04:22:53.197149
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = 'lace_0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('threads',
    sa.Column('id', sa.Text(), nullable=False),
    sa.Column('parent_id', sa.Text(), nullable=True),
    sa.Column('root_id', sa.Text(), nullable=False),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['threads.id'], name=op.f('fk_threads_parent_id_threads')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_threads'))
    )
    op.create_table('events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('type', sa.Text(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.CheckConstraint("type IN ('system_prompt', 'user_message', 'agent_message', 'tool_call', 'tool_result', 'notification', 'error')", name=op.f('ck_events_type')),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], name=op.f('fk_events_thread_id_threads')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events'))
    )
    op.create_table('llm_calls',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('model', sa.Text(), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), server_default='0', nullable=False),
    sa.Column('completion_tokens', sa.Integer(), server_default='0', nullable=False),
    sa.Column('cost_usd', sa.Float(), server_default='0', nullable=False),
    sa.Column('latency_ms', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], name=op.f('fk_llm_calls_thread_id_threads')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_llm_calls'))
    )
    op.create_table('tasks',
    sa.Column('id', sa.Text(), nullable=False),
    sa.Column('title', sa.Text(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('priority', sa.Text(), nullable=False),
    sa.Column('assigned_to', sa.Text(), nullable=True),
    sa.Column('created_by', sa.Text(), nullable=False),
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Text(), nullable=False),
    sa.CheckConstraint("priority IN ('high', 'medium', 'low')", name=op.f('ck_tasks_priority')),
    sa.CheckConstraint("status IN ('pending', 'in_progress', 'blocked', 'completed', 'archived')", name=op.f('ck_tasks_status')),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], name=op.f('fk_tasks_thread_id_threads')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tasks'))
    )
    op.create_table('agent_metadata',
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('provider', sa.Text(), nullable=False),
    sa.Column('model', sa.Text(), nullable=False),
    sa.Column('profile', sa.Text(), nullable=True),
    sa.Column('type', sa.Text(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('created_for_task', sa.Text(), nullable=True),
    sa.Column('parent_thread_id', sa.Text(), nullable=True),
    sa.Column('current_task', sa.Text(), nullable=True),
    sa.Column('tools', sa.JSON(), nullable=True),
    sa.Column('tokens_in', sa.Integer(), server_default='0', nullable=False),
    sa.Column('tokens_out', sa.Integer(), server_default='0', nullable=False),
    sa.Column('cost_usd', sa.Float(), server_default='0', nullable=False),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Text(), nullable=False),
    sa.CheckConstraint("status IN ('idle', 'running', 'waiting', 'interrupted', 'error', 'stopped')", name=op.f('ck_agent_metadata_status')),
    sa.CheckConstraint("type IN ('persistent', 'ephemeral')", name=op.f('ck_agent_metadata_type')),
    sa.ForeignKeyConstraint(['created_for_task'], ['tasks.id'], name=op.f('fk_agent_metadata_created_for_task_tasks')),
    sa.ForeignKeyConstraint(['current_task'], ['tasks.id'], name=op.f('fk_agent_metadata_current_task_tasks')),
    sa.ForeignKeyConstraint(['parent_thread_id'], ['threads.id'], name=op.f('fk_agent_metadata_parent_thread_id_threads')),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], name=op.f('fk_agent_metadata_thread_id_threads')),
    sa.PrimaryKeyConstraint('thread_id', name=op.f('pk_agent_metadata'))
    )
    op.create_table('inbox',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('sender', sa.Text(), nullable=False),
    sa.Column('task_id', sa.Text(), nullable=True),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('priority', sa.Text(), server_default='normal', nullable=False),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.Column('consumed_at', sa.Text(), nullable=True),
    sa.CheckConstraint("kind IN ('assignment', 'unassigned', 'completion', 'status', 'note', 'message', 'topic', 'reminder', 'resume')", name=op.f('ck_inbox_kind')),
    sa.CheckConstraint("priority IN ('high', 'normal')", name=op.f('ck_inbox_priority')),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], name=op.f('fk_inbox_task_id_tasks')),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], name=op.f('fk_inbox_thread_id_threads')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_inbox'))
    )
    op.create_table('task_notes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('task_id', sa.Text(), nullable=False),
    sa.Column('author', sa.Text(), nullable=False),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], name=op.f('fk_task_notes_task_id_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_notes'))
    )


def downgrade() -> None:
    op.drop_table('task_notes')
    op.drop_table('inbox')
    op.drop_table('agent_metadata')
    op.drop_table('tasks')
    op.drop_table('llm_calls')
    op.drop_table('events')
    op.drop_table('threads')
