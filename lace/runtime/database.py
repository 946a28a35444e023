"""The store driven from asyncio: every database call runs on one writer thread, so the event
loop never waits on SQLite and lace's own writes never contend with each other."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lace.store import Store, Tx

T = TypeVar("T")


class AsyncStore:
    """Runs store work on a dedicated thread and awaits the result."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lace-store")

    async def call(self, work: Callable[[], T]) -> T:
        """Run `work` (which opens its own transactions) on the writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def write(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one write transaction on the writer thread."""

        def in_transaction() -> T:
            with self.store.transaction() as tx:
                return work(tx)

        return await self.call(in_transaction)

    async def read(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one read transaction on the writer thread."""

        def in_snapshot() -> T:
            with self.store.reading() as tx:
                return work(tx)

        return await self.call(in_snapshot)

    def close(self) -> None:
        """Finish queued work and stop the thread."""
        self._executor.shutdown(wait=True)
