"""How a process that shares the database with others hears of their commits at once.

SQLite has no notifications, but each connection's `PRAGMA data_version` changes when another
connection commits: a look costs a few microseconds, so a process looks every CHECK_S and runs
its (costlier) query for runnable threads only when something changed. PostgreSQL tells: every
write transaction sends a NOTIFY at its commit (`lace.store.postgres`), and a process LISTENs on
a connection of its own. Either way the caller also wakes at its timeout: a poll is the
fallback when a notification is lost (a dropped connection, which is opened again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import sqlalchemy as sa

from lace.runtime.scheduler import ChangeFeed, Polling
from lace.store import Store
from lace.store.db import driver, is_postgres
from lace.store.postgres import CHANNEL

CHECK_S = 0.015
RECONNECT_S = 1.0
log = logging.getLogger("lace.runtime")


class SQLiteChanges(Polling):
    """A feed that reads `PRAGMA data_version` every CHECK_S on a connection of its own (which
    never writes, so every commit of the database changes it, this process's own included)."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self._connection = store.database.engine.connect()
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


class PostgresChanges(Polling):
    """A feed that LISTENs for lace's NOTIFY on a connection of its own, from a task started
    by the first `wait`; each notification ends the current wait."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(
            hide_password=False)
        self._listener: asyncio.Task[None] | None = None

    async def wait(self, timeout: float) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.ensure_future(self._listen())
        await self._nap(timeout)

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    self.notify()  # commits made before LISTEN: look once
                    async for _notice in connection.notifies():
                        self.notify()
            except psycopg.Error as error:
                log.warning("lace lost its PostgreSQL notifications (%s); polling until they "
                            "are back", error)
                await asyncio.sleep(RECONNECT_S)

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(RuntimeError):  # its loop may be closed already
                self._listener.cancel()


def change_feed(store: Store) -> ChangeFeed:
    """The quickest feed the database offers."""
    if is_postgres(store.database.engine):
        return PostgresChanges(store.database.url)
    return SQLiteChanges(store)
