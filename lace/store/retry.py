"""One transaction on a PostgreSQL server, run again until it commits when the server drops,
ends or refuses lace's connection (`reconnect.is_retried`), waiting longer between attempts.

A fault before COMMIT undoes everything, so the work simply runs again on a new connection.
A fault during COMMIT leaves the outcome unknown: the transaction's id is read just before
COMMIT, and after reconnecting the server says whether it committed (`pg_xact_status`): if so
the work's result stands and it is not run again, so nothing is written twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from lace.store.db import READONLY_OPTION, Database
from lace.store.engines.reconnect import Backoff, commit_outcome, is_retried

T = TypeVar("T")
TRANSACTION_ID = "SELECT CAST(pg_current_xact_id() AS text)"
OUTCOME_POLL_S = 0.1


class GaveUpError(Exception):
    """The process is stopping: a transaction the server keeps refusing is not tried again."""


def _discard(connection: sa.Connection | None) -> None:
    """Drop a connection whose session the server ended, so the pool never hands it out."""
    if connection is None:
        return
    try:
        connection.invalidate()
        connection.close()
    except Exception:  # it is gone either way
        pass


def _committed(database: Database, transaction_id: str, backoff: Backoff,
               stopping: Callable[[], bool]) -> bool:
    """Whether the transaction whose COMMIT was cut off committed, asked again until the
    server answers and no longer runs it."""
    while True:
        connection = None
        try:
            connection = database.engine.connect()
            outcome = commit_outcome(connection, transaction_id)
            connection.rollback()
            connection.close()
            if outcome is not None:
                return outcome
            time.sleep(OUTCOME_POLL_S)
        except sa.exc.DBAPIError as error:
            if not is_retried(error):
                raise
            _discard(connection)
            _wait(backoff, error, stopping)


def _wait(backoff: Backoff, error: BaseException, stopping: Callable[[], bool]) -> None:
    if stopping():
        raise GaveUpError(f"lace stopped trying to reach the database: {error}") from error
    time.sleep(backoff.next_delay(error))


def _never() -> bool:
    return False


def run_transaction(database: Database, work: Callable[[sa.Connection], T], *, write: bool,
                    stopping: Callable[[], bool] = _never) -> T:
    """`work` in one transaction (a write, or a read of one snapshot), run again on a new
    connection after every PostgreSQL fault until it commits; GaveUpError once `stopping`
    says so between attempts. Blocks: call it off the event loop."""
    backoff = Backoff(database.kind.shown())
    while True:
        connection = None
        transaction_id = None
        try:
            connection = database.engine.connect()
            if not write:
                connection = connection.execution_options(**{READONLY_OPTION: True})
            transaction = connection.begin()
            result = work(connection)
            if write:
                transaction_id = connection.exec_driver_sql(TRANSACTION_ID).scalar()
            transaction.commit()
            connection.close()
            return result
        except Exception as error:
            if not is_retried(error):
                if connection is not None:
                    connection.close()
                raise
            _discard(connection)
            if transaction_id is not None and _committed(database, transaction_id, backoff,
                                                         stopping):
                return result  # the COMMIT went through; only its answer was lost
            _wait(backoff, error, stopping)
