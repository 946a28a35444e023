"""The async store: writes asked for together commit together; transactions run on the event
loop while SQLite's lock is free, and go to the store thread, without blocking the loop, while
another process holds it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from lace.core.errors import InvalidTransitionError
from lace.runtime.database import MAX_BATCH, AsyncStore
from lace.store import Store, Tx
from tests.conftest import new_session, query


def committed(store: Store) -> list[str]:
    """The COMMITs SQLite runs, from now on, on the connections the store checks out."""
    commits: list[str] = []

    def trace(dbapi_connection: sqlite3.Connection, *_args: object) -> None:
        dbapi_connection.set_trace_callback(
            lambda statement: commits.append(statement) if statement == "COMMIT" else None)

    sa.event.listen(store.database.engine, "checkout", trace)
    return commits


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


async def test_writes_asked_together_commit_once_and_a_failing_one_is_undone_alone(
        store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    commits = committed(store)

    def append(n: int) -> Callable[[Tx], int]:
        def work(tx: Tx) -> int:
            event_id = tx.append_event(session.id, "user_message", {"n": n})
            if n == 2:
                raise InvalidTransitionError("the second write fails after its insert")
            return event_id
        return work

    first, second, third = await asyncio.gather(*(db.write(append(n)) for n in (1, 2, 3)),
                                                return_exceptions=True)
    kept = query(db_path, "SELECT id, json_extract(data, '$.n') FROM events "
                          "WHERE type = 'user_message' ORDER BY id")
    db.close()
    assert isinstance(second, InvalidTransitionError)
    assert kept == [(first, 1), (third, 3)]
    assert commits == ["COMMIT"]  # one transaction for the three


async def test_a_write_is_committed_when_its_caller_resumes(store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    event_id = await db.write(
        lambda tx: tx.append_event(session.id, "user_message", {"n": 1}))
    seen = query(db_path, "SELECT id FROM events WHERE id = ?", event_id)  # another connection
    db.close()
    assert seen == [(event_id,)]


async def test_a_sqlalchemy_statement_joins_the_loops_transaction(store: Store,
                                                                  db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)

    def count_then_fail(tx: Tx) -> None:
        tx.count_turn(session.id)  # through SQLAlchemy, not a prepared statement
        raise InvalidTransitionError("undo it")

    failed = await asyncio.gather(db.write(count_then_fail), return_exceptions=True)
    after_rollback = query(db_path, "SELECT turns FROM agent_metadata WHERE thread_id = ?",
                           session.id)
    await db.write(lambda tx: tx.count_turn(session.id))
    await db.write(lambda tx: tx.count_turn(session.id))
    db.close()
    assert isinstance(failed[0], InvalidTransitionError)
    assert after_rollback == [(0,)]
    assert query(db_path, "SELECT turns FROM agent_metadata WHERE thread_id = ?",
                 session.id) == [(2,)]


async def test_a_long_queue_commits_in_batches_and_loses_nothing(store: Store,
                                                                 db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    commits = committed(store)
    writes = 2 * MAX_BATCH + 5
    ids = await asyncio.gather(*(db.write(
        lambda tx, n=n: tx.append_event(session.id, "user_message", {"n": n}))
        for n in range(writes)))
    db.close()
    assert len(commits) == 3  # two full batches and the rest
    assert query(db_path, "SELECT id FROM events WHERE type = 'user_message' ORDER BY id") == [
        (event_id,) for event_id in ids]
