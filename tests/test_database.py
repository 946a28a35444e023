"""Opening the database: where it lives, connection settings, refusals, concurrent first opens."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from lace.core.errors import DatabaseRefusedError
from lace.store import Store, open_database, resolve_db_url
from lace.store.db import HEAD_REVISION


def test_default_location_follows_lace_home(isolated_home: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_db_url() == f"sqlite:///{isolated_home / 'lace.db'}"
    monkeypatch.setenv("LACE_DB", str(isolated_home / "other.db"))
    assert resolve_db_url() == f"sqlite:///{isolated_home / 'other.db'}"
    assert resolve_db_url("/x/given.db") == "sqlite:////x/given.db"
    assert resolve_db_url("sqlite:///a/b.db") == "sqlite:///a/b.db"


def test_a_sqlalchemy_url_opens(tmp_path: Path) -> None:
    database = open_database(f"sqlite:///{tmp_path / 'url.db'}")
    database.close()
    assert (tmp_path / "url.db").exists()


def test_every_connection_is_configured(store: Store) -> None:
    with store.database.engine.connect() as connection:
        def pragma(name: str) -> object:
            return connection.exec_driver_sql(f"PRAGMA {name}").scalar()

        assert pragma("foreign_keys") == 1
        assert pragma("journal_mode") == "wal"
        assert pragma("synchronous") == 1  # NORMAL
        assert int(str(pragma("busy_timeout"))) >= 5000


def test_write_transactions_begin_immediate(store: Store, db_path: Path) -> None:
    """A second writer cannot even begin while a lace write transaction is open."""
    with store.transaction():
        other = sqlite3.connect(db_path, timeout=0.05, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.close()
    with store.reading():
        other = sqlite3.connect(db_path, timeout=0.05, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a read transaction holds no write lock
        other.execute("ROLLBACK")
        other.close()


def test_foreign_keys_are_enforced(store: Store) -> None:
    with pytest.raises(sa.exc.IntegrityError), store.transaction() as tx:
        tx.append_event("no-such-thread", "user_message", {"content": "x"})


def _bytes_and_mtime(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes, not a database at all" * 50)
    before = _bytes_and_mtime(path)
    with pytest.raises(DatabaseRefusedError, match="is not a lace database"):
        open_database(str(path))
    assert _bytes_and_mtime(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_another_apps_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    before = _bytes_and_mtime(path)
    with pytest.raises(DatabaseRefusedError, match="is not a lace database"):
        open_database(str(path))
    assert _bytes_and_mtime(path) == before
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert tables == {"users"}


def test_a_newer_schema_is_refused_untouched(db_path: Path) -> None:
    open_database(str(db_path)).close()
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'lace_0999'")
    before = _bytes_and_mtime(db_path)
    with pytest.raises(DatabaseRefusedError, match=r"newer lace.*lace_0999"):
        open_database(str(db_path))
    assert _bytes_and_mtime(db_path) == before


def test_reopening_is_idempotent(db_path: Path) -> None:
    for _ in range(3):
        open_database(str(db_path)).close()
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)]


def _open_and_write(path: str, barrier: multiprocessing.synchronize.Barrier,  # type: ignore[name-defined]
                    results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        barrier.wait()
        store = Store(open_database(path))
        with store.transaction() as tx:
            session = tx.create_session(provider="demo", model="m")
        results.put(("ok", session.id))
    except Exception as error:  # reported to the parent, which fails the test
        results.put(("error", repr(error)))


def test_processes_opening_a_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh.db")
    count = 4
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(count), context.Queue()
    processes = [context.Process(target=_open_and_write, args=(path, barrier, results))
                 for _ in range(count)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert [kind for kind, _ in outcomes] == ["ok"] * count, outcomes
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT COUNT(*) FROM threads").fetchone() == (count,)
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)]
