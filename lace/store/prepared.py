"""Hot statements: built with SQLAlchemy from the schema, compiled once per dialect, and run on
the raw sqlite3 or psycopg connection of the open transaction (psycopg prepares them on the
server).

SQLAlchemy's execution path costs about 15-20 us per statement, four to five times what SQLite
takes for these one-row statements, and the runtime runs dozens of them per agent. The SQL
text and the type conversions (JSON columns) still come from SQLAlchemy and `schema`; only the
per-execution machinery is skipped.

On PostgreSQL every statement is a round trip to the server, which one thread runs for the
whole process (`lace.runtime.database`): a write whose answer nobody reads (`send`) waits, in a
block of `deferred_writes` (or past it, `carried_writes`), and goes out with the next statement
that needs an answer, in one simple query of `EXECUTE`s of statements prepared once per session
(`_prepare_all`): one round trip for them all; so does a write whose answer is read only after
the commit (`Prepared.later`: an event's id). That thread is what bounds a fan-out on one
process (busy 95 % of the 300-task fan-out), so what counts is the statements that need an
answer: 32 per helper once, about 12 now (tests/test_round_trips.py bounds them)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Generic, TypeVar, cast
from weakref import WeakKeyDictionary, WeakSet

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from lace.store import schema

_PSYCOPG = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
DIALECTS: dict[str, sa.Dialect] = {"sqlite": sqlite.dialect(paramstyle="named"),
                                   "postgresql": _PSYCOPG}
Row = dict[str, Any]
T = TypeVar("T")


def _processor(dialect: sa.Dialect, type_: sa.types.TypeEngine[Any], *,
               result: bool) -> Callable[[Any], Any] | None:
    if result and dialect.name == "postgresql" and isinstance(type_, sa.Float):
        return None  # psycopg reads double precision as float already
    impl = type_.dialect_impl(dialect)
    return impl.result_processor(dialect, None) if result else impl.bind_processor(dialect)


def dialect_of(connection: Any) -> str:
    """The dialect of a raw driver connection: sqlite3's, else psycopg's."""
    return "sqlite" if isinstance(connection, sqlite3.Connection) else "postgresql"


class Later(Generic[T]):
    """The answer of a statement queued with the writes (`Prepared.later`, `Insert.later_id`):
    it arrives with them, in the round trip of the next statement that needs an answer or of
    the COMMIT, so reading it after the transaction costs no round trip of its own. Read in the
    transaction, it sends what is queued first (a round trip, as any read). An INSERT's ids
    are read back from its rows when only the answer to the COMMIT they went with was lost
    (`answer_after_lost_commit`): `inserted` names its table and how many rows it wrote, and
    `from_ids` makes the answer of their ids."""

    def __init__(self, connection: Any, convert: Callable[[Any], T],
                 queue: Queued | None = None, *, inserted: tuple[str, int] | None = None,
                 from_ids: Callable[[list[int]], T] | None = None) -> None:
        self._connection, self._convert, self._queue = connection, convert, queue
        self._value: T | None = None
        self._sent = False
        self.inserted, self._from_ids = inserted, from_ids

    @classmethod
    def known(cls, value: T) -> Later[T]:
        """An answer there already."""
        later: Later[T] = cls(None, lambda _cursor: value)
        later.fill(None)
        return later

    def fill(self, cursor: Any) -> None:
        """Take the answer from `cursor`, on the statement's result."""
        self._value, self._sent = self._convert(cursor), True

    def fill_ids(self, ids: list[int]) -> None:
        """Take the answer from the ids of the rows the statement inserted."""
        if self._from_ids is not None:
            self._value, self._sent = self._from_ids(ids), True

    @property
    def sent(self) -> bool:
        return self._sent

    @property
    def value(self) -> T:
        if not self._sent and _queued.get(self._connection) is self._queue:  # in its block
            flush_queued(self._connection)
        if not self._sent:
            raise RuntimeError("the statement was never sent: its transaction was undone")
        return cast(T, self._value)


