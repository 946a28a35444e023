"""How lace sends a batch of writes to a PostgreSQL server: each work's writes ride with the next
statement that needs an answer, whichever work asks it, and the last ones with the COMMIT
(`carried_writes`); the statements go as `EXECUTE` of statements prepared once per session.
The promises kept: each error still fails the work that caused it and no other, a statement
the server cannot prepare still runs, and statements deallocated behind lace's back (psycopg's
ROLLBACK does it) are prepared again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from lace.core.records import NewAgent, Thread
from lace.runtime.database import AsyncStore
from lace.store import Store, Tx, open_database
from lace.store import statements as sql
from lace.store.engines import driver
from lace.store.engines.postgresql import WRITERS
from lace.store.leases import LeaseLostError, fenced
from lace.store.prepared import AbortedTransactionError, Prepared, _prepare_all, _prepared
from tests.conftest import lost_and_held_leases, new_session, query, spawn_child, turns_of
from tests.logs import records_of

UNTYPED = Prepared(sa.text("SELECT CAST(:value IS NULL AS INTEGER) AS empty"))
"""A parameter whose type the server cannot infer: PREPARE refuses it (42P18), a simple query
with the value bound in it does not."""


@pytest.fixture
def store(migrated_postgres_url: str) -> Iterator[Store]:
    store = Store(open_database(migrated_postgres_url))
    yield store
    store.close()


def prepared_names(tx: Tx) -> set[str]:
    """The statements lace prepared in this transaction's session."""
    rows = tx.connection.exec_driver_sql(
        "SELECT name FROM pg_prepared_statements WHERE starts_with(name, 'lace_')").all()
    return {name for (name,) in rows}


def turn(thread_id: str) -> Callable[[Tx], None]:
    """A work that only writes (one more turn for the agent), so its writes, and its lease's
    check, wait for a later statement."""
    return lambda tx: tx.agents.count_turn(thread_id)


def turn_then_read(thread_id: str) -> Callable[[Tx], str]:
    """A write that goes out with a read: both as EXECUTE, in one round trip."""
    def work(tx: Tx) -> str:
        tx.agents.count_turn(thread_id)
        return tx.threads.get(thread_id).id
    return work


async def test_an_error_of_a_carried_write_fails_the_work_that_queued_it(
        store: Store, migrated_postgres_url: str) -> None:
    """A work whose queued write the server refuses only at the next work's statement, or at
    the COMMIT, fails alone, with its own error; the works beside it commit."""
    db = AsyncStore(store)
    session = new_session(store)
    stale, current = lost_and_held_leases(store, session.id)

    def reads(tx: Tx) -> str:
        return tx.threads.get(session.id).id  # carries the writes queued before it

    outcomes = await asyncio.gather(
        db.write(fenced(stale, turn(session.id))), db.write(reads),
        db.write(fenced(current, turn(session.id))), db.write(fenced(stale, turn(session.id))),
        return_exceptions=True)
    db.close()
    assert [type(outcome) for outcome in outcomes] == [LeaseLostError, str, type(None),
                                                      LeaseLostError]
    assert turns_of(migrated_postgres_url, session.id) == 1


