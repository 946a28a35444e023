"""One transaction on a PostgreSQL server, run again until it commits when the server drops,
ends or refuses lace's connection (`reconnect.is_retried`), waiting longer between attempts,
and when a concurrent writer committed first (`Engine.is_conflict`), running alone after
ALONE_AFTER such conflicts, as `Store.write` does.

A fault before COMMIT undoes everything, so the work simply runs again on a new connection.
A fault during COMMIT leaves the outcome unknown: the transaction's id comes back with its
BEGIN (`Engine.begin`), and after reconnecting the server says whether it committed
(`pg_xact_status`): if so the work's result stands and it is not run again, so nothing is
written twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, TypeVar

import sqlalchemy as sa

from lace.store.conflicts import ALONE_AFTER, MOST_ATTEMPTS, pause_before
from lace.store.db import READONLY_OPTION, Database, LockBusyError, driver
from lace.store.engines.reconnect import Backoff, commit_outcome, is_retried
from lace.store.prepared import answer_after_lost_commit

T = TypeVar("T")
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
               stopping: Callable[[], bool], lost: Any) -> bool:
    """Whether the transaction whose COMMIT was cut off committed, asked again until the
    server answers and no longer runs it; if so, the answers that were to come with its
    COMMIT on the driver's connection `lost` are read back (`answer_after_lost_commit`)."""
    while True:
        connection = None
        try:
            connection = database.engine.connect()
            outcome = commit_outcome(connection, transaction_id)
            if outcome:
                answer_after_lost_commit(lost, driver(connection), transaction_id)
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


def never() -> bool:
    """Never stop trying."""
    return False


class KeptConnection:
    """The connection one thread runs its transactions on, kept between them (taking one from
    the pool costs a round trip to check it); dropped when the server ends its session."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._connection: sa.Connection | None = None

    def take(self, *, write: bool) -> sa.Connection:
        if self._connection is None:
            self._connection = self.database.engine.connect()
        return self._connection.execution_options(**{READONLY_OPTION: not write})

    def give_back(self) -> None:
        """Keep it for the next transaction."""

    def undo(self) -> None:
        """Roll back the transaction a failed work left open, then give the connection back."""
        try:
            if self._connection is not None:
                driver(self._connection).rollback()
                if self._connection.in_transaction():
                    self._connection.rollback()
            self.give_back()
        except Exception as error:
            if not is_retried(error):
                raise
            self.drop()

    def drop(self) -> None:
        _discard(self._connection)
        self._connection = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class PooledConnection(KeptConnection):
    """A connection from the pool for one transaction, given back after it."""

    def give_back(self) -> None:
        self.close()


def _commit(raw: Any) -> None:
    raw.commit()


def run_transaction(database: Database, work: Callable[[sa.Connection], T], *, write: bool,
                    stopping: Callable[[], bool] = never,
                    kept: KeptConnection | None = None,
                    commit: Callable[[Any], None] = _commit) -> T:
    """`work` in one transaction (a write, or a read of one snapshot) on the `kept` connection
    (else one from the pool), ended by `commit` on the driver's connection, run again on a new
    connection after every PostgreSQL fault until it commits; GaveUpError once `stopping` says
    so between attempts. Blocks: call it off the event loop."""
    connections = kept or PooledConnection(database)
    kind = database.kind
    backoff = Backoff(kind.shown())
    conflicts = 0
    while True:
        committing = None  # the id of the transaction whose COMMIT was sent
        try:
            connection = connections.take(write=write)
            alone = write and conflicts >= ALONE_AFTER  # a write that kept losing to others
            with kind.alone(connection) if alone else nullcontext():
                transaction_id = kind.begin(connection, write=write)  # SQLAlchemy's costs more
                result = work(connection)
                raw = driver(connection)
                committing = transaction_id
                commit(raw)
                if connection.in_transaction():  # a SQLAlchemy statement joined: end its part
                    connection.commit()
        except LockBusyError:  # a write runs alone: wait for it outside any transaction
            try:
                kind.wait_for_alone(connection)
            except Exception as error:
                if not is_retried(error):
                    raise
                connections.drop()
                _wait(backoff, error, stopping)
            continue
        except Exception as error:
            if kind.is_conflict(error) and conflicts + 1 < MOST_ATTEMPTS:
                connections.undo()  # another writer committed first: undone, run it again
                conflicts += 1
                pause_before(conflicts)
                continue
            if not is_retried(error):
                connections.undo()
                raise
            connections.drop()
            if committing is not None and _committed(database, committing, backoff, stopping,
                                                     raw):
                return result  # the COMMIT went through; only its answer was lost
            _wait(backoff, error, stopping)
            continue
        try:
            connections.give_back()
        except Exception as error:  # after COMMIT a fault changes nothing: never run it again
            if not is_retried(error):
                raise
            connections.drop()
        return result
