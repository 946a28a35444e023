"""What a database error means to a person: the disk refused the file (full, read-only,
failing), a PostgreSQL server refused lace's role (a grant missing, a standby that only reads,
a statement cancelled), the file is damaged, or something else. SQLite's own words ("database
or disk is full", "unable to open database file") do not say which folder or what to do, and
PostgreSQL's do not say which setting to change."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from lace.core.errors import ServerRefusedError, StorageError
from lace.store.damage import is_damage

_SQLITE_STORAGE = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_READONLY: "it is read-only",
    sqlite3.SQLITE_IOERR: "the disk reported an I/O error",
    sqlite3.SQLITE_CANTOPEN: "it cannot be opened (its folder is missing, read-only or "
                             "not readable)",
    sqlite3.SQLITE_PERM: "permission denied",
}
_OS_STORAGE = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "it is on a read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EIO: "the disk reported an I/O error",
}

GRANTS_FIX = ("the tables are migrated by the owner role (lace db upgrade) and lace's own role "
              "needs SELECT, INSERT, UPDATE, DELETE on all of them and USAGE, SELECT on their "
              "sequences: see 'Roles and grants' in docs/postgres.md")
_SERVER_REFUSALS = {
    "42501": GRANTS_FIX,  # insufficient_privilege
    "25006": ("the server only reads (a hot standby, or default_transaction_read_only is on "
              "for lace's role or database): point lace at the primary server"),
    "57014": ("the server cancelled a statement of lace (pg_cancel_backend, or a "
              "statement_timeout lace's URL sets in its options): lace's statements are short, "
              "do not cancel them"),
}
"""SQLSTATEs of a server that refuses lace's work as long as its operator changes nothing, and
what to change. Running the work again would only be refused again."""


def _causes(error: BaseException) -> list[BaseException]:
    """The error, the driver's error under a SQLAlchemy one, and what it was raised from."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending and len(seen) < 16:
        current = pending.pop(0)
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        pending += [getattr(current, "orig", None), current.__cause__, current.__context__]
    return seen


def storage_error(error: BaseException, path: Path | str | None = None) -> StorageError | None:
    """A StorageError naming what the disk refused (with the file, when known), or None when
    `error` is not a storage problem."""
    where = f" {path}" if path else " the database"
    for cause in _causes(error):
        if isinstance(cause, StorageError):
            return cause
        if isinstance(cause, sqlite3.Error):
            code = getattr(cause, "sqlite_errorcode", None)
            problem = _SQLITE_STORAGE.get(code & 0xFF) if code is not None else None
            if problem:
                return StorageError(f"cannot use{where}: {problem} ({cause})")
        fix = _SERVER_REFUSALS.get(str(getattr(cause, "sqlstate", None)))
        if fix is not None:
            said = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            return ServerRefusedError(f"the PostgreSQL server refused lace ({said}); {fix}")
        if isinstance(cause, OSError) and cause.errno in _OS_STORAGE:
            name = cause.filename or path or "the database"
            return StorageError(f"cannot use {name}: {_OS_STORAGE[cause.errno]} "
                                f"({cause.strerror})")
    return None


def damage_error(error: BaseException) -> sqlite3.Error | None:
    """SQLite's report of a damaged file inside `error`, or None."""
    return next((cause for cause in _causes(error)
                 if isinstance(cause, sqlite3.Error) and is_damage(cause)), None)
