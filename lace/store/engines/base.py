"""What differs between the databases lace runs on (`Engine`), and the change feed each offers:
every caller asks the engine object, chosen once from the URL, instead of branching on the
dialect."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

READONLY_OPTION = "lace_readonly"
"""The execution option of a connection whose transactions only read (`Store.reading`)."""


class LockBusyError(Exception):
    """Another connection holds lace's write lock (past this connection's wait for it)."""


def driver(connection: sa.Connection) -> Any:
    """The sqlite3 or psycopg connection under a SQLAlchemy one."""
    return connection.connection.driver_connection


class ChangeFeed(Protocol):
    """How a process hears that other processes committed rows: SQLite changes `PRAGMA
    data_version`, PostgreSQL sends a NOTIFY at every write's commit. `Polling` hears nothing
    and only waits."""

    async def wait(self, timeout: float) -> None:
        """Return once the database may have changed, or `notify` was called, or after
        `timeout` seconds."""

    def notify(self) -> None:
        """Make `wait` return now: this process wants another look."""

    def close(self) -> None:
        """Release what the feed holds."""


class Polling:
    """The feed of a process that runs its sessions alone: no news, a look every timeout."""

    def __init__(self) -> None:
        self._told = asyncio.Event()

    async def _nap(self, timeout: float) -> bool:
        """Sleep `timeout` seconds or until notified; whether it was notified."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._told.wait()
        told = self._told.is_set()
        self._told.clear()
        return told

    async def wait(self, timeout: float) -> None:
        await self._nap(timeout)

    def notify(self) -> None:
        self._told.set()

    def close(self) -> None:
        """Nothing to release."""


class Engine(Protocol):
    """One kind of database under lace: how it is opened and checked, how a transaction begins
    (write transactions take turns on SQLite, and commit as if they had on PostgreSQL), and
    how other processes' commits are heard."""

    url: str

    @property
    def path(self) -> Path | None:
        """The file that holds the database, for messages and for protecting it from tools
        (None for a server)."""

    def shown(self) -> str:
        """The database as lace names it to a person: a file's path, a server's URL without
        its password."""

    def prepare(self) -> None:
        """Refuse a place lace will not keep a database in, and make a new one ready to open."""

    def existing_revision(self) -> str | None:
        """Refuse a database that is not lace's or was written by a newer lace, reading it
        without writing; its alembic revision (None when it is empty)."""

    def create_engine(self, *, for_migrations: bool = False) -> sa.Engine:
        """A SQLAlchemy engine whose write transactions take turns and whose read transactions
        see one snapshot (`READONLY_OPTION`); unpooled for migrations."""

    def begin(self, connection: sa.Connection, *, write: bool) -> str | None:
        """Begin a transaction on the driver connection under `connection` (SQLAlchemy's own
        begin costs more than the work); LockBusyError when another connection holds the
        write lock past this connection's wait. The id of a write transaction on a server,
        which settles a COMMIT whose answer was lost (`lace.store.retry`); else None."""

    def fail_fast(self, connection: sa.Connection) -> None:
        """Make a write on `connection` fail at once instead of waiting for another writer
        (the event loop's connection): LockBusyError at `begin`, or a conflict."""

    def wait_for_alone(self, connection: sa.Connection) -> None:
        """Return once no write runs `alone` (after a write began on `connection` raised
        LockBusyError); outside any transaction, so the next one sees what that write did."""

    def alone(self, connection: sa.Connection) -> contextlib.AbstractContextManager[None]:
        """While the block runs, the write transactions begun on `connection` are the only
        ones (for a write that kept losing to concurrent ones)."""

    def is_conflict(self, error: BaseException) -> bool:
        """Whether `error` undid a write transaction only because another one ran beside it
        (PostgreSQL's serialization failures and deadlocks): run again, it may commit."""

    def change_feed(self, engine: sa.Engine) -> ChangeFeed:
        """The quickest way this database tells a process that others committed."""
