"""SQLite under lace, the embedded default: one file in WAL mode whose writers take turns with
BEGIN IMMEDIATE and a busy timeout, a write guard that refuses a damaged file, and a change feed
that watches `PRAGMA data_version`.

SQLite has no notifications, but each connection's `PRAGMA data_version` changes when another
connection commits: a look costs a few microseconds, so a process looks every CHECK_S and runs
its (costlier) query for runnable threads only when something changed."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import NullPool

from lace.core.errors import DatabaseRefusedError
from lace.paths import lace_home, open_private, private_folder
from lace.store.damage import WriteGuard
from lace.store.engines.base import READONLY_OPTION, ChangeFeed, LockBusyError, Polling, driver
from lace.store.failures import storage_error
from lace.store.revisions import known_revision

BUSY_TIMEOUT_MS = 10_000
CHECK_S = 0.015


class SQLite:
    """A database in one SQLite file."""

    def __init__(self, url: str) -> None:
        self.url = url
        database = sa.make_url(url).database
        if database in (None, "", ":memory:"):
            raise DatabaseRefusedError("a database in memory would be lost when lace exits: "
                                       "--db takes a file path or a sqlite:///PATH URL.")
        self.path = Path(database)
        self._guards: weakref.WeakKeyDictionary[sa.Engine, WriteGuard] = (
            weakref.WeakKeyDictionary())

    def shown(self) -> str:
        return str(self.path)

    def prepare(self) -> None:
        """Create lace's own folder (0700) when the file goes there, refuse any other missing
        folder, and create a new file as 0600: it holds conversations and tool output, and
        SQLite gives its -wal and -shm files the same mode."""
        path = self.path
        if path.is_dir():
            raise DatabaseRefusedError(f"{path} is a folder; --db takes a database file.")
        home = lace_home().resolve()
        if not path.parent.is_dir() and path.parent.resolve() != home:
            raise DatabaseRefusedError(f"the folder {path.parent} does not exist; create it, or "
                                       "leave out --db to use lace's own folder.")
        try:
            if not path.parent.is_dir():
                private_folder(home)
            if not path.exists():
                open_private(path).close()
        except OSError as error:
            raise storage_error(error, path) or error from None

    def existing_revision(self) -> str | None:
        path = self.path
        if not path.exists() or path.stat().st_size == 0:
            return None
        try:
            with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as connection:
                query = "SELECT name FROM sqlite_master WHERE type = 'table'"
                tables = {row[0] for row in connection.execute(query)}
                if not tables:
                    return None
                if "alembic_version" not in tables:
                    raise DatabaseRefusedError(
                        f"{path} is not a lace database (it holds other tables).")
                row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.DatabaseError as error:
            storage = storage_error(error, path)
            if storage is not None:
                raise storage from None
            if getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT:
                raise DatabaseRefusedError(f"{path} is damaged ({error}); lace will not use it. "
                                           "Restore a backup, or see what is wrong with: sqlite3 "
                                           f"{path} 'PRAGMA integrity_check'") from None
            raise DatabaseRefusedError(f"{path} is not a lace database ({error}).") from None
        return known_revision(row[0] if row else None, str(path))

    def create_engine(self, *, for_migrations: bool = False) -> sa.Engine:
        """WAL, a busy timeout and BEGIN IMMEDIATE for writes; foreign keys off while
        migrating (alembic's batch mode copies tables)."""
        self.prepare()  # also for `alembic upgrade`, which reaches lace here
        engine = sa.create_engine(self.url, poolclass=NullPool if for_migrations else None)
        self._guards[engine] = WriteGuard(self.path, BUSY_TIMEOUT_MS / 1000)
        foreign_keys = "OFF" if for_migrations else "ON"

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cursor.execute(f"PRAGMA foreign_keys={foreign_keys}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: sa.Connection) -> None:
            if driver(connection).in_transaction:
                return  # begun on the sqlite3 connection itself (`begin`): join it
            readonly = connection.get_execution_options().get(READONLY_OPTION, False)
            if not readonly:
                self._check_before_write(connection.engine)
            connection.exec_driver_sql("BEGIN DEFERRED" if readonly else "BEGIN IMMEDIATE")

        return engine

    def _check_before_write(self, engine: sa.Engine) -> None:
        """Refuse to write into a damaged file: checked before the engine's first write."""
        guard = self._guards.get(engine)
        problem = None if guard is None else guard.before_write()
        if problem is not None:
            raise DatabaseRefusedError(
                f"{self.path} is damaged ({problem}); lace will not write to it. Restore a "
                f"backup, or see what is wrong with: sqlite3 {self.path} 'PRAGMA integrity_check'")

    def begin(self, connection: sa.Connection, *, write: bool) -> None:
        """In process, a COMMIT's answer is never lost: no transaction id."""
        if write:
            self._check_before_write(connection.engine)
        try:
            driver(connection).execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise LockBusyError(str(error)) from error
            raise

    def fail_fast(self, connection: sa.Connection) -> None:
        """Only BEGIN IMMEDIATE can meet the lock: in WAL mode, a transaction holding the
        write lock is not blocked again until it ends."""
        driver(connection).execute("PRAGMA busy_timeout=0")

    def wait_for_alone(self, connection: sa.Connection) -> None:
        """Nothing to wait for: a writer waits at BEGIN IMMEDIATE."""

    @contextlib.contextmanager
    def alone(self, connection: sa.Connection) -> Iterator[None]:
        """Nothing to hold: every write here runs alone."""
        yield

    def is_conflict(self, error: BaseException) -> bool:
        """Never: writers take turns (BEGIN IMMEDIATE), so none undoes another."""
        return False

    def change_feed(self, engine: sa.Engine) -> ChangeFeed:
        return SQLiteChanges(engine)


class SQLiteChanges(Polling):
    """A feed that reads `PRAGMA data_version` every CHECK_S on a connection of its own (which
    never writes, so every commit of the database changes it, this process's own included)."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__()
        self._connection = engine.connect()
        self._version = self._read()

    def _read(self) -> int:
        return int(driver(self._connection).execute("PRAGMA data_version").fetchone()[0])

    async def wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self._nap(min(CHECK_S, max(0.0, deadline - loop.time()))):
            version = self._read()
            if version != self._version or loop.time() >= deadline:
                self._version = version
                return

    def close(self) -> None:
        self._connection.close()
