"""What every part of a transaction shares: its connection (SQLAlchemy's and the driver's
own, for prepared statements) and the conversion of a row into a record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import sqlalchemy as sa

from lace.core.records import Agent, Event, InboxItem, Note, Task, Thread

RecordT = TypeVar("RecordT", Agent, Event, InboxItem, Note, Task, Thread)


def record(cls: type[RecordT], row: sa.Row[Any] | Mapping[str, Any]) -> RecordT:
    """The record of a row: its columns that are fields of `cls`."""
    mapping = row._mapping if isinstance(row, sa.Row) else row
    return cls(**{key: mapping[key] for key in cls.__dataclass_fields__ if key in mapping})


class Rows:
    """Verbs over one table, in the open transaction of `connection` (the `Store` commits or
    rolls back around it); `raw` is its driver connection, which prepared statements use."""

    def __init__(self, connection: sa.Connection, raw: Any) -> None:
        self.connection = connection
        self.raw = raw

    def _execute(self, statement: sa.Executable,
                 parameters: dict[str, Any] | None = None) -> sa.CursorResult[Any]:
        return self.connection.execute(statement, parameters)
