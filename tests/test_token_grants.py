"""Token grants (`token_grants`, `lace.runtime.escrow`) attacked as another process, a crash or
a lock would: what a process counts as held is never more than its row, a dead process's grant
is not counted, and processes sharing one cap pass it by at most one call."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from pathlib import Path

from lace.config import Budgets
from lace.core.records import Agent, Lease
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import Escrow
from lace.runtime.turns import record_call
from lace.store import Store
from lace.store.leases import fenced
from tests.conftest import new_session, query

CAP = 100_000


def held_row(db_path: Path | str, holder: str) -> int:
    rows = query(db_path, "SELECT tokens FROM token_grants WHERE process_id = ?", holder)
    return int(rows[0][0]) if rows else 0


def process(store: Store, process_id: str, lease_timeout_s: float = 60) -> None:
    with store.transaction() as tx:
        tx.processes.register(process_id, lease_timeout_s)


def agent_row(store: Store, thread_id: str) -> Agent:
    with store.transaction() as tx:
        return tx.agents.get(thread_id)


def claimed(store: Store, thread_id: str, holder: str) -> Lease:
    with store.transaction() as tx:
        return tx.leases.claim(tx.agents.get(thread_id), holder)


def recorded(lease: Lease, spent: dict[str, int | None], used: int) -> functools.partial[None]:
    return functools.partial(record_call, thread_id=lease.thread_id, holder=lease.holder,
                             spent=spent, model="demo/coordinator", prompt_tokens=used,
                             completion_tokens=0, cost_usd=0.0, latency_ms=1.0)


async def test_a_grant_asked_while_a_give_back_waits_for_the_lock_is_not_lost(
        store: Store, db_path: Path) -> None:
    """A call that is over gives the whole grant back (nothing else in flight) in a write that
    finds SQLite's lock held by another process and goes to the store thread; a call of the
    same process that then asks for a grant writes on the loop once the lock is free. The
    give-back must not commit after the grant and delete it: the process would then spend
    tokens no other process sees as held. (SQLite only: on PostgreSQL every write goes
    through the one store thread in order.)"""
    session = new_session(store)
    process(store, "p1")
    lease = claimed(store, session.id, "p1")
    db, escrow, budgets = AsyncStore(store), Escrow(), Budgets(session_tokens=CAP)
    try:
        first = await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                           lambda: 1000, 5)
        assert escrow.held[session.id].granted == held_row(db_path, "p1") > 0
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process writes
        give_back = asyncio.ensure_future(db.write(fenced(lease, recorded(
            lease, escrow.settle(first, 500), 500))))
        deadline = time.monotonic() + 10
        while not db._waiting:  # the give-back waits on the thread for the lock
            assert time.monotonic() < deadline, "the give-back never went to the thread"
            await asyncio.sleep(0.005)
        assert not give_back.done()
        other.execute("COMMIT")
        other.close()
        second = await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                            lambda: 1000, 5)
        await asyncio.wait_for(give_back, 10)
        assert escrow.held[session.id].granted <= held_row(db_path, "p1")
        escrow.settle(second, 0)
    finally:
        db.close()


