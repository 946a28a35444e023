"""How a process that shares the database with others hears of their commits at once.

SQLite has no notifications, but each connection's `PRAGMA data_version` changes when another
connection commits: a look costs a few microseconds, so a process looks every CHECK_S and runs
its (costlier) query for runnable threads only when something changed. On PostgreSQL, LISTEN
and NOTIFY would take this place behind the same `ChangeFeed`."""

from __future__ import annotations

import asyncio

from lace.runtime.supervisor import ChangeFeed, Polling
from lace.store import Store
from lace.store.db import driver, sqlite_path

CHECK_S = 0.015


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


def change_feed(store: Store) -> ChangeFeed:
    """The quickest feed the database offers."""
    return SQLiteChanges(store) if sqlite_path(store.database.url) else Polling()
