"""Attacks on a PostgreSQL batch's carried writes and prepared statements: each error stays with
the work that caused it (a lone write, a value that cannot be bound, a work that swallows a
database error), every write lands once when the COMMIT's answer is lost or a backend is
ended, hostile text and JSON go through `EXECUTE` unchanged, and a session's prepared
statements stay bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from lace.runtime.database import AsyncStore
from lace.store import Later, Store, Tx, open_database
from lace.store.db import Database
from lace.store.engines import driver, engine_for
from lace.store.prepared import Prepared
from tests.conftest import new_session, query, turns_of
from tests.faults import CommitCutter


@pytest.fixture
def store(migrated_postgres_url: str) -> Iterator[Store]:
    store = Store(open_database(migrated_postgres_url))
    yield store
    store.close()


def post_to(thread_id: str, text: str = "hello") -> Callable[[Tx], None]:
    """One queued write only (INSERT_INBOX), which fails when `thread_id` is no thread."""
    return lambda tx: tx.inbox.post(thread_id, sender="human", kind="message", text=text)


def releases(thread_id: str) -> Callable[[Tx], list[str]]:
    """A work whose only statement is a SQLAlchemy one (`before_cursor_execute` sends what is
    queued, alone, before it)."""
    return lambda tx: tx.inbox.release_held(thread_id, "no-such-batch")


async def test_a_single_carried_write_that_fails_fails_its_own_work_not_the_next(
        store: Store, migrated_postgres_url: str) -> None:
    """The write queued by the first work goes out alone before the second work's SQLAlchemy
    statement: its error is the first work's, not the second's."""
    db = AsyncStore(store)
    session = new_session(store)
    outcomes = await asyncio.gather(db.write(post_to("no-such-thread")),
                                    db.write(releases(session.id)),
                                    return_exceptions=True)
    db.close()
    assert isinstance(outcomes[0], sa.exc.IntegrityError), outcomes
    assert outcomes[1] == [], f"the second work failed with the first's error: {outcomes[1]!r}"


async def test_a_work_that_swallows_a_database_error_does_not_report_lost_writes_committed(
        store: Store, migrated_postgres_url: str) -> None:
    """A work that catches a statement's error and returns: the transaction is aborted, so a
    result reported to a caller must not stand for writes that were never committed."""
    db = AsyncStore(store)
    session = new_session(store)

    def swallows(tx: Tx) -> str:
        with contextlib.suppress(sa.exc.DBAPIError):
            tx.connection.exec_driver_sql("SELECT 1 / 0")
        return "went on"

    outcomes = await asyncio.gather(db.write(lambda tx: tx.agents.count_turn(session.id)),
                                    db.write(swallows), return_exceptions=True)
    db.close()
    turns = turns_of(migrated_postgres_url, session.id)
    if turns == 0:  # nothing committed: no work may say it did
        assert all(isinstance(outcome, BaseException) for outcome in outcomes), outcomes


def database_at(url: str) -> Database:
    kind = engine_for(url)
    return Database(url=url, kind=kind, engine=kind.create_engine())


HOSTILE = ["it's", "back\\slash\\", "\\x00", "nul\x00inside", "$1 $2 %s %(x)s %% ?",
           "'); DROP TABLE tasks; --", "E'\\\\'", "$$ dollar $$", "\u2028\ufeff\U0001f600",
           "x" * 3_000_000, "", " -1", "NULL"]


async def test_hostile_text_goes_through_execute_of_prepared_statements_unchanged(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)

    def posts(text: str) -> Callable[[Tx], Any]:
        def work(tx: Tx) -> Any:
            post_to(session.id, text)(tx)
            tx.agents.count_turn(session.id)
            return tx.threads.get(session.id).id
        return work

    outcomes = await asyncio.gather(*(db.write(posts(text)) for text in HOSTILE),
                                    return_exceptions=True)
    db.close()
    assert outcomes == [session.id] * len(HOSTILE)
    stored = [text for (text,) in query(
        migrated_postgres_url, "SELECT text FROM inbox WHERE thread_id = ? ORDER BY id",
        session.id)]
    assert sorted(stored) == sorted(text.replace("\x00", "\ufffd") for text in HOSTILE)
    assert turns_of(migrated_postgres_url, session.id) == len(HOSTILE)


async def test_a_commit_carrying_writes_whose_answer_is_lost_writes_them_once(
        store: Store, migrated_postgres_url: str) -> None:
    """Works that only write: their writes go in the one query that ends with COMMIT; its
    answer is lost, and the batch must neither run again nor be lost."""
    session = new_session(store)
    cutter = CommitCutter(int(sa.make_url(migrated_postgres_url).port or 0))
    through = sa.make_url(migrated_postgres_url).set(port=cutter.port)
    database = database_at(through.render_as_string(hide_password=False))
    db = AsyncStore(Store(database))
    try:
        await db.write(lambda tx: tx.agents.count_turn(session.id))  # prepared on this session
        cutter.armed.set()
        outcomes = await asyncio.gather(*(db.write(lambda tx: tx.agents.count_turn(session.id))
                                          for _ in range(5)), return_exceptions=True)
        assert cutter.cut == 1
        assert outcomes == [None] * 5
        await db.write(lambda tx: tx.agents.count_turn(session.id))  # a new session: again
    finally:
        db.close()
        database.close()
        cutter.close()
    assert turns_of(migrated_postgres_url, session.id) == 7


async def test_a_backend_terminated_mid_batch_runs_it_again_with_statements_prepared_anew(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    await db.write(lambda tx: tx.agents.count_turn(session.id))
    killed: list[int] = []

    def kills_its_backend(tx: Tx) -> str:
        tx.agents.count_turn(session.id)
        if not killed:
            killed.append(1)
            with contextlib.suppress(sa.exc.OperationalError):
                tx.connection.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")
        return tx.threads.get(session.id).id

    outcomes = await asyncio.gather(db.write(lambda tx: tx.agents.count_turn(session.id)),
                                    db.write(kills_its_backend),
                                    db.write(lambda tx: tx.threads.get(session.id).id),
                                    return_exceptions=True)
    names = await db.write(lambda tx: tx.connection.exec_driver_sql(
        "SELECT count(*) FROM pg_prepared_statements WHERE starts_with(name, 'lace_')").scalar())
    db.close()
    assert list(outcomes) == [None, session.id, session.id]
    assert names and names > 0
    assert turns_of(migrated_postgres_url, session.id) == 3


UNTYPED_ONE = Prepared(sa.text("SELECT CAST(:one IS NULL AS INTEGER) AS review5_one"))
UNTYPED_TWO = Prepared(sa.text("SELECT CAST(:two IS NULL AS INTEGER) AS review5_two"))
"""Two statements the server refuses to PREPARE (42P18): each takes `_prepare_all`'s way
back (ROLLBACK TO SAVEPOINT; DEALLOCATE ALL) once in this process."""


async def test_statements_the_server_cannot_prepare_leave_psycopgs_own_cache_true(
        store: Store, migrated_postgres_url: str) -> None:
    """`DEALLOCATE ALL` in `_prepare_all` also drops the statements psycopg prepared itself:
    psycopg must forget them too (it does: the ROLLBACK in that query clears its cache), or
    the next plain statement on that connection fails with 26000 (here, after the AsyncStore
    gave its connection back to the pool, in a `Store.transaction`, which does not run
    again). Holds."""
    db = AsyncStore(store)
    session = new_session(store)

    def refused(statement: Prepared, name: str) -> Callable[[Tx], Any]:
        def work(tx: Tx) -> Any:
            for _ in range(2):  # no write queued: psycopg prepares it the second time
                tx.threads.get(session.id)
            tx.agents.count_turn(session.id)  # queued: the next goes in a simple query
            return statement.scalar(driver(tx.connection), {name: None})
        return work

    assert await db.write(refused(UNTYPED_ONE, "one")) == 1
    assert await db.write(refused(UNTYPED_TWO, "two")) == 1
    db.close()  # its connection goes back to the pool, psycopg's cache as it is
    with store.transaction() as tx:
        assert tx.threads.get(session.id).id == session.id


async def test_the_statements_a_session_prepares_stay_bounded(
        store: Store, migrated_postgres_url: str) -> None:
    """`append_all` of N events is a statement of its own for each N (`insert_events`); with a
    write queued before it, lace PREPAREs it on the session and keeps it for the session's
    life: measured here, 200 counts held 202 statements and took the backend from 2.2 MB to
    66 MB. psycopg's own cache stops at `prepared_max` (100) and deallocates the oldest."""
    db = AsyncStore(store)
    session = new_session(store)

    def appends(count: int) -> Callable[[Tx], None]:
        def work(tx: Tx) -> None:
            tx.agents.count_turn(session.id)  # queued: append_all then goes as EXECUTE
            tx.events.append_all(session.id, [("user_message", {"content": "x"})] * count)
        return work

    for count in range(2, 152):
        await db.write(appends(count))
    prepared = await db.write(lambda tx: tx.connection.exec_driver_sql(
        "SELECT count(*) FROM pg_prepared_statements WHERE starts_with(name, 'lace_')"
    ).scalar())
    db.close()
    assert prepared is not None and prepared <= 100


