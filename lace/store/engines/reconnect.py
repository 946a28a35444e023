"""What a PostgreSQL fault looks like to lace, and how long to wait before trying again: the
server ended lace's session (a restart, a failover, `pg_terminate_backend`, a pooler), refused
or dropped the connection, is starting up or shutting down, or undid the transaction to break
a deadlock. Each undoes the whole transaction (a COMMIT cut off is the exception, settled by
`commit_outcome`), so running it again is safe."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import sqlalchemy as sa

from lace.core.text import printable

log = logging.getLogger("lace.store")

RETRIED_SQLSTATES = frozenset({
    "57P01",  # admin_shutdown: pg_terminate_backend, a fast or smart shutdown
    "57P02",  # crash_shutdown: another backend crashed
    "57P03",  # cannot_connect_now: the server is starting up or shutting down
    "25P03",  # idle_in_transaction_session_timeout ended the session
    "57P05",  # idle_session_timeout (a role's or database's) ended a kept connection
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
})
"""Errors from the server that undid the transaction and may not happen the next time."""
FIRST_DELAY_S = 0.05
MOST_DELAY_S = 2.0
CONNECTIONS_PER_PROCESS = 4
"""A lace process's connections at most at once: writes, reads, the change feed, and one more
while `lace wait` or the app looks (docs/postgres.md, Connections and pool sizes)."""
UNREACHABLE_WARN_S = 10.0
"""How long lace tries quietly before it says on stderr that it cannot reach the server (then
once more every this long, while it keeps trying)."""


def _causes(error: BaseException) -> list[BaseException]:
    """`error` and what it wraps: SQLAlchemy's `orig`, `__cause__` and `__context__`."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        pending += [getattr(current, "orig", None), current.__cause__, current.__context__]
    return seen


def is_retried(error: BaseException) -> bool:
    """Whether `error` is a PostgreSQL fault that undid the transaction (and may be retried):
    a lost, refused or ended connection, a server starting or stopping, a deadlock."""
    try:
        import psycopg
    except ImportError:  # no PostgreSQL driver: the error is SQLite's
        return False
    for cause in _causes(error):
        if isinstance(cause, sa.exc.PendingRollbackError):
            return True
        if isinstance(cause, sa.exc.DBAPIError) and cause.connection_invalidated:
            return True
        if isinstance(cause, psycopg.InterfaceError) and "closed" in str(cause):
            return True
        state = getattr(cause, "sqlstate", None)
        if isinstance(cause, psycopg.Error) and state in RETRIED_SQLSTATES:
            return True  # whatever psycopg's class for it (25P03 is an InternalError)
        if isinstance(cause, psycopg.OperationalError) and (state is None
                                                            or state.startswith("08")):
            return True  # no sqlstate: the client lost or could not open the connection
    return False


def is_silent(error: BaseException) -> bool:
    """Whether `error` is a connection to a PostgreSQL server that never answered within
    `connect_timeout` (the server paused, or its host gone silent), not one it refused."""
    try:
        import psycopg
    except ImportError:  # no PostgreSQL driver: the error is SQLite's
        return False
    return any(isinstance(cause, psycopg.errors.ConnectionTimeout) for cause in _causes(error))


def commit_outcome(connection: sa.Connection, transaction_id: str) -> bool | None:
    """Whether the transaction `transaction_id` (`pg_current_xact_id()`, read before its COMMIT
    was cut off) committed, asked on a new `connection`: True, False (it was undone, or the
    server that took over never saw it), or None while the server still runs it."""
    try:
        status = connection.exec_driver_sql(
            "SELECT pg_xact_status(CAST(%(xid)s AS xid8))", {"xid": transaction_id}).scalar()
    except sa.exc.DBAPIError as error:
        if is_retried(error):
            raise
        return False  # "transaction ID is in the future": a failover lost it
    if status == "in progress":
        return None
    return bool(status == "committed")


class Backoff:
    """The waits between attempts: doubling from FIRST_DELAY_S to MOST_DELAY_S, jittered so
    that the workers a restart cut off do not all come back at once; past UNREACHABLE_WARN_S
    of failures it says so on stderr (the logger), and again every UNREACHABLE_WARN_S."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.attempts = 0
        self._since = self._warned_at = 0.0

    def next_delay(self, error: BaseException) -> float:
        """How long to wait after `error` before the next attempt."""
        self.attempts += 1
        now = time.monotonic()
        if self.attempts == 1:  # counted from the first failure
            self._since = self._warned_at = now
        if now - self._warned_at >= UNREACHABLE_WARN_S:
            self._warned_at = now
            if _too_many_connections(error):
                log.warning("the PostgreSQL server %s refuses more connections for %.0f s "
                            "(%s); each lace process holds up to %d: raise max_connections "
                            "(or the CONNECTION LIMIT of lace's role), or run fewer lace "
                            "processes; still trying", self.where, now - self._since,
                            briefly(error), CONNECTIONS_PER_PROCESS)
            else:
                log.warning("lace cannot reach the PostgreSQL server %s for %.0f s (%s); "
                            "still trying", self.where, now - self._since, briefly(error))
        ceiling = min(MOST_DELAY_S, FIRST_DELAY_S * 2 ** min(self.attempts, 16))
        return float(random.uniform(ceiling / 2, ceiling))


def _too_many_connections(error: BaseException) -> bool:
    """Whether the server refused a new connection for lack of slots (53300: "too many
    clients already", or "too many connections for role"/"for database"); psycopg gives a
    refused connection no SQLSTATE, so its message tells."""
    return any("too many c" in str(cause) for cause in _causes(error))


def briefly(error: Any) -> str:
    """The error on one short line with control characters escaped: a server's message must
    not drive the terminal of the person reading lace's stderr."""
    text = " ".join(str(getattr(error, "orig", None) or error).split())
    return printable(text[:240], one_line=True) if text else type(error).__name__
