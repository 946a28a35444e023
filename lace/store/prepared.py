"""Hot statements: built with SQLAlchemy from the schema, compiled once, and run on the raw
sqlite3 connection of the open transaction.

SQLAlchemy's execution path costs about 15-20 us per statement, four to five times what SQLite
takes for these one-row statements, and the runtime runs about 80 of them per agent. The SQL
text and the type conversions (JSON columns) still come from SQLAlchemy and `schema`; only the
per-execution machinery is skipped."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.compiler import SQLCompiler

from lace.store import schema

DIALECT = sqlite.dialect(paramstyle="named")
Row = dict[str, Any]


def _processor(type_: sa.types.TypeEngine[Any], *, result: bool) -> Callable[[Any], Any] | None:
    impl = type_.dialect_impl(DIALECT)
    return impl.result_processor(DIALECT, None) if result else impl.bind_processor(DIALECT)


class Prepared:
    """One statement compiled to SQLite SQL with named parameters, plus its conversions."""

    def __init__(self, statement: sa.ClauseElement, *,
                 columns: Sequence[str] | None = None) -> None:
        compiled = cast(SQLCompiler, statement.compile(
            dialect=DIALECT, column_keys=list(columns or []) or None))
        if any(bind.expanding for bind in compiled.binds.values()):
            raise ValueError("expanding IN parameters cannot be prepared; use json_list")
        self.sql = compiled.string
        self._binds = {name: processor for name, bind in compiled.binds.items()
                       if (processor := _processor(bind.type, result=False))}
        # literals in the statement (`status != 'stopped'`) are binds with a fixed value
        self._fixed = {name: self._binds[name](bind.value) if name in self._binds else bind.value
                       for name, bind in compiled.binds.items() if not bind.required}
        selected = list(statement.selected_columns) \
            if isinstance(statement, sa.Select | sa.TextualSelect) else []
        self.columns = tuple(str(column.key) for column in selected)
        self._results = tuple((index, processor) for index, column in enumerate(selected)
                              if (processor := _processor(column.type, result=True)))

    def run(self, connection: sqlite3.Connection, params: Mapping[str, Any]) -> sqlite3.Cursor:
        """Execute with `params` converted for SQLite (JSON columns become text)."""
        if self._binds:
            params = {name: (self._binds[name](value) if name in self._binds else value)
                      for name, value in params.items()}
        if self._fixed:
            params = {**self._fixed, **params}
        try:
            return connection.execute(self.sql, params)
        except sqlite3.Error as error:  # the same exceptions as SQLAlchemy's own statements
            raise sa.exc.DBAPIError.instance(self.sql, params, error, sqlite3.Error) from None

    def _row(self, values: tuple[Any, ...]) -> Row:
        if self._results:
            converted = list(values)
            for index, processor in self._results:
                converted[index] = processor(converted[index])
            values = tuple(converted)
        return dict(zip(self.columns, values, strict=True))

    def rows(self, connection: sqlite3.Connection, params: Mapping[str, Any]) -> list[Row]:
        """Every result row, as dicts keyed by column name."""
        return [self._row(values) for values in self.run(connection, params)]

    def first(self, connection: sqlite3.Connection, params: Mapping[str, Any]) -> Row | None:
        """The first result row, or None."""
        values = self.run(connection, params).fetchone()
        return None if values is None else self._row(values)

    def scalar(self, connection: sqlite3.Connection, params: Mapping[str, Any]) -> Any:
        """The first column of the first row (the statement must return one)."""
        return self.run(connection, params).fetchone()[0]


@lru_cache(maxsize=64)
def update_by_key(table_name: str, keys: tuple[str, ...]) -> Prepared:
    """`UPDATE table SET <keys> WHERE <primary key> = :key_value`, one per set of keys."""
    table = schema.metadata.tables[table_name]
    (primary,) = table.primary_key.columns
    statement = table.update().where(primary == sa.bindparam("key_value"))
    return Prepared(statement, columns=keys)


@lru_cache(maxsize=64)
def insert_into(table_name: str, keys: tuple[str, ...]) -> Prepared:
    """`INSERT INTO table (<keys>) VALUES (...)`, one per set of keys."""
    return Prepared(schema.metadata.tables[table_name].insert(), columns=keys)


def json_list(column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
    """`column IN (the JSON array bound to :name)`: one statement for any number of values."""
    values = sa.func.json_each(sa.bindparam(name)).table_valued("value")
    return column.in_(sa.select(values.c.value))
