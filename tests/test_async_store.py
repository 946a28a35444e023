"""The async store: writes asked for together commit together; transactions run on the event
loop while nothing they need is held (SQLite's write lock, or a row on PostgreSQL), and go to
the store thread, without blocking the loop, while another process holds it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from lace.core.errors import InvalidTransitionError
from lace.core.records import NewAgent
from lace.runtime.database import MAX_BATCH, AsyncStore
from lace.store import Later, Store, Tx, schema
from lace.store.engines.postgresql import CHANNEL
from lace.store.leases import LeaseLostError, fenced
from tests.conftest import is_postgres, lost_and_held_leases, new_session, query, turns_of

pytestmark = pytest.mark.both_engines

def committed(store: Store, db_path: Path) -> Callable[[], int]:
    """How many write transactions commit from now on: on SQLite the COMMITs run on the
    connections the store checks out; on PostgreSQL the NOTIFYs heard (one per write
    transaction, sent at its commit)."""
    if is_postgres(db_path):
        listener = psycopg.connect(str(db_path), autocommit=True)
        listener.execute(f"LISTEN {CHANNEL}")

        def heard() -> int:
            with listener:
                return sum(1 for _ in listener.notifies(timeout=1.0))

        return heard
    commits: list[str] = []

    def trace(dbapi_connection: sqlite3.Connection, *_args: object) -> None:
        dbapi_connection.set_trace_callback(
            lambda statement: commits.append(statement) if statement == "COMMIT" else None)

    sa.event.listen(store.database.engine, "checkout", trace)
    return lambda: len(commits)


class OtherWriter:
    """Another process holding what a write to `thread_id` needs: SQLite's write lock, or
    the thread's row on PostgreSQL (writers there wait only for the rows they share)."""

    def __init__(self, db_path: Path, thread_id: str) -> None:
        if is_postgres(db_path):
            self.connection: Any = psycopg.connect(str(db_path))
            self.connection.execute("SELECT id FROM threads WHERE id = %s FOR UPDATE",
                                    (thread_id,))
        else:
            self.connection = sqlite3.connect(db_path, isolation_level=None)
            self.connection.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if isinstance(self.connection, sqlite3.Connection):
            self.connection.execute("COMMIT")
        else:
            self.connection.commit()
        self.connection.close()


async def test_a_free_lock_means_the_write_runs_on_the_loop_but_never_on_a_server(
        store: Store, db_path: Path) -> None:
    """On SQLite a transaction whose lock is free runs on the loop; on PostgreSQL none does
    (its driver waits on the network), and reads run on a thread beside the writes'."""
    db = AsyncStore(store)
    session = new_session(store)
    writer = await db.write(lambda tx: (tx.events.append(session.id, "user_message", {"n": 1}),
                                        threading.current_thread())[1])
    reader = await db.read(lambda tx: threading.current_thread())
    db.close()
    if is_postgres(db_path):
        assert threading.main_thread() not in (writer, reader) and writer is not reader
    else:
        assert writer is reader is threading.main_thread()