async def test_statements_are_prepared_once_and_again_after_a_rollback_drops_them(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    await db.write(turn_then_read(session.id))
    prepared = await db.write(prepared_names)
    assert len(prepared) == 2, "the write and the read went out as EXECUTE of prepared ones"

    def fails(tx: Tx) -> None:
        turn_then_read(session.id)(tx)
        raise ValueError("undone: its transaction rolls back, and psycopg deallocates")

    with pytest.raises(ValueError):
        await db.write(fails)
    assert await db.write(prepared_names) == set()
    await db.write(turn_then_read(session.id))
    assert await db.write(prepared_names) == prepared
    dropped: list[bool] = []

    def deallocated_behind_its_back(tx: Tx) -> str:
        if not dropped:  # as psycopg does after a ROLLBACK or a DROP it sends itself
            tx.connection.exec_driver_sql("DEALLOCATE ALL")
            dropped.append(True)
        return turn_then_read(session.id)(tx)

    assert await db.write(deallocated_behind_its_back) == session.id
    db.close()
    assert turns_of(migrated_postgres_url, session.id) == 3


async def test_a_statement_the_server_cannot_prepare_runs_with_its_values(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)

    def untyped(tx: Tx) -> Any:
        tx.agents.set_status(session.id, "running")  # queued: goes with the next statement
        raw = driver(tx.connection)
        return [UNTYPED.scalar(raw, {"value": value}) for value in (None, "x")], \
            tx.agents.get(session.id).status

    assert await db.write(untyped) == ([1, 0], "running")
    assert await db.write(untyped) == ([1, 0], "running")  # known now: bound at once
    db.close()
    assert query(migrated_postgres_url, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                 session.id) == [("running",)]


def test_a_transaction_whose_work_swallowed_a_database_error_is_never_committed(
        store: Store, migrated_postgres_url: str) -> None:
    """Outside the batches too (`Store.write`, the command line's writes): the COMMIT of a
    transaction a failed statement ended, which the server would answer with ROLLBACK and no
    error, raises instead of reporting the work's writes committed."""
    session = new_session(store)

    def swallows(tx: Tx) -> str:
        tx.agents.count_turn(session.id)
        with contextlib.suppress(sa.exc.DBAPIError):
            tx.connection.exec_driver_sql("SELECT 1 / 0")
        return "went on"

    with pytest.raises(AbortedTransactionError):
        store.write(swallows)
    assert turns_of(migrated_postgres_url, session.id) == 0


def test_a_write_that_ran_alone_lets_the_others_go_when_its_unlock_fails(
        store: Store, migrated_postgres_url: str) -> None:
    """The unlock after a write that ran alone can fail while the session lives (its prepared
    statement deallocated behind psycopg's back, as a pooler or another library may): the
    session still lets go of the lock, else every writer of every process waited for it for
    good (seen once), and no error comes out of it, else a write that committed ran again;
    the log says so, once."""
    kind = store.database.kind
    ran = []
    with records_of("lace.runtime") as logged, store.database.engine.connect() as connection:
        for attempt in range(3):  # psycopg prepares the unlock from its second time on
            with kind.alone(connection):
                if attempt == 2:
                    driver(connection).pgconn.exec_(b"DEALLOCATE ALL")
                ran.append(attempt)
        assert ran == [0, 1, 2]
        assert query(migrated_postgres_url, f"SELECT pg_try_advisory_lock({WRITERS})") \
            == [(True,)]
        assert [record.getMessage() for record in logged] == [
            "could not release the writers' lock (InvalidSqlStatementName); ending the "
            "database session, which releases it"]
        with kind.alone(connection):  # and the connection serves again
            ran.append(3)
    assert ran == [0, 1, 2, 3]



ON_AGENTS = "SELECT count(*) FROM agent_metadata WHERE thread_id = %(agent)s"
ON_INBOX = "SELECT count(*) FROM inbox WHERE thread_id = %(thread)s"


def test_a_batch_of_prepares_cut_off_midway_leaves_no_statement_lace_does_not_know(
        migrated_postgres_url: str) -> None:
    """A PREPARE outlives the transaction it ran in: when one of a batch fails for another
    reason than a refusal (cancelled here, as a lock or statement timeout would), those before
    it stay in the session; unknown to lace, the next PREPARE of one collided with it (42P05),
    and the statement was taken for one the server cannot prepare, its values bound for good."""
    import psycopg

    database = open_database(migrated_postgres_url)
    holder = sa.create_engine(migrated_postgres_url.replace("postgresql://",
                                                            "postgresql+psycopg://", 1))
    failed: list[BaseException] = []

    def batch(raw: Any) -> None:
        try:
            _prepare_all(psycopg.ClientCursor(raw), [ON_AGENTS, ON_INBOX])
        except psycopg.Error as error:
            failed.append(error)

    def agree(raw: Any) -> tuple[set[str], set[str]]:
        rows = raw.execute("SELECT name FROM pg_prepared_statements "
                           "WHERE starts_with(name, 'lace_')").fetchall()
        return {name for (name,) in rows}, set((_prepared.get(raw) or {}).values())

    try:
        with database.engine.connect() as connection, holder.connect() as locker:
            raw = driver(connection)
            raw.execute("BEGIN")
            locker.exec_driver_sql("LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE")
            preparing = threading.Thread(target=batch, args=(raw,))
            preparing.start()
            deadline = time.monotonic() + 10
            while not (waiting := locker.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND starts_with(query, 'SAVEPOINT lace_prepare')").all()):
                assert time.monotonic() < deadline, "no PREPARE waited for the lock"
                time.sleep(0.02)
                # the server keeps what a transaction first read of pg_stat_activity until
                # it ends: the locker's must look again
                locker.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
            locker.exec_driver_sql(f"SELECT pg_cancel_backend({waiting[0][0]})")
            preparing.join(10)
            locker.rollback()
            assert [type(error) for error in failed] == [psycopg.errors.QueryCanceled]
            raw.rollback()  # the transaction is undone, as every failed one is
            server, lace = agree(raw)
            assert server == lace, "the session holds statements lace does not know"
            raw.execute("BEGIN")
            _prepare_all(psycopg.ClientCursor(raw), [ON_AGENTS])
            server, lace = agree(raw)
            raw.rollback()
        assert server == lace and len(lace) == 1  # prepared, not bound for good
    finally:
        holder.dispose()
        database.close()


def wide_session(store: Store, helpers: int) -> Thread:
    """A session whose root has `helpers` agents under it (a fan-out's board)."""
    session = new_session(store)
    with store.transaction() as tx:
        for _ in range(helpers):
            child = tx.threads.create_child(session.id)
            tx.agents.create(NewAgent(thread_id=child.id, name="a", provider="demo",
                                      model="worker", parent_thread_id=session.id))
    return session


def test_a_lookup_by_a_list_of_ids_reads_the_index_however_large_the_board(
        store: Store, migrated_postgres_url: str) -> None:
    """`json_list` on PostgreSQL: the planner guessed a hundred values for `IN (SELECT ...
    json_array_elements_text(...))` and scanned every agent row at each lookup of a few (half a
    millisecond each at 1,000 helpers, three lookups per helper)."""
    session = wide_session(store, 1500)
    looked_up = [spawn_child(store, session.id), session.id]
    query(migrated_postgres_url, "ANALYZE")
    with psycopg.connect(migrated_postgres_url) as connection:
        for statement in (sql.AGENTS_BY_IDS, sql.STOPPED_AMONG):
            text = statement._for("postgresql").sql
            params = dict.fromkeys(re.findall(r"%\((\w+)\)s", text), "stopped")  # literals
            params["agents"] = json.dumps(looked_up)
            plan = "\n".join(row[0] for row in connection.execute(f"EXPLAIN {text}", params))
            assert "Seq Scan on agent_metadata" not in plan, plan
            assert "pk_agent_metadata" in plan, plan


def test_the_schedulers_look_reads_the_waking_inbox_rows_not_every_thread(
        store: Store, migrated_postgres_url: str) -> None:
    """`RUNNABLE` on PostgreSQL: with no index of the waking rows the plan went through every
    thread of the session (1,001 at 1,000 helpers), an agent row and an inbox probe each, to
    find the few with a pending row (3 ms a look); `ix_inbox_waking` (lace_0020) starts from
    those."""
    session = wide_session(store, 1000)
    waking = [f"{session.id}.7", f"{session.id}.700"]
    query(migrated_postgres_url, "INSERT INTO inbox (thread_id, sender, kind, text, created_at, "
          "consumed_at, wakes) SELECT thread_id, 'human', 'message', 'done', '2026', "
          "CASE WHEN thread_id IN (?, ?) AND turn = 2 THEN NULL ELSE '2026' END, true "
          "FROM agent_metadata, generate_series(1, 2) AS turn", *waking)
    query(migrated_postgres_url, "ANALYZE")
    text = sql.RUNNABLE._for("postgresql").sql
    params = dict(sql.RUNNABLE._for("postgresql").bound({"root": session.id}))
    with psycopg.connect(migrated_postgres_url) as connection:
        plan = "\n".join(row[0] for row in connection.execute(f"EXPLAIN {text}", params))
        runnable = connection.execute(text, params).fetchall()
    assert sorted(row[0] for row in runnable) == waking
    assert "ix_inbox_waking" in plan, plan
    assert "ix_threads_root_id" not in plan, plan
