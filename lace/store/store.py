"""The store: owns the engine and its transactions, and hands out `Tx` verbs inside them."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TypeVar

from lace.store.db import READONLY_OPTION, Database, LockBusyError
from lace.store.tx import Tx

T = TypeVar("T")
MOST_ATTEMPTS = 50
"""Attempts of one write before a conflict is given to its caller: each attempt that fails
lost to a transaction that committed, so the board moves on, but a bug must not loop."""
ALONE_AFTER = 2
"""Conflicts after which a write runs alone (waiting for a busy database is no conflict)."""
FIRST_PAUSE_S = 0.001


def pause_before(attempt: int) -> None:
    """A short random wait after attempt `attempt` (1, 2, ...) of a write undone by a
    conflict, doubling up to about 0.1 s, so the writers that met do not meet again."""
    time.sleep(random.uniform(0, FIRST_PAUSE_S * 2 ** min(attempt, 7)))


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

    def write(self, work: Callable[[Tx], T]) -> T:
        """`work` in a write transaction, run again whenever a concurrent writer undid it
        (`Engine.is_conflict`) or held the database; after ALONE_AFTER conflicts it runs alone
        (`Engine.alone`), so a long write cannot keep losing to short ones; its result once
        committed."""
        kind = self.database.kind
        attempt = conflicts = 0
        while True:
            attempt += 1
            try:
                with self.database.engine.connect() as connection, \
                        kind.alone(connection) if conflicts >= ALONE_AFTER else nullcontext(), \
                        connection.begin():
                    return work(Tx(connection))
            except Exception as error:
                conflicts += kind.is_conflict(error)
                busy = isinstance(error, LockBusyError)
                if attempt >= MOST_ATTEMPTS or not (busy or kind.is_conflict(error)):
                    raise
            pause_before(attempt)

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
