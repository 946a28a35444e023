"""The store: owns the engine and its transactions, and hands out `Tx` verbs inside them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TypeVar

from lace.store.conflicts import ALONE_AFTER, MOST_ATTEMPTS, pause_before
from lace.store.db import READONLY_OPTION, Database, LockBusyError
from lace.store.retry import never, run_transaction
from lace.store.tx import Tx

T = TypeVar("T")


class Store:
    """Owns the engine and the transactions; callers get a `Tx` and never commit themselves."""

    def __init__(self, database: Database) -> None:
        self.database = database

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A write transaction (BEGIN IMMEDIATE): committed on success, rolled back on error.
        One attempt: on PostgreSQL a concurrent writer can undo it (`write` runs it again)."""
        with self.database.engine.connect() as connection, connection.begin():
            yield Tx(connection)

    def write(self, work: Callable[[Tx], T], *, stopping: Callable[[], bool] = never) -> T:
        """`work` in a write transaction, run again whenever a concurrent writer undid it
        (`Engine.is_conflict`), or once a write that runs alone is done; after ALONE_AFTER
        conflicts it runs alone (`Engine.alone`), so a long write cannot keep losing to short
        ones. Its result once committed. On a server it is also run again after a fault, a
        COMMIT whose answer was lost settled first (`run_transaction`), until `stopping`."""
        if self.database.path is None:
            return run_transaction(self.database, lambda connection: work(Tx(connection)),
                                   write=True, stopping=stopping)
        kind = self.database.kind
        conflicts = 0
        while True:
            try:
                with self.database.engine.connect() as connection:
                    try:
                        with kind.alone(connection) if conflicts >= ALONE_AFTER \
                                else nullcontext(), connection.begin():
                            return work(Tx(connection))
                    except LockBusyError:  # a write runs alone: begin again after it
                        kind.wait_for_alone(connection)
                        continue
            except Exception as error:
                if conflicts + 1 >= MOST_ATTEMPTS or not kind.is_conflict(error):
                    raise
            conflicts += 1
            pause_before(conflicts)

    @contextmanager
    def reading(self) -> Iterator[Tx]:
        """A read transaction (BEGIN DEFERRED) that sees one consistent snapshot."""
        with self.database.engine.connect() as connection:
            connection = connection.execution_options(**{READONLY_OPTION: True})
            with connection.begin():
                yield Tx(connection)

    def close(self) -> None:
        """Close the database."""
        self.database.close()
