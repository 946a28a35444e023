"""PostgreSQL under lace: its URLs, the connection settings that give it SQLite's guarantees,
and the change feed that LISTENs for every write's NOTIFY.

lace's verbs read, decide and write inside one transaction; SQLite lets one writer at a time
commit (BEGIN IMMEDIATE), so each verb sees the world it changes. On PostgreSQL writers run at
once: every write transaction is SERIALIZABLE, so the server makes it commit as if the writers
had taken turns, or ends it with a serialization failure (or a deadlock) that lace runs again
(`is_conflict`); a claim skips the agent rows other transactions hold (FOR UPDATE SKIP LOCKED)
and an inbox row takes its recipient's lock (`INBOX_LOCKS`), so each inbox's ids follow the
order its rows commit in. Every write holds the advisory lock WRITERS shared; a migration holds
it exclusively (processes opening a database at once migrate it in turn), and so does a write
that lost to concurrent ones twice (`alone`: a long write would otherwise keep losing to
short ones). A read transaction sees one snapshot
(REPEATABLE READ, READ ONLY) and never waits. Every write transaction also sends a NOTIFY on
CHANNEL, delivered at its commit: the change feed of the workers and the app (SQLite's `PRAGMA
data_version` plays that part there); the feed also wakes at its caller's timeout, a poll that
covers a notification lost with its connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import NullPool

from lace.core.errors import DatabaseRefusedError
from lace.store.engines.base import (
    READONLY_OPTION,
    ChangeFeed,
    LockBusyError,
    Polling,
    driver,
)
from lace.store.engines.reconnect import UNREACHABLE_WARN_S, briefly
from lace.store.prepared import (
    AbortedTransactionError,
    forget_prepared,
    send_queued,
    transaction_aborted,
)
from lace.store.revisions import known_revision

CHANNEL = "lace_changes"
TRANSACTION_ID = "CAST(pg_current_xact_id() AS text)"
WRITERS = 0x6C616365  # "lace"
"""The advisory lock of writers: every write transaction holds it shared, so any number run at
once; a migration, or a write that kept losing to others (`alone`), holds it exclusively."""
WRITE = (f"BEGIN ISOLATION LEVEL SERIALIZABLE; NOTIFY {CHANNEL}; "
         f"SELECT pg_try_advisory_xact_lock_shared({WRITERS}), {TRANSACTION_ID}")
"""A write's first round trip: shared WRITERS is only tried, never waited for, since the
transaction's snapshot is taken at this statement (waiting would leave it stale); the
transaction's id comes back with it (`begin_write`)."""
WRITE_ALONE = (f"BEGIN ISOLATION LEVEL SERIALIZABLE; NOTIFY {CHANNEL}; "
               f"SELECT true, {TRANSACTION_ID}")
"""A write's first round trip while its connection holds WRITERS exclusively (`alone`): trying
the shared lock would fail there while another write waits to run alone."""
ALONE_KEY = "lace_alone"
"""Set in a connection's `info` while it holds WRITERS exclusively."""
MIGRATE = f"BEGIN; SELECT pg_advisory_xact_lock({WRITERS})"
ALONE, NOT_ALONE = f"SELECT pg_advisory_lock({WRITERS})", f"SELECT pg_advisory_unlock({WRITERS})"
WAIT_FOR_ALONE = (f"SELECT pg_advisory_lock_shared({WRITERS}); "
                  f"SELECT pg_advisory_unlock_shared({WRITERS})")
CONFLICTS = frozenset({"40001", "40P01", "55P03", "26000"})
"""serialization_failure, deadlock_detected, and lock_not_available (on the event loop's
connection, which never waits for a row lock: `fail_fast`): the server undid a write
transaction that could not commit beside a concurrent one; run again, it sees what that one
committed. And invalid_sql_statement_name: a statement lace prepared (`prepared._executed`)
was deallocated behind its back; the transaction's ROLLBACK forgets them all, and run again
it prepares them anew."""
FAIL_FAST = "SET lock_timeout = 1"
"""Milliseconds the event loop's connection waits for a row another transaction holds."""
READ_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
SCHEMES = ("postgresql", "postgres")
NEEDS_DRIVER = ("PostgreSQL support needs psycopg: pip install 'lace[postgres]'")
RECONNECT_S = 1.0
IDLE_SESSION_SINCE = 140000
"""The server version that has `idle_session_timeout` (PostgreSQL 14): a DBA's would end the
change feed's connection, which waits idle for notifications on purpose, again and again."""
log = logging.getLogger("lace.runtime")


