"""The alembic migrations: empty to head, models match, data survives later revisions."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory

from lace.store.db import HEAD_REVISION, alembic_config, create_engine, upgrade

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
            "agents", "task_board", "ix_events_thread_id_id"} <= names


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
        board = connection.execute(
            "SELECT id, title, assignee_name, creator_name, note_count FROM task_board").fetchall()
        agents = connection.execute("SELECT thread_id, model FROM agents").fetchall()
    assert board == [("task_20260101_abcdef", "Old task", "human", "root", 1)]
    assert agents == [("lace_20260101_aaaaaa", "demo/m")]


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