class Unadaptable:
    """A value psycopg cannot send (a bug's, not a person's): it fails only when bound."""


async def test_a_carried_write_whose_value_cannot_be_bound_fails_its_own_work_only(
        store: Store, migrated_postgres_url: str) -> None:
    """The first work queues a write holding a value psycopg cannot adapt; it is bound only
    when the writes are sent, at the next work's statement or at the COMMIT, outside the
    `try` that marks an error unattributed."""
    db = AsyncStore(store)
    session = new_session(store)
    outcomes = await asyncio.gather(
        db.write(lambda tx: tx.agents.update(session.id, workspace=Unadaptable())),
        db.write(lambda tx: tx.threads.get(session.id).id),
        db.write(lambda tx: tx.agents.count_turn(session.id)),
        return_exceptions=True)
    db.close()
    assert isinstance(outcomes[0], Exception)
    assert list(outcomes[1:]) == [session.id, None], outcomes


async def test_hostile_json_goes_through_execute_of_prepared_statements_unchanged(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)
    data = [{"content": text, "nested": [{"a": [text, None, True, 1.5, -0.0, 10**18]}]}
            for text in HOSTILE if len(text) < 1000]

    def appends(tx: Tx) -> Later[list[int]]:
        tx.agents.count_turn(session.id)  # queued: the INSERT goes as EXECUTE, after it
        return tx.events.append_all(session.id, [("user_message", item) for item in data])

    ids = (await db.write(appends)).value
    stored = await db.read(lambda tx: [event.data for event in tx.events.latest(
        session.id, len(data))[0]])
    db.close()
    assert len(ids) == len(data)
    expected = [{**item, "content": str(item["content"]).replace("\x00", "\ufffd"),
                 "nested": [{"a": [str(item["content"]).replace("\x00", "\ufffd"), None, True,
                                   1.5, -0.0, 10**18]}]} for item in data]
    assert stored == expected


PERCENT = Prepared(sa.text(
    "SELECT CAST(:a AS TEXT) || '%' || CAST(:a AS TEXT) || '%(b)s %%s $1' || CAST(:b AS TEXT)"
    " AS joined"))
"""Literal `%` (and what looks like placeholders) in a statement, a parameter used twice."""


async def test_literal_percent_and_a_parameter_used_twice_survive_prepare(
        store: Store, migrated_postgres_url: str) -> None:
    db = AsyncStore(store)
    session = new_session(store)

    def joined(tx: Tx) -> Any:
        tx.agents.count_turn(session.id)  # queued: the SELECT goes as EXECUTE after it
        return PERCENT.scalar(driver(tx.connection), {"a": "x'%s", "b": "$2"})

    assert await db.write(joined) == "x'%s%x'%s%(b)s %%s $1$2"
    assert await db.write(joined) == "x'%s%x'%s%(b)s %%s $1$2"
    db.close()