class Queued(list[tuple[str, Mapping[str, Any], Later[Any] | None]]):
    """The writes a psycopg connection holds back (`deferred_writes`), in order; `carried`
    when they outlive the blocks that queued them (`carried_writes`)."""

    def __init__(self, *, carried: bool = False) -> None:
        super().__init__()
        self.carried = carried
        self.laters: list[Later[Any]] = []
        """Every `Later` queued here, in order, sent or not (`answer_after_lost_commit`)."""


_queued: WeakKeyDictionary[Any, Queued] = WeakKeyDictionary()
_unanswered: WeakKeyDictionary[Any, list[Later[Any]]] = WeakKeyDictionary()
"""The `Later`s of the transaction on each connection whose COMMIT (which they went with)
raised: its answer may be lost though it committed (`answer_after_lost_commit`)."""
_unattributed: WeakSet[Any] = WeakSet()
"""Connections where a statement sent with carried writes failed: whose error it is, is
unknown (`queued_write_failed`)."""


@contextmanager
def deferred_writes(connection: Any) -> Iterator[None]:
    """In the block, `send` on the psycopg connection `connection` queues its write; the
    queue goes to the server before any other statement on it (`Compiled.run`, and
    SQLAlchemy's through `send_queued`) and at the end of the block, so each error still
    comes out of the block that caused it. An error in the block drops what is queued: its
    transaction is undone. On SQLite (in process, no round trip) `send` runs at once."""
    if dialect_of(connection) == "sqlite" or connection in _queued:
        yield
        return
    _queued[connection] = Queued()
    _unattributed.discard(connection)
    try:
        yield
        flush_queued(connection)
    finally:
        _queued.pop(connection, None)


@contextmanager
def carried_writes(connection: Any) -> Iterator[None]:
    """`deferred_writes` for a whole transaction: the writes queued in the block (and in the
    blocks in it, which then send nothing at their end) go out with the next statement that
    needs an answer, whichever block asks it, and what is left with the COMMIT (`commit`): a
    round trip fewer per block. The price: an error of a statement sent with queued writes
    may be theirs, of an earlier block; `queued_write_failed` then says so, and the caller
    runs the transaction again in plain `deferred_writes` blocks to learn whose it is. An
    error in the block drops what is queued (its transaction is undone)."""
    if dialect_of(connection) == "sqlite":
        yield
        return
    _queued[connection] = Queued(carried=True)
    _unattributed.discard(connection)
    try:
        yield
    except BaseException:
        _queued.pop(connection, None)
        raise


def queued_write_failed(connection: Any) -> bool:
    """Whether, since its `carried_writes` block began, a statement sent on `connection` with
    carried writes failed (the error may be any of theirs)."""
    return connection in _unattributed


def end_block(connection: Any) -> None:
    """The end of a block whose writes' errors must come out in it: its queued writes are
    sent now (`flush_queued`), unless they are carried (`carried_writes`)."""
    queued = _queued.get(connection)
    if queued is not None and not queued.carried:
        flush_queued(connection)


class AbortedTransactionError(Exception):
    """A statement of the transaction failed and its work went on (it caught the error): the
    server undid everything, so nothing of it may be reported committed."""

    def __init__(self) -> None:
        super().__init__("a statement of this transaction failed and its work went on: "
                         "nothing of it was written")


def transaction_aborted(connection: Any) -> bool:
    """Whether a failed statement ended the open transaction of the psycopg `connection` (its
    COMMIT would undo everything, and the server would answer without an error)."""
    from psycopg.pq import TransactionStatus

    return bool(connection.info.transaction_status == TransactionStatus.INERROR)


def commit(connection: Any) -> None:
    """COMMIT the open transaction of the raw `connection`, in one round trip with the writes
    still queued (`carried_writes`); AbortedTransactionError if a failed statement ended it."""
    _unanswered.pop(connection, None)
    if transaction_aborted(connection):
        _queued.pop(connection, None)
        raise AbortedTransactionError
    queued = _queued.pop(connection, None)
    if not queued:
        connection.commit()
        return
    try:
        _in_one_query(connection, queued, "COMMIT")
    except BaseException:
        if any(not later.sent for later in queued.laters):
            _unanswered[connection] = queued.laters
        raise


