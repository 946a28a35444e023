"""The store driven from asyncio, without ever making the event loop wait on SQLite's lock.

A transaction whose lock is free at once runs right on the event loop: lace's transactions are
short (a few statements, well under a millisecond), and a trip to a thread and back costs more
than the work (about 75 us, plus the two threads taking turns with the GIL). When another
process holds the write lock, the work goes to one store thread instead, which waits for the
lock while the loop goes on. Work that opens its own transactions (`call`) always runs on that
thread."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import sqlalchemy as sa

from lace.store import Store, Tx
from lace.store.db import READONLY_OPTION

T = TypeVar("T")


def _is_busy(error: sa.exc.OperationalError) -> bool:
    return getattr(error.orig, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY,
                                                             sqlite3.SQLITE_LOCKED)


class AsyncStore:
    """Runs store work on the event loop when SQLite's lock is free, else on a thread."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lace-store")
        self._writer: sa.Connection | None = None  # the event loop's own connections
        self._reader: sa.Connection | None = None

    async def call(self, work: Callable[[], T]) -> T:
        """Run `work` (which opens its own transactions) on the store thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def write(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one write transaction: here if the write lock is free, else on the
        store thread once it is."""
        transaction = self._begin_here()
        if transaction is None:
            return await self.call(lambda: self._write_there(work))
        with transaction:
            assert self._writer is not None
            return work(Tx(self._writer))

    async def read(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one read transaction (one consistent snapshot). Readers never wait
        for writers in WAL mode, so reads run here."""
        if self._reader is None:
            self._reader = self.store.database.engine.connect().execution_options(
                **{READONLY_OPTION: True})
        with self._reader.begin():
            return work(Tx(self._reader))

    def _begin_here(self) -> sa.RootTransaction | None:
        """BEGIN IMMEDIATE on the loop's connection without waiting; None if the lock is held."""
        if self._writer is None:
            self._writer = self.store.database.engine.connect()
            # Fail at once instead of waiting. Only BEGIN IMMEDIATE can meet the lock: in WAL
            # mode, a transaction holding the write lock is not blocked again until it ends.
            raw = self._writer.connection.driver_connection
            assert isinstance(raw, sqlite3.Connection)
            raw.execute("PRAGMA busy_timeout=0")
        try:
            return self._writer.begin()
        except sa.exc.OperationalError as error:
            if _is_busy(error):
                return None
            raise

    def _write_there(self, work: Callable[[Tx], T]) -> T:
        with self.store.transaction() as tx:
            return work(tx)

    def close(self) -> None:
        """Finish queued work, stop the thread and close the loop's connections."""
        self._executor.shutdown(wait=True)
        for connection in (self._writer, self._reader):
            if connection is not None:
                connection.close()
        self._writer = self._reader = None
