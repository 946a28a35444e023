"""The store: owns the engine and its transactions, and hands out `Tx` verbs inside them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lace.store.db import READONLY_OPTION, Database
from lace.store.tx import Tx


class Store:
    """Owns the engine and the transactions; callers get a `Tx` and never commit themselves."""

    def __init__(self, database: Database) -> None:
        self.database = database

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A write transaction (BEGIN IMMEDIATE): committed on success, rolled back on error."""
        with self.database.engine.connect() as connection, connection.begin():
            yield Tx(connection)

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