def answer_after_lost_commit(lost: Any, connection: Any, transaction_id: str) -> None:
    """Once the transaction `transaction_id` (`pg_current_xact_id()`) of the psycopg
    connection `lost`, whose COMMIT's answer was lost, is found committed: the answers of the
    INSERTs that went with that COMMIT (`Later`), read back on `connection` from the rows the
    transaction wrote (their `xmin`), each table's in the order their ids were drawn, which is
    the order its INSERTs ran (the `Later`s answered before the COMMIT take their ids too)."""
    laters = _unanswered.get(lost, [])
    xid = str(int(transaction_id) % 2 ** 32)  # xmin is the id's lower 32 bits
    for table in dict.fromkeys(later.inserted[0] for later in laters
                               if later.inserted is not None and not later.sent):
        ids = [int(row[0]) for row in connection.execute(
            f'SELECT id FROM "{table}" WHERE xmin = CAST(%(xid)s AS xid) ORDER BY id',
            {"xid": xid})]
        counts = [(later, later.inserted[1]) for later in laters
                  if later.inserted is not None and later.inserted[0] == table]
        if len(ids) != sum(count for _later, count in counts):
            continue  # a row changed since (a new xmin): left unknown, never a wrong id
        for later, count in counts:
            taken, ids = ids[:count], ids[count:]
            if not later.sent:
                later.fill_ids(taken)
    _unanswered.pop(lost, None)


def flush_queued(connection: Any) -> None:
    """Send the writes queued on `connection` (`send_queued`), an error raised as SQLAlchemy
    raises a statement's."""
    try:
        send_queued(connection)
    except Exception as error:
        raise _as_statement_error(error, "(the writes queued in this block)", {}) from None


def send_queued(connection: Any) -> None:
    """Send the writes queued on `connection` (one round trip), if any. Raises the driver's
    own error, as the statement that hit it would have."""
    queued = _queued.get(connection)
    if queued:
        _in_one_query(connection, queued)


def _in_one_query(connection: Any, queued: Queued, sql: str | None = None,
                  params: Mapping[str, Any] | None = None) -> Any:
    """The `queued` writes, then `sql` (its cursor, or None), as one simple query (bound here):
    one round trip, which the server answers whole. Not a psycopg pipeline: there the server
    reads the statements as they come and arms its idle-in-transaction timeout only at the
    final Sync, so a process stopped (SIGSTOP) between the two left its transaction holding its
    locks with no timeout, for as long as the process stayed stopped."""
    from psycopg import ClientCursor

    writes = list(queued)
    carried = queued.carried and bool(writes)  # a queued write went out: whose error?
    queued.clear()  # sent, or, on an error, undone with the transaction
    if sql is not None and params is not None:
        writes.append((sql, params, None))
    cursor = ClientCursor(connection)
    try:  # binding a queued write's values may fail too, as may any of them on the server
        _prepare_all(cursor, [text for text, _values, _later in writes])
        texts = [_executed(cursor, text, values) for text, values, _later in writes]
        if sql is not None and params is None:
            texts.append(sql)
        cursor.execute(";\n".join(texts))
    except Exception:
        if carried:
            _unattributed.add(connection)
        raise
    for index, (_text, _values, later) in enumerate(writes):  # one result each, in order
        if index:
            cursor.nextset()
        if later is not None:
            later.fill(cursor)
    if sql is None:
        return None
    while cursor.nextset():  # the last statement's result
        pass
    return cursor


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
_PREPARED_NAME = "lace_{}"
_prepared: WeakKeyDictionary[Any, OrderedDict[str, str]] = WeakKeyDictionary()
"""The statements each psycopg connection's session has prepared (`PREPARE`), by SQL, the
least recently used first."""
MAX_PREPARED = 100
"""The most statements lace keeps prepared in one session (psycopg's own cache keeps as many)."""
_unknown_prepared: WeakSet[Any] = WeakSet()
"""Connections whose session may hold statements lace does not know of: a batch of PREPAREs
failed midway (not refused), and those before the failed one outlive its transaction."""
_unpreparable: set[str] = set()
"""Statements the server refused to prepare (a parameter whose type it cannot infer): their
values are bound here instead."""


