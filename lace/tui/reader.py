"""The app's reads of the store, on a thread of their own, since some grow with the database (the
board on 20,000 tasks takes 239 ms) and the event loop runs the agents and draws the screen.
Not on the store's thread: write batches wait there for the write lock while another process
holds it, and a read never has to wait for that lock (WAL on SQLite, a snapshot on PostgreSQL).
On a server that drops the connection or restarts, a read is run again until it gets through
(`run_transaction`), while the app goes on drawing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lace.runtime.public import Store, Tx, run_transaction

T = TypeVar("T")


class Reader:
    """Runs each read in one snapshot (`Store.reading`) on one thread, in the order asked."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lace-app-read")
        self._closed = False

    async def read(self, work: Callable[[Tx], T]) -> T:
        """`work(tx)` on the reader thread; the event loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

    def _run(self, work: Callable[[Tx], T]) -> T:
        return run_transaction(self.store.database, lambda connection: work(Tx(connection)),
                               write=False, stopping=lambda: self._closed)

    def close(self) -> None:
        """Let the read under way finish on its own (or give up, if the server is away);
        refuse new ones."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
