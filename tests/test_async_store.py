"""The async store: transactions run on the event loop while SQLite's lock is free, and go to
the store thread, without blocking the loop, while another process holds it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from lace.runtime.database import AsyncStore
from lace.store import Store, Tx
from tests.conftest import new_session, query


async def test_a_free_lock_means_the_write_runs_on_the_loop(store: Store) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    writer = await db.write(lambda tx: (tx.append_event(session.id, "user_message", {"n": 1}),
                                        threading.current_thread())[1])
    reader = await db.read(lambda tx: threading.current_thread())
    db.close()
    assert writer is reader is threading.main_thread()


async def test_a_held_lock_sends_the_write_to_the_thread_and_the_loop_goes_on(
        store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    other = sqlite3.connect(db_path, isolation_level=None)  # another process, as SQLite sees it
    other.execute("BEGIN IMMEDIATE")
    ran_on: list[threading.Thread] = []

    def append(tx: Tx) -> int:
        ran_on.append(threading.current_thread())
        return tx.append_event(session.id, "user_message", {"n": 1})

    write = asyncio.create_task(db.write(append))
    ticks = 0
    while ticks < 20:  # the loop keeps running while the write waits for the lock
        await asyncio.sleep(0.005)
        ticks += 1
    assert not write.done() and ran_on == []
    other.execute("COMMIT")
    event_id = await asyncio.wait_for(write, 10)
    other.close()
    db.close()
    assert ran_on and ran_on[0] is not threading.main_thread()
    assert query(db_path, "SELECT id FROM events WHERE type = 'user_message'") == [(event_id,)]