async def test_a_held_lock_sends_the_write_to_the_thread_and_the_loop_goes_on(
        store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    other = OtherWriter(db_path, session.id)
    ran_on: list[threading.Thread] = []

    def append(tx: Tx) -> Later[int]:
        ran_on.append(threading.current_thread())
        return tx.events.append(session.id, "user_message", {"n": 1})

    write = asyncio.create_task(db.write(append))
    attempts = 1 if is_postgres(db_path) else 0  # the thread's, waiting for the row
    ticks = 0
    while ticks < 20 or (len(ran_on) < attempts and ticks < 1000):
        await asyncio.sleep(0.005)  # the loop keeps running while the write waits
        ticks += 1
    # SQLite's lock stops the write at BEGIN, and it goes to the thread; on PostgreSQL every
    # write runs on the thread, where a held row stops it at the statement that needs it
    assert not write.done()
    on_the_loop = [thread is threading.main_thread() for thread in ran_on]
    assert on_the_loop == ([False] if is_postgres(db_path) else [])
    other.commit()
    event_id = (await asyncio.wait_for(write, 10)).value
    db.close()
    assert ran_on[-1] is not threading.main_thread()
    assert query(db_path, "SELECT id FROM events WHERE type = 'user_message'") == [(event_id,)]


async def test_writes_asked_together_commit_once_and_a_failing_one_is_undone_alone(
        store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    commits = committed(store, db_path)

    def append(n: int) -> Callable[[Tx], Later[int]]:
        def work(tx: Tx) -> Later[int]:
            event_id = tx.events.append(session.id, "user_message", {"n": n})
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
    assert isinstance(first, Later) and isinstance(third, Later)
    assert [(event_id, int(n)) for event_id, n in kept] == [(first.value, 1), (third.value, 3)]
    assert commits() == 1  # one transaction for the three


async def test_a_write_the_database_refuses_fails_its_own_caller_alone(
        store: Store, db_path: Path) -> None:
    """On a server a write whose answer nobody reads waits for the next statement of its work,
    or the end of the work, to go out with it (`deferred_writes`): the database's refusal
    still fails that work, and that work alone, whether it comes with a read or at the end."""
    db = AsyncStore(store)
    session = new_session(store)
    twin = NewAgent(thread_id=session.id, name="twin", provider="demo", model="worker")

    def append(n: int) -> Callable[[Tx], Later[int]]:
        return lambda tx: tx.events.append(session.id, "user_message", {"n": n})

    def twin_last(tx: Tx) -> None:
        append(2)(tx)
        tx.agents.create(twin)  # its row's key is taken: refused, with nothing after it

    def twin_then_read(tx: Tx) -> str:
        tx.agents.create(twin)
        return tx.threads.get(session.id).id  # the refusal comes with this read

    outcomes = await asyncio.gather(
        db.write(append(1)), db.write(twin_last), db.write(twin_then_read), db.write(append(4)),
        return_exceptions=True)
    kept = query(db_path, "SELECT id, json_extract(data, '$.n') FROM events "
                          "WHERE type = 'user_message' ORDER BY id")
    db.close()
    assert [type(outcome) for outcome in outcomes[1:3]] == [sa.exc.IntegrityError] * 2
    ids = [outcome.value if isinstance(outcome, Later) else outcome for outcome in outcomes]
    assert [(event_id, int(n)) for event_id, n in kept] == [(ids[0], 1), (ids[3], 4)]


async def test_a_write_is_seen_by_every_statement_after_it_in_its_transaction(
        store: Store, db_path: Path) -> None:
    """A write that waits to go out with the next statement (`deferred_writes`, on a server)
    goes before it, whether that statement is a prepared one or SQLAlchemy's."""
    db = AsyncStore(store)
    session = new_session(store)
    agents = schema.agent_metadata.c

    def change_then_read(tx: Tx) -> tuple[str, int]:
        tx.agents.set_status(session.id, "running")
        status = tx.connection.execute(sa.select(agents.status).where(
            agents.thread_id == session.id)).scalar_one()
        tx.agents.count_turn(session.id)
        return status, tx.agents.get(session.id).turns

    seen = await db.write(change_then_read)
    db.close()
    assert seen == ("running", 1)
    assert query(db_path, "SELECT status, turns FROM agent_metadata WHERE thread_id = ?",
                 session.id) == [("running", 1)]


async def test_reads_asked_together_each_get_their_own_answer_or_error(
        store: Store, db_path: Path) -> None:
    """On a server reads asked at once share a snapshot; a read whose statement fails (which
    ends that transaction) fails alone, and the reads after it still answer."""
    db = AsyncStore(store)
    session = new_session(store)

    def broken(tx: Tx) -> Any:
        return tx.connection.exec_driver_sql("SELECT * FROM no_such_table").all()

    answers = await asyncio.gather(
        db.read(lambda tx: tx.threads.get(session.id).id), db.read(broken),
        db.read(lambda tx: tx.agents.get(session.id).thread_id),
        db.read(lambda tx: tx.agents.get("no-such-thread")), db.read(lambda tx: 7),
        return_exceptions=True)
    db.close()
    assert answers[0] == session.id and answers[2] == session.id and answers[4] == 7
    assert isinstance(answers[1], sa.exc.DBAPIError) and "no_such_table" in str(answers[1])
    assert "no-such-thread" in str(answers[3])


async def test_a_write_is_committed_when_its_caller_resumes(store: Store, db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    event_id = (await db.write(
        lambda tx: tx.events.append(session.id, "user_message", {"n": 1}))).value
    seen = query(db_path, "SELECT id FROM events WHERE id = ?", event_id)  # another connection
    db.close()
    assert seen == [(event_id,)]


async def test_a_sqlalchemy_statement_joins_the_loops_transaction(store: Store,
                                                                  db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)

    def count_then_fail(tx: Tx) -> None:
        tx.agents.count_turn(session.id)  # through SQLAlchemy, not a prepared statement
        raise InvalidTransitionError("undo it")

    failed = await asyncio.gather(db.write(count_then_fail), return_exceptions=True)
    after_rollback = turns_of(db_path, session.id)
    await db.write(lambda tx: tx.agents.count_turn(session.id))
    await db.write(lambda tx: tx.agents.count_turn(session.id))
    db.close()
    assert isinstance(failed[0], InvalidTransitionError)
    assert after_rollback == 0
    assert turns_of(db_path, session.id) == 2


async def test_a_long_queue_commits_in_batches_and_loses_nothing(store: Store,
                                                                 db_path: Path) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    commits = committed(store, db_path)
    writes = 2 * MAX_BATCH + 5
    ids = await asyncio.gather(*(db.write(
        lambda tx, n=n: tx.events.append(session.id, "user_message", {"n": n}))
        for n in range(writes)))
    db.close()
    assert commits() == 3  # two full batches and the rest
    assert query(db_path, "SELECT id FROM events WHERE type = 'user_message' ORDER BY id") == [
        (event_id.value,) for event_id in ids]


async def test_a_connection_the_server_ended_is_replaced(store: Store, db_path: Path) -> None:
    """A PostgreSQL server may end a session (a restart, a network cut, pg_terminate_backend):
    the loop's own connections must not stay broken for the rest of the process."""
    if not is_postgres(db_path):
        pytest.skip("a SQLite file's connection is never ended by a server")
    db = AsyncStore(store)
    session = new_session(store)
    await db.write(lambda tx: tx.events.append(session.id, "user_message", {"n": 1}))
    await db.read(lambda tx: tx.connection)
    with psycopg.connect(str(db_path), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    outcomes = [await asyncio.gather(db.write(
        lambda tx: tx.events.append(session.id, "user_message", {"n": 2})),
        return_exceptions=True) for _attempt in range(2)]
    read = await asyncio.gather(db.read(lambda tx: 1), return_exceptions=True)
    read = await asyncio.gather(db.read(lambda tx: 1), return_exceptions=True)
    db.close()
    assert not isinstance(outcomes[-1][0], BaseException), outcomes
    assert read == [1]
    assert len(query(db_path, "SELECT id FROM events WHERE type = 'user_message'")) >= 2


async def test_rows_appended_together_keep_their_order_ids_and_masks(
        store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`append_all` (one INSERT on PostgreSQL) gives each row the id a row appended alone in
    its place would have had: ascending in the rows' order, credential values masked."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-abcdef123456")
    db = AsyncStore(store)
    session = new_session(store)
    rows: list[tuple[str, dict[str, Any]]] = [
        ("agent_message", {"message": {"role": "assistant", "content": "one"}}),
        ("tool_call", {"call_id": "c1", "arguments": "key sk-test-secret-abcdef123456"}),
        ("tool_call", {"call_id": "c2", "arguments": "nul \x00 here"})]

    def append(tx: Tx) -> tuple[Later[int], Later[list[int]], Later[int]]:
        before = tx.events.append(session.id, "user_message", {"n": 0})
        together = tx.events.append_all(session.id, rows)
        return before, together, tx.events.append(session.id, "user_message", {"n": 4})

    before, together, after = (later.value for later in await db.write(append))
    db.close()
    stored = query(db_path, "SELECT id, type, data FROM events WHERE thread_id = ? "
                   "AND type != 'system_prompt' ORDER BY id", session.id)
    assert [row[0] for row in stored] == [before, *together, after]
    assert before < together[0] < together[1] < together[2] < after
    assert [row[1] for row in stored] == ["user_message", "agent_message", "tool_call",
                                          "tool_call", "user_message"]
    data = [row[2] if isinstance(row[2], dict) else json.loads(row[2]) for row in stored]
    assert data[1] == rows[0][1]
    assert "sk-test-secret" not in data[2]["arguments"] and data[2]["call_id"] == "c1"
    assert data[3]["arguments"].startswith("nul ") and data[3]["arguments"].endswith(" here")


async def test_a_write_under_a_lost_lease_writes_nothing_and_spares_its_batch(
        store: Store, db_path: Path) -> None:
    """A fenced write whose lease another claim replaced raises LeaseLostError, whether its
    work only writes (on PostgreSQL the check then rides with those writes) or reads first;
    nothing of it is written, and the writes asked for with it commit."""
    db = AsyncStore(store)
    session = new_session(store)
    stale, current = lost_and_held_leases(store, session.id)

    def only_writes(tx: Tx) -> None:
        tx.events.append_all(session.id, [("user_message", {"n": "stale"})] * 2)

    def reads_then_writes(tx: Tx) -> None:
        tx.tasks.query(session.id)
        tx.inbox.post(session.id, sender="human", kind="message", text="stale")

    outcomes = await asyncio.gather(
        db.write(fenced(stale, only_writes)), db.write(fenced(stale, reads_then_writes)),
        db.write(fenced(current, lambda tx: tx.events.append(session.id, "user_message",
                                                             {"n": "current"}))),
        return_exceptions=True)
    db.close()
    assert [type(outcome) for outcome in outcomes[:2]] == [LeaseLostError, LeaseLostError]
    assert isinstance(outcomes[2], Later) and isinstance(outcomes[2].value, int)
    assert query(db_path, "SELECT type FROM events WHERE thread_id = ? AND type = "
                 "'user_message'", session.id) == [("user_message",)]
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE text = 'stale'") == [(0,)]
    assert "stale" not in str(query(db_path, "SELECT data FROM events"))


async def test_an_events_id_comes_with_the_commit_not_a_round_trip_of_its_own(
        store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a server an appended event's id (`Later`) arrives with the statement that ends the
    transaction: a write of one event costs the round trips of a write whose answer nobody
    reads. Read inside its transaction, the id is there at once (its INSERT goes out then);
    the id of an undone transaction is never made up."""
    if not is_postgres(db_path):
        pytest.skip("SQLite runs each statement in process: no round trip to save")
    db = AsyncStore(store)
    session = new_session(store)
    for _warm in range(2):  # each statement prepared in the session, once
        await db.write(lambda tx: tx.events.append(session.id, "user_message", {"n": 0}))
        await db.write(lambda tx: tx.agents.count_turn(session.id))
    trips: list[str] = []
    execute, commit = psycopg.Cursor.execute, psycopg.Connection.commit

    def counted_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(str(query)[:60])
        return execute(cursor, query, *args, **kwargs)

    def counted_commit(connection: Any) -> None:
        trips.append("COMMIT")
        commit(connection)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(psycopg.Connection, "commit", counted_commit)
    await db.write(lambda tx: tx.agents.count_turn(session.id))
    nothing_read = len(trips)
    trips.clear()
    appended = await db.write(
        lambda tx: tx.events.append(session.id, "user_message", {"n": 1}))
    one_event = len(trips)
    read_inside = await db.write(lambda tx: tx.events.append(
        session.id, "user_message", {"n": 2}).value)

    def undone(tx: Tx) -> Later[int]:
        later.append(tx.events.append(session.id, "user_message", {"n": 3}))
        raise InvalidTransitionError("undo it")

    later: list[Later[int]] = []
    failed = await asyncio.gather(db.write(undone), return_exceptions=True)
    monkeypatch.undo()
    db.close()
    assert one_event == nothing_read, trips
    stored = query(db_path, "SELECT id, json_extract(data, '$.n') FROM events WHERE type = "
                   "'user_message' AND id > ? ORDER BY id", appended.value - 1)
    assert [(event_id, int(n)) for event_id, n in stored] == [(appended.value, 1),
                                                              (read_inside, 2)]
    assert isinstance(failed[0], InvalidTransitionError)
    with pytest.raises(RuntimeError, match="undone"):
        _ = later[0].value
