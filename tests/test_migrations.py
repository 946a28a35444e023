"""The alembic migrations: empty to head, models match, data survives later revisions."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from lace.store.db import HEAD_REVISION, alembic_config, create_engine, resolve_db_url, upgrade
from tests import postgres

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_head_revision_constant_matches_the_scripts() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [HEAD_REVISION]


def test_empty_database_upgrades_to_head_and_matches_the_models(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    upgrade(url)
    engine = create_engine(url, for_migrations=True)
    with engine.connect() as connection:
        command.check(alembic_config(connection))  # raises if models and migrations differ
    engine.dispose()
    with sqlite3.connect(db_path) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"threads", "events", "tasks", "task_notes", "agent_metadata", "inbox", "llm_calls",
            "agents", "task_board", "ix_events_thread_id_id", "task_dependencies",
            "ix_task_dependencies_blocked_by"} <= names


def test_data_written_at_the_first_revision_survives_the_upgrade(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    upgrade(url, "lace_0001")
    with sqlite3.connect(db_path) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        assert "task_board" not in names
        connection.executescript("""
            INSERT INTO threads VALUES ('lace_20260101_aaaaaa', NULL, 'lace_20260101_aaaaaa',
                                        'old', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
            INSERT INTO agent_metadata (thread_id, name, provider, model, type, status,
                                        created_at, updated_at)
                VALUES ('lace_20260101_aaaaaa', 'root', 'demo', 'm', 'persistent', 'idle',
                        '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
            INSERT INTO tasks VALUES ('task_20260101_abcdef', 'Old task', NULL, 'p', 'pending',
                                      'high', 'human', 'lace_20260101_aaaaaa',
                                      'lace_20260101_aaaaaa', '2026-01-01T00:00:00Z',
                                      '2026-01-01T00:00:00Z');
            INSERT INTO task_notes (task_id, author, content, created_at)
                VALUES ('task_20260101_abcdef', 'human', 'a note', '2026-01-01T00:00:00Z');
        """)
    upgrade(url)
    with sqlite3.connect(db_path) as connection:
        board = connection.execute("SELECT id, title, assignee_name, creator_name, note_count, "
                                   "waits_for FROM task_board").fetchall()
        agents = connection.execute("SELECT thread_id, model FROM agents").fetchall()
        held = connection.execute("SELECT held_assignment FROM tasks").fetchall()
    assert board == [("task_20260101_abcdef", "Old task", "human", "root", 1, None)]
    assert held == [(None,)]
    assert agents == [("lace_20260101_aaaaaa", "demo/m")]


def test_dependencies_keep_their_tasks_and_leave_with_lace_0009(db_path: Path) -> None:
    """`task_dependencies` ties two tasks of the board; the view lists a task's open blockers;
    downgrading to lace_0008 drops the table, the column and the view's new column, and keeps
    the tasks."""
    url = f"sqlite:///{db_path}"
    upgrade(url)
    with sqlite3.connect(db_path) as connection:
        connection.execute("PRAGMA foreign_keys = ON")
        connection.executescript("""
            INSERT INTO threads (id, parent_id, root_id, title, created_at, updated_at)
                VALUES ('lace_20260101_aaaaaa', NULL, 'lace_20260101_aaaaaa', 'old',
                        '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
            INSERT INTO tasks (id, title, prompt, status, priority, created_by, thread_id,
                               created_at, updated_at)
                VALUES ('task_20260101_00000a', 'First', 'p', 'pending', 'high', 'human',
                        'lace_20260101_aaaaaa', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z'),
                       ('task_20260101_00000b', 'Then', 'p', 'pending', 'high', 'human',
                        'lace_20260101_aaaaaa', '2026-01-01T00:00:01Z', '2026-01-01T00:00:01Z');
            INSERT INTO task_dependencies (task_id, blocked_by, created_at)
                VALUES ('task_20260101_00000b', 'task_20260101_00000a', '2026-01-01T00:00:01Z');
        """)
        assert connection.execute("SELECT id, waits_for FROM task_board ORDER BY id").fetchall(
            ) == [("task_20260101_00000a", None), ("task_20260101_00000b",
                                                    "task_20260101_00000a")]
        with pytest.raises(sqlite3.IntegrityError):  # a task waiting for itself
            connection.execute("INSERT INTO task_dependencies (task_id, blocked_by, created_at) "
                               "VALUES ('task_20260101_00000a', 'task_20260101_00000a', 'now')")
    engine = create_engine(url, for_migrations=True)
    with engine.connect() as connection, connection.begin():
        command.downgrade(alembic_config(connection), "lace_0008")
    engine.dispose()
    with sqlite3.connect(db_path) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        columns = [row[1] for row in connection.execute("PRAGMA table_info(task_board)")]
        tasks = connection.execute("SELECT id FROM tasks ORDER BY id").fetchall()
    assert "task_dependencies" not in names and "waits_for" not in columns
    assert tasks == [("task_20260101_00000a",), ("task_20260101_00000b",)]


def test_downgrade_and_upgrade_again(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    upgrade(url)
    engine = create_engine(url, for_migrations=True)
    with engine.connect() as connection, connection.begin():
        command.downgrade(alembic_config(connection), "base")
    engine.dispose()
    with sqlite3.connect(db_path) as connection:
        left = {row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert left == {"alembic_version"}
    upgrade(url)


def test_alembic_upgrade_head_works_from_the_repo_root(tmp_path: Path) -> None:
    target = tmp_path / "cli.db"
    alembic = Path(sys.executable).with_name("alembic")
    subprocess.run([str(alembic), "-x", f"db={target}", "upgrade", "head"], cwd=REPO_ROOT,
                   check=True, capture_output=True, env={**os.environ})
    with sqlite3.connect(target) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)]


def test_the_same_migrations_build_postgresql_to_match_the_models_and_go_back(
        postgres_url: str) -> None:
    url = resolve_db_url(postgres_url)
    alembic = Path(sys.executable).with_name("alembic")
    subprocess.run([str(alembic), "-x", f"db={postgres_url}", "upgrade", "head"], cwd=REPO_ROOT,
                   check=True, capture_output=True, env={**os.environ})
    engine = create_engine(url, for_migrations=True)
    try:
        with engine.connect() as connection:
            command.check(alembic_config(connection))  # raises if models and migrations differ
            names = set(sa.inspect(connection).get_table_names()) | set(
                sa.inspect(connection).get_view_names())
        assert {"threads", "events", "tasks", "task_notes", "agent_metadata", "inbox",
                "llm_calls", "agents", "task_board", "task_dependencies", "processes"} <= names
        with engine.connect() as connection, connection.begin():
            command.downgrade(alembic_config(connection), "base")
        with engine.connect() as connection:
            assert set(sa.inspect(connection).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
    upgrade(url)
    assert postgres.query(postgres_url, "SELECT version_num FROM alembic_version") == [
        (HEAD_REVISION,)]