def is_postgres_url(value: str) -> bool:
    """Whether `value` names a PostgreSQL database (any driver spelling)."""
    scheme = value.split("://", 1)[0].split("+", 1)[0].lower()
    return "://" in value and scheme in SCHEMES


def postgres_url(url: sa.URL) -> str:
    """The URL lace connects with: always through psycopg 3, whatever driver was named."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise DatabaseRefusedError(NEEDS_DRIVER) from None
    if not url.database:
        raise DatabaseRefusedError("a PostgreSQL URL must name the database: "
                                   "postgresql://USER@HOST:PORT/DBNAME")
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def passwords(url: str | sa.URL) -> list[str]:
    """The passwords a URL carries: after its user, or as libpq's `password` parameter."""
    parsed = sa.make_url(url) if isinstance(url, str) else url
    given = parsed.query.get("password")
    found = [parsed.password, *([given] if isinstance(given, str) else given or ())]
    return [str(password) for password in found if password]


def shown(url: str) -> str:
    """The URL as lace prints it: never with its password (in either place)."""
    parsed = sa.make_url(url).set(drivername="postgresql")
    if "password" in parsed.query:
        parsed = parsed.update_query_dict({"password": "***"})
    return parsed.render_as_string(hide_password=True).replace("=%2A%2A%2A", "=***")


IDLE_IN_TRANSACTION_MS = 10_000
"""A session idle inside a transaction this long is ended by the server, and its locks with
it: a lace process paused (SIGSTOP, a laptop's lid) while holding row locks cannot freeze
every other process. lace's own transactions last milliseconds and never wait on a model."""


UNREACHABLE_S = {"connect_timeout": 10, "keepalives_idle": 10, "keepalives_interval": 5,
                 "keepalives_count": 3}
"""libpq settings that turn a server gone silent (a failover to another host, a cut network)
into an error within seconds, which lace retries (`lace.store.retry`), instead of a wait
without end."""


def connect_args(url: str) -> dict[str, Any]:
    """psycopg settings: every statement run more than once is prepared on the server, and a
    transaction left idle is ended (IDLE_IN_TRANSACTION_MS), after the URL's own `options`
    (a `search_path`, say), which these would otherwise replace; no `statement_timeout` a DBA
    set for lace's role or database cancels lace's statements (they are short, and one that
    waits for a row another writer holds must not fail), unless the URL's options set one; a
    silent server is given up on (UNREACHABLE_S) unless the URL says otherwise."""
    query = sa.make_url(url).query
    given = query.get("options")
    given = " ".join([given] if isinstance(given, str) else given or ())
    ours = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    if "statement_timeout" not in given:
        ours += " -c statement_timeout=0"  # a role's or database's would cancel lace's writes
    silent = {name: value for name, value in UNREACHABLE_S.items() if name not in query}
    return {"prepare_threshold": 1, "options": f"{given} {ours}".strip(), **silent}


NUL_STAND_IN = "\ufffd"
"""What a NUL character in text becomes on PostgreSQL, whose text types cannot hold one (SQLite
stores it): a model's argument, a tool's output or a reply holding NUL must not fail the write."""


