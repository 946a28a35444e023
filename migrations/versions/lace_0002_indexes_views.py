"""Indexes for the common lookups, and the `agents` and `task_board` views for reading by hand.

Revision ID: lace_0002
Revises: lace_0001
"""

from __future__ import annotations

from alembic import op

revision = "lace_0002"
down_revision = "lace_0001"
branch_labels = None
depends_on = None

AGENTS_VIEW = """
CREATE VIEW agents AS
SELECT a.thread_id, a.name, a.provider || '/' || a.model AS model, a.profile, a.type, a.status,
       t.parent_id, t.root_id, t.title AS thread_title, a.current_task,
       ct.title AS current_task_title, a.created_for_task, a.tokens_in, a.tokens_out, a.cost_usd,
       a.created_at, a.updated_at
FROM agent_metadata a
JOIN threads t ON t.id = a.thread_id
LEFT JOIN tasks ct ON ct.id = a.current_task
"""

TASK_BOARD_VIEW = """
CREATE VIEW task_board AS
SELECT t.id, t.thread_id AS session_id, t.status, t.priority, t.title, t.assigned_to,
       COALESCE(assignee.name, t.assigned_to) AS assignee_name, t.created_by,
       COALESCE(creator.name, t.created_by) AS creator_name,
       (SELECT COUNT(*) FROM task_notes n WHERE n.task_id = t.id) AS note_count,
       t.created_at, t.updated_at
FROM tasks t
LEFT JOIN agent_metadata assignee ON assignee.thread_id = t.assigned_to
LEFT JOIN agent_metadata creator ON creator.thread_id = t.created_by
"""


def upgrade() -> None:
    op.create_index('ix_threads_parent_id', 'threads', ['parent_id'])
    op.create_index('ix_threads_root_id', 'threads', ['root_id'])
    op.create_index('ix_events_thread_id_id', 'events', ['thread_id', 'id'])
    op.create_index('ix_llm_calls_thread_id', 'llm_calls', ['thread_id'])
    op.create_index('ix_tasks_assigned_to', 'tasks', ['assigned_to'])
    op.create_index('ix_tasks_created_by', 'tasks', ['created_by'])
    op.create_index('ix_tasks_thread_id_status', 'tasks', ['thread_id', 'status'])
    op.create_index('ix_agent_metadata_parent_thread_id', 'agent_metadata', ['parent_thread_id'])
    op.create_index('ix_inbox_thread_id_consumed_at', 'inbox', ['thread_id', 'consumed_at'])
    op.create_index('ix_task_notes_task_id', 'task_notes', ['task_id'])
    op.execute(AGENTS_VIEW)
    op.execute(TASK_BOARD_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW task_board")
    op.execute("DROP VIEW agents")
    op.drop_index('ix_task_notes_task_id', table_name='task_notes')
    op.drop_index('ix_inbox_thread_id_consumed_at', table_name='inbox')
    op.drop_index('ix_agent_metadata_parent_thread_id', table_name='agent_metadata')
    op.drop_index('ix_tasks_thread_id_status', table_name='tasks')
    op.drop_index('ix_tasks_created_by', table_name='tasks')
    op.drop_index('ix_tasks_assigned_to', table_name='tasks')
    op.drop_index('ix_llm_calls_thread_id', table_name='llm_calls')
    op.drop_index('ix_events_thread_id_id', table_name='events')
    op.drop_index('ix_threads_root_id', table_name='threads')
    op.drop_index('ix_threads_parent_id', table_name='threads')