@lru_cache(maxsize=256)
def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with its `%(name)s` placeholders as `$1`, `$2`, ... (PREPARE's), and the names in
    that order."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, sql), tuple(names)


def _executed(cursor: Any, sql: str, params: Mapping[str, Any]) -> str:
    """The text that runs `sql` with `params` in a simple query: `EXECUTE` of the statement
    prepared in this session (`_prepare_all`), which the server neither parses nor plans
    again (half the time of the statement with its values bound here, which is what a
    statement the server cannot prepare gets)."""
    known = _prepared.get(cursor.connection)
    name = None if known is None else known.get(sql)
    if name is None:
        return str(cursor.mogrify(sql, params))
    _text, names = _positional(sql)
    if not names:
        return f"EXECUTE {name}"
    arguments = ", ".join(f"%({parameter})s" for parameter in names)
    return str(cursor.mogrify(f"EXECUTE {name}({arguments})", params))


def _prepare_all(cursor: Any, statements: Sequence[str]) -> None:
    """Prepare in the session of the `cursor`'s connection those of `statements` it has not,
    all in one round trip (each once per session, until a ROLLBACK ends them all:
    `forget_prepared`; after a conflict a transaction runs again with most of them to prepare
    anew), keeping at most MAX_PREPARED there (the least used deallocated). A PREPARE outlives
    the transaction it ran in, even one that is undone. When the server refuses one, they are
    prepared one at a time instead (`_prepare_each`), which finds it."""
    from psycopg import Error
    from psycopg.pq import TransactionStatus

    connection = cursor.connection
    known = _prepared.setdefault(connection, OrderedDict())
    missing = []
    for sql in dict.fromkeys(statements):
        if sql in known:
            known.move_to_end(sql)
        elif sql not in _unpreparable:
            missing.append(sql)
    if len(missing) > 1 and connection.info.transaction_status != TransactionStatus.IDLE:
        names = {sql: _name_of(sql) for sql in missing}
        try:
            cursor.execute("; ".join(["SAVEPOINT lace_prepare", *(
                f"PREPARE {name} AS {_positional(sql)[0]}" for sql, name in names.items()),
                "RELEASE lace_prepare"]))
        except Error as error:
            if str(error.sqlstate)[:2] not in _REFUSALS:
                _unknown_prepared.add(connection)  # those before it stay: end them all
                raise
            _undo_prepares(cursor)
        else:
            known.update(names)
            missing = []
    if missing:
        _prepare_each(cursor, missing if connection in _prepared else statements)
    if (kept := _prepared.get(connection)) is not None:
        _keep_at_most(cursor, kept, MAX_PREPARED)


_REFUSALS = ("42", "0A")
"""The classes of errors of a PREPARE the server refuses (a parameter type it cannot infer,
a statement it cannot prepare): its values are bound here instead."""


def _name_of(sql: str) -> str:
    return _PREPARED_NAME.format(hashlib.blake2b(sql.encode(), digest_size=8).hexdigest())


def _undo_prepares(cursor: Any) -> None:
    """After a PREPARE refused inside the savepoint: back to it, and end every statement of
    the session, as psycopg may have after a ROLLBACK, so that each is prepared anew."""
    cursor.execute("ROLLBACK TO SAVEPOINT lace_prepare; RELEASE lace_prepare; DEALLOCATE ALL")
    forget_prepared(cursor.connection)


def _prepare_each(cursor: Any, statements: Sequence[str]) -> None:
    """`_prepare_all`, a round trip for each statement: a refused one is never prepared again,
    and the others are prepared anew."""
    from psycopg import Error
    from psycopg.pq import TransactionStatus

    connection = cursor.connection
    wanted = [sql for sql in dict.fromkeys(statements) if sql not in _unpreparable]
    pending = list(wanted)
    while pending:
        sql = pending.pop(0)
        known = _prepared.setdefault(connection, OrderedDict())
        if sql in known:
            known.move_to_end(sql)
            continue
        text, name = _positional(sql)[0], _name_of(sql)
        if connection.info.transaction_status == TransactionStatus.IDLE:
            cursor.execute(f"PREPARE {name} AS {text}")
            known[sql] = name
            continue
        try:
            cursor.execute(f"SAVEPOINT lace_prepare; PREPARE {name} AS {text}; "
                           "RELEASE lace_prepare")
        except Error as error:
            if str(error.sqlstate)[:2] not in _REFUSALS:
                raise
            _undo_prepares(cursor)
            _unpreparable.add(sql)
            wanted = [sql for sql in wanted if sql not in _unpreparable]
            pending = list(wanted)
            continue
        known[sql] = name


def _keep_at_most(cursor: Any, known: OrderedDict[str, str], most: int) -> None:
    """Deallocate the least recently used of the session's statements past `most` (one round
    trip): a statement built per count of rows (`insert_events`) would otherwise pile up for
    the session's life, each holding its plan in the server process."""
    dropped = [known.popitem(last=False)[1] for _ in range(len(known) - most)]
    if dropped:
        cursor.execute("; ".join(f"DEALLOCATE {name}" for name in dropped))


def forget_prepared(connection: Any) -> bool:
    """After a ROLLBACK on `connection`, psycopg deallocates the statements it prepared, and
    ours may be among them: forget ours, each is prepared again when next used. Whether any
    were, or may be (`_unknown_prepared`): then the caller ends them all (`DEALLOCATE ALL`),
    so that none is left behind to collide with its next PREPARE."""
    unknown = connection in _unknown_prepared
    _unknown_prepared.discard(connection)
    return bool(_prepared.pop(connection, None)) or unknown


def _as_statement_error(error: Exception, sql: str, params: Mapping[str, Any]) -> Exception:
    """A driver's error as SQLAlchemy raises it for its own statements; any other as it is."""
    if isinstance(error, sqlite3.Error):
        return sa.exc.DBAPIError.instance(sql, params, error, sqlite3.Error)
    from psycopg import Error

    if isinstance(error, Error):
        return sa.exc.DBAPIError.instance(sql, params, error, Error)
    return error


class Compiled:
    """One statement compiled for one dialect, plus its conversions."""

    def __init__(self, statement: sa.ClauseElement, columns: Sequence[str] | None,
                 dialect: sa.Dialect) -> None:
        compiled = cast(SQLCompiler, statement.compile(
            dialect=dialect, column_keys=list(columns or []) or None))
        if any(bind.expanding for bind in compiled.binds.values()):
            raise ValueError("expanding IN parameters cannot be prepared; use json_list")
        self.sql = compiled.string
        self.postgres = dialect.name == "postgresql"
        self._binds = {name: processor for name, bind in compiled.binds.items()
                       if (processor := _processor(dialect, bind.type, result=False))}
        # literals in the statement (`status != 'stopped'`) are binds with a fixed value
        self._fixed = {name: self._binds[name](bind.value) if name in self._binds else bind.value
                       for name, bind in compiled.binds.items() if not bind.required}
        selected = list(statement.selected_columns) \
            if isinstance(statement, sa.Select | sa.TextualSelect) else []
        self.inserts_into: str | None = None
        if isinstance(statement, sa.Insert):  # its RETURNING columns, if any
            selected = list(statement.exported_columns)
            self.inserts_into = statement.table.name
        self.columns = tuple(str(column.key) for column in selected)
        self._results = tuple((index, processor) for index, column in enumerate(selected)
                              if (processor := _processor(dialect, column.type, result=True)))

    def bound(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """`params` converted for the driver (JSON columns become text)."""
        if self._binds:
            params = {name: (self._binds[name](value) if name in self._binds else value)
                      for name, value in params.items()}
        if self._fixed:
            params = {**self._fixed, **params}
        return params

    def run(self, connection: Any, params: Mapping[str, Any]) -> Any:
        """Execute with `params` converted for the driver, after the writes queued on the
        connection (`deferred_writes`)."""
        params = self.bound(params)
        try:
            queued = _queued.get(connection) if self.postgres else None
            if queued:
                return _in_one_query(connection, queued, self.sql, params)
            return connection.execute(self.sql, params)
        except Exception as error:  # the same exceptions as SQLAlchemy's own statements
            wrapped = _as_statement_error(error, self.sql, params)
            if wrapped is error:
                raise
            raise wrapped from None

    def row(self, values: Sequence[Any]) -> Row:
        if self._results:
            converted = list(values)
            for index, processor in self._results:
                converted[index] = processor(converted[index])
            values = converted
        return dict(zip(self.columns, values, strict=True))


class Prepared:
    """One statement, compiled once per dialect on first use; its SQL text and conversions
    come from SQLAlchemy and `schema`, only the per-execution machinery is skipped.
    `postgresql` replaces the statement there (where the two need different SQL)."""

    def __init__(self, statement: sa.ClauseElement, *,
                 columns: Sequence[str] | None = None,
                 postgresql: sa.ClauseElement | None = None) -> None:
        self._statements = {"sqlite": statement,
                            "postgresql": statement if postgresql is None else postgresql}
        self._columns = columns
        self._compiled: dict[str, Compiled] = {}
        self.sql = self._for("sqlite").sql

    def _for(self, dialect: str) -> Compiled:
        compiled = self._compiled.get(dialect)
        if compiled is None:
            compiled = self._compiled[dialect] = Compiled(
                self._statements[dialect], self._columns, DIALECTS[dialect])
        return compiled

    def run(self, connection: Any, params: Mapping[str, Any]) -> Any:
        """Execute on a raw sqlite3 or psycopg connection; returns its cursor."""
        return self._for(dialect_of(connection)).run(connection, params)

    def rows(self, connection: Any, params: Mapping[str, Any]) -> list[Row]:
        """Every result row, as dicts keyed by column name."""
        compiled = self._for(dialect_of(connection))
        return [compiled.row(values) for values in compiled.run(connection, params)]

    def send(self, connection: Any, params: Mapping[str, Any]) -> None:
        """Execute a write whose result nobody reads: queued while `connection` is in a block
        of `deferred_writes`, else at once."""
        compiled = self._for(dialect_of(connection))
        queued = _queued.get(connection) if compiled.postgres else None
        if queued is None:
            compiled.run(connection, params)
        else:
            queued.append((compiled.sql, compiled.bound(params), None))

    def later(self, connection: Any, params: Mapping[str, Any],
              convert: Callable[[list[Row]], T], inserts: int = 0) -> Later[T]:
        """`convert(rows)`, the statement sent as `send` sends a write: its `Later`, there
        once the queue goes out (at once where nothing is queued). An INSERT of `inserts`
        rows that returns their ids only: read back if the COMMIT's answer is lost."""
        compiled = self._for(dialect_of(connection))
        return self._later(connection, params, lambda cursor: convert(
            [compiled.row(values) for values in cursor]), inserts,
            lambda ids: convert([{"id": row_id} for row_id in ids]))

    def _later(self, connection: Any, params: Mapping[str, Any],
               convert: Callable[[Any], T], inserts: int,
               from_ids: Callable[[list[int]], T]) -> Later[T]:
        compiled = self._for(dialect_of(connection))
        queued = _queued.get(connection) if compiled.postgres else None
        table = compiled.inserts_into if compiled.columns == ("id",) else None
        later = Later(connection, convert, queued, from_ids=from_ids,
                      inserted=None if table is None or not inserts else (table, inserts))
        if queued is None:
            later.fill(compiled.run(connection, params))
        else:
            queued.append((compiled.sql, compiled.bound(params), later))
            queued.laters.append(later)
        return later

    def first(self, connection: Any, params: Mapping[str, Any]) -> Row | None:
        """The first result row, or None."""
        compiled = self._for(dialect_of(connection))
        values = compiled.run(connection, params).fetchone()
        return None if values is None else compiled.row(values)

    def scalar(self, connection: Any, params: Mapping[str, Any]) -> Any:
        """The first column of the first row (the statement must return one)."""
        return self._for(dialect_of(connection)).run(connection, params).fetchone()[0]


class Insert(Prepared):
    """An INSERT that tells the id of its row: SQLite's `lastrowid`, PostgreSQL's RETURNING."""

    def __init__(self, table: sa.Table, columns: Sequence[str], *,
                 postgresql: sa.ClauseElement | None = None) -> None:
        primary = list(table.primary_key.columns)
        returning = table.insert().returning(*primary) if len(primary) == 1 \
            and isinstance(primary[0].type, sa.Integer) else None
        super().__init__(table.insert(), columns=columns,
                         postgresql=returning if postgresql is None else postgresql)

    def inserted_id(self, connection: Any, params: Mapping[str, Any]) -> int:
        """Insert the row; its id."""
        return _inserted_id(self.run(connection, params))

    def later_id(self, connection: Any, params: Mapping[str, Any]) -> Later[int]:
        """Insert the row with the queued writes (`Later`); its id, once they went out."""
        return self._later(connection, params, _inserted_id, 1, lambda ids: ids[0])


def _inserted_id(cursor: Any) -> int:
    """The id of the row a cursor inserted: SQLite's `lastrowid`, else what RETURNING gave."""
    if isinstance(cursor, sqlite3.Cursor):
        return int(cursor.lastrowid or 0)
    return int(cursor.fetchone()[0])


@lru_cache(maxsize=64)
def update_by_key(table_name: str, keys: tuple[str, ...]) -> Prepared:
    """`UPDATE table SET <keys> WHERE <primary key> = :key_value`, one per set of keys."""
    table = schema.metadata.tables[table_name]
    (primary,) = table.primary_key.columns
    statement = table.update().where(primary == sa.bindparam("key_value"))
    return Prepared(statement, columns=keys)


@lru_cache(maxsize=64)
def insert_into(table_name: str, keys: tuple[str, ...]) -> Insert:
    """`INSERT INTO table (<keys>) VALUES (...)`, one per set of keys."""
    return Insert(schema.metadata.tables[table_name], keys)


class json_list(sa.sql.expression.ColumnElement[bool]):
    """`column IN (the JSON array bound to :name)`: one statement for any number of values.
    On PostgreSQL the array is read once into `= ANY(ARRAY(...))`, which the planner answers
    from the column's index; `IN (SELECT ... json_array_elements_text(...))` made it guess a
    hundred values and scan the whole table at each call (a 1,000-helper fan-out's agents
    read 3,000 times: 0.5 ms each, growing with the board)."""

    inherit_cache = False  # compiled once by `Prepared`, never from SQLAlchemy's cache
    type = sa.Boolean()
    _is_implicitly_boolean = True  # no `= 1` after it on SQLite

    def __init__(self, column: sa.ColumnElement[Any], name: str) -> None:
        self.column = column
        self.values = sa.bindparam(name, type_=sa.Text)

    def get_children(self, **kw: Any) -> tuple[sa.ColumnElement[Any], ...]:
        return self.column, self.values


@compiles(json_list, "sqlite")
def _json_list_sqlite(element: json_list, compiler: Any, **kw: Any) -> str:
    column, values = compiler.process(element.column, **kw), compiler.process(element.values, **kw)
    return f"({column} IN (SELECT value FROM json_each({values})))"


@compiles(json_list, "postgresql")
def _json_list_postgresql(element: json_list, compiler: Any, **kw: Any) -> str:
    column, values = compiler.process(element.column, **kw), compiler.process(element.values, **kw)
    return (f"({column} = ANY(ARRAY(SELECT json_array_elements_text("
            f"CAST({values} AS JSON)))))")


class binary(sa.sql.functions.GenericFunction[str]):
    """A text column compared byte by byte (thread id ranges), whatever the database's
    collation: PostgreSQL's default ones order '.' and '/' as a person would, not by code."""

    inherit_cache = True
    type = sa.Text()


@compiles(binary, "sqlite")
def _binary_sqlite(element: binary, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(binary, "postgresql")
def _binary_postgresql(element: binary, compiler: Any, **kw: Any) -> str:
    return f'({compiler.process(element.clauses, **kw)} COLLATE "C")'