@cache
def _nul_free_dumpers() -> tuple[type, ...]:
    from psycopg.types.string import StrBinaryDumper, StrDumperUnknown

    class NulFreeText(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", NUL_STAND_IN))

    class NulFreeBinary(StrBinaryDumper):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", NUL_STAND_IN))

    return NulFreeText, NulFreeBinary


_JSON_NUL = re.compile(r"\\\\|\\u0000")
"""In JSON text: an escaped backslash (kept), or an escaped NUL."""


def json_without_nul(value: Any) -> str:
    """`value` as JSON with NUL_STAND_IN for each NUL: a json value holding `\\u0000` anywhere
    makes every `->>` on it fail ("unsupported Unicode escape sequence")."""
    return _JSON_NUL.sub(lambda found: found[0] if found[0] == "\\\\" else "\\ufffd",
                         json.dumps(value))


def bind_text_without_nul(raw: Any) -> None:
    """Make the psycopg connection send every str, and every JSON value, with NUL_STAND_IN
    for each NUL."""
    from psycopg.types.json import set_json_dumps

    for dumper in _nul_free_dumpers():
        raw.adapters.register_dumper(str, dumper)
    set_json_dumps(json_without_nul, raw)


def in_transaction(raw: Any) -> bool:
    """Whether the psycopg connection has a transaction open."""
    from psycopg.pq import TransactionStatus

    return bool(raw.info.transaction_status != TransactionStatus.IDLE)


def begin_write(raw: Any, *, alone: bool = False) -> str:
    """Begin a write transaction on the psycopg connection `raw` (one round trip); its id
    (`pg_current_xact_id`). LockBusyError (rolled back) while a write that runs alone or a
    migration holds WRITERS, unless this connection holds it (`alone`)."""
    cursor = raw.execute(WRITE_ALONE if alone else WRITE)
    while cursor.nextset():
        pass
    locked, transaction_id = cursor.fetchone()
    if not locked:
        raw.rollback()
        raise LockBusyError("a lace write that runs alone holds the database")
    return str(transaction_id)


@cache
def _connection_class() -> Any:
    """psycopg's connection, whose ROLLBACK ends lace's prepared statements too
    (`forget_prepared`): psycopg's own ROLLBACK deallocates every statement it prepared, and
    may have taken lace's with them; and whose COMMIT of a transaction a failed statement ended
    (a work caught the error and went on) raises, where the server would undo it silently."""
    import psycopg

    class Connection(psycopg.Connection[Any]):
        def commit(self) -> None:
            if transaction_aborted(self):  # the server would answer ROLLBACK, and no error
                raise AbortedTransactionError
            super().commit()

        def rollback(self) -> None:
            ended = self.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            super().rollback()  # which, ending a transaction, deallocates psycopg's own
            if ended and forget_prepared(self):
                psycopg.ClientCursor(self).execute("DEALLOCATE ALL")

    return Connection


def is_conflict(error: BaseException) -> bool:
    """Whether `error` (or the driver error it wraps) is a CONFLICTS error."""
    cause = getattr(error, "orig", None) or error
    return getattr(cause, "sqlstate", None) in CONFLICTS


def _let_go(connection: sa.Connection) -> None:
    """Release WRITERS, which `connection`'s session holds, whatever the block did; when that
    fails (a statement the session lost, say), end the session, which releases it: never an
    error here, which would take a write that committed for one to run again, and never the
    lock kept, for which every writer of every process would wait for good."""
    raw = driver(connection)
    if raw.closed:
        return
    try:
        if in_transaction(raw):
            raw.rollback()
        raw.execute(NOT_ALONE)
    except Exception as error:
        log.warning("could not release the writers' lock (%s); ending the database session, "
                    "which releases it", type(error).__name__)
        connection.invalidate()  # closes the session: the next use opens another


class PostgreSQL:
    """A database on a PostgreSQL server, reached through psycopg 3."""

    path = None

    def __init__(self, url: str) -> None:
        self.url = url

    def shown(self) -> str:
        return shown(self.url)

    def prepare(self) -> None:
        """Nothing to make: the server holds the database (createdb makes it)."""

    def existing_revision(self) -> str | None:
        """Read without writing."""
        where = self.shown()
        engine = sa.create_engine(self.url, poolclass=NullPool,
                                  connect_args=connect_args(self.url))
        try:
            with engine.connect() as connection:
                tables = set(sa.inspect(connection).get_table_names())
                if not tables:
                    return None
                if "alembic_version" not in tables:
                    raise DatabaseRefusedError(
                        f"{where} is not a lace database (it holds other tables); give lace a "
                        "database of its own (createdb lace).")
                revision = connection.exec_driver_sql(
                    "SELECT version_num FROM alembic_version").scalar()
        finally:
            engine.dispose()
        return known_revision(revision, where)

    def create_engine(self, *, for_migrations: bool = False) -> sa.Engine:
        """Every write transaction is SERIALIZABLE, holds WRITERS shared and announces itself
        (a migration holds WRITERS exclusively instead); a read transaction sees one snapshot.
        The driver never begins a transaction itself (autocommit): lace's own BEGIN goes out
        with the transaction's first statements, one round trip where psycopg spends two."""
        engine = sa.create_engine(self.url, poolclass=NullPool if for_migrations else None,
                                  connect_args=connect_args(self.url), pool_pre_ping=True)

        @event.listens_for(engine, "do_connect")
        def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
            return _connection_class().connect(*cargs, **cparams)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            bind_text_without_nul(dbapi_connection)
            dbapi_connection.autocommit = True

        @event.listens_for(engine, "before_cursor_execute")
        def _writes_first(_connection: sa.Connection, cursor: Any, *_args: Any) -> None:
            send_queued(cursor.connection)  # the writes queued before it (`deferred_writes`)

        @event.listens_for(engine, "begin")
        def _on_begin(connection: sa.Connection) -> None:
            if in_transaction(driver(connection)):
                return  # begun on the psycopg connection itself (`begin`): join it
            if connection.get_execution_options().get(READONLY_OPTION, False):
                connection.exec_driver_sql(READ_SNAPSHOT)
            elif for_migrations:
                connection.exec_driver_sql(MIGRATE)
            else:
                begin_write(driver(connection), alone=bool(connection.info.get(ALONE_KEY)))

        return engine

    def begin(self, connection: sa.Connection, *, write: bool) -> str | None:
        """Busy only while a write runs `alone`: writers wait for the rows they share, and a
        conflict shows as an error of the transaction (`is_conflict`)."""
        if write:
            return begin_write(driver(connection))
        driver(connection).execute(READ_SNAPSHOT)
        return None

    def wait_for_alone(self, connection: sa.Connection) -> None:
        """Wait, outside any transaction of `connection`, until no write runs alone."""
        raw = driver(connection)
        if in_transaction(raw):
            raw.rollback()
        raw.execute(f"SET lock_timeout = 0; {WAIT_FOR_ALONE}")

    @contextlib.contextmanager
    def alone(self, connection: sa.Connection) -> Iterator[None]:
        """Hold WRITERS exclusively on `connection` (outside its transactions, so the next
        one's snapshot is taken once no other writer runs) until the block ends."""
        raw = driver(connection)
        if in_transaction(raw):
            raw.rollback()
        raw.execute(f"SET lock_timeout = 0; {ALONE}")  # the loop's connection waits for none
        connection.info[ALONE_KEY] = True
        try:
            yield
        finally:
            connection.info.pop(ALONE_KEY, None)
            _let_go(connection)

    def fail_fast(self, connection: sa.Connection) -> None:
        """A statement that meets a row another transaction holds fails at once (55P03, a
        conflict): the AsyncStore then runs the transaction again on its thread."""
        raw = driver(connection)
        raw.execute(FAIL_FAST)
        raw.commit()

    def is_conflict(self, error: BaseException) -> bool:
        return is_conflict(error)

    def change_feed(self, engine: sa.Engine) -> ChangeFeed:
        return PostgresChanges(self.url)


class PostgresChanges(Polling):
    """A feed that LISTENs for lace's NOTIFY on a connection of its own, from a task started
    by the first `wait`; each notification ends the current wait."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(
            hide_password=False)
        self._listener: asyncio.Task[None] | None = None

    async def wait(self, timeout: float) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.ensure_future(self._listen())
        await self._nap(timeout)

    async def _listen(self) -> None:
        """LISTEN until the feed closes; a lost connection is said on one line, once, then
        again every UNREACHABLE_WARN_S while it stays lost (it is tried every RECONNECT_S)."""
        import psycopg

        said_at: float | None = None
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True) as connection:
                    if connection.info.server_version >= IDLE_SESSION_SINCE:  # it waits idle
                        await connection.execute("SET idle_session_timeout = 0")
                    await connection.execute(f"LISTEN {CHANNEL}")
                    said_at = None  # back: a new loss is said at once
                    self.notify()  # commits made before LISTEN: look once
                    async for _notice in connection.notifies():
                        self.notify()
            except psycopg.Error as error:
                now = time.monotonic()
                if said_at is None or now - said_at >= UNREACHABLE_WARN_S:
                    said_at = now
                    log.warning("lace lost its PostgreSQL notifications (%s); polling until "
                                "they are back", briefly(error))
                await asyncio.sleep(RECONNECT_S)

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(RuntimeError):  # its loop may be closed already
                self._listener.cancel()
