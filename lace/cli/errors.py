"""Runs a command and turns the errors a person can fix into one line on stderr: exit 2 for
bad usage or a database lace will not use, 4 when the disk refused the file (full, read-only);
a reader that closed lace's output early ends it quietly."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sqlite3
import sys

from lace.cli import interrupted
from lace.core.errors import LaceError, ServerRefusedError, StorageError, UnknownThreadError
from lace.core.secrets import mask
from lace.core.shown import shown_briefly
from lace.core.text import printable
from lace.paths import credential_values

EXIT_USAGE = 2
EXIT_STORAGE = 4
EXIT_READER_GONE = 128 + signal.SIGPIPE
"""What a shell shows for a command killed by SIGPIPE (`yes | head -1`): lace ends alike."""
MOST_SHOWN = 2000
"""Characters of an error line at most: what it repeats of a file lace read (a key of a
repository's lace.toml, a profile's name) may be a megabyte long."""
THREAD_IDS_HINT = "(lace sessions lists the sessions, lace threads --session ID their threads)"
"""Where a person finds the thread ids a command takes."""
STORAGE_HINT = ("free space or fix the disk, then run the command again (lace run --continue "
                "resumes the agents it cut off)")


def _database_file(args: argparse.Namespace) -> str:
    """The file the command used, for messages ("the database" when it cannot be told)."""
    from lace.runtime.databases import database_file

    try:
        path = database_file(getattr(args, "db", None))
    except LaceError:
        return "the database"
    return str(path) if path else "the database"


def _database_message(error: Exception, args: argparse.Namespace) -> tuple[str, int]:
    """What a database error means, and the exit code."""
    from lace.runtime.databases import damage_error, storage_error

    where = _database_file(args)
    storage = storage_error(error, where)
    if isinstance(storage, ServerRefusedError):
        return f"error: {storage}", EXIT_USAGE
    if storage is not None:
        return f"storage error: {storage}; {STORAGE_HINT}", EXIT_STORAGE
    damage = damage_error(error)
    if damage is not None:
        return (f"error: {where} is damaged ({damage}); restore a backup, or see what is wrong "
                f"with: sqlite3 {where} 'PRAGMA integrity_check'", EXIT_USAGE)
    original = getattr(error, "orig", None) or error
    return f"error: database error: {_without_password(str(original), args)}", EXIT_USAGE


def _without_password(text: str, args: argparse.Namespace) -> str:
    """`text` with the password of the database URL masked, wherever it appears."""
    import sqlalchemy as sa

    from lace.runtime.databases import database_passwords

    try:
        secrets = database_passwords(getattr(args, "db", None))
    except (LaceError, sa.exc.ArgumentError):
        return text
    for password in secrets:
        text = text.replace(password, "***")
    return text


def output_closed() -> bool:
    """Whether the reader of lace's standard output went away (a pipe with no reader polls
    as an error), rather than some other pipe lace wrote to."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def reader_gone() -> int:
    """The reader of lace's output closed it (`lace threads | head -1`): write nothing more,
    say nothing, and end as a command killed by SIGPIPE does (Python ignores the signal and
    raises BrokenPipeError instead). Standard output is pointed at /dev/null, so the final
    flush cannot raise again."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    return EXIT_READER_GONE


def _database_errors() -> tuple[type[Exception], ...]:
    """sqlite3's errors, and SQLAlchemy's once a command imported it (an error of a library
    that was never imported cannot have been raised): commands without a database skip its
    import."""
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_errors is None:
        return (sqlite3.Error,)
    return (sqlite3.Error, sqlalchemy_errors.SQLAlchemyError)


def run_reporting_errors(args: argparse.Namespace) -> int:
    """Call the command's handler; known errors print one `lace: ...` line and return 2 (or 4
    for a storage error)."""
    from lace.config.keys import use_stored_keys

    try:
        use_stored_keys()  # the keys of `lace keys set`, where the environment has none
        code: int = args.handler(args)
        return code
    except BrokenPipeError as error:
        if output_closed():
            return reader_gone()
        message, exit_code = f"error: {error}", EXIT_USAGE
    except ServerRefusedError as error:
        message, exit_code = f"error: {error}", EXIT_USAGE
    except StorageError as error:
        message, exit_code = f"storage error: {error}; {STORAGE_HINT}", EXIT_STORAGE
    except UnknownThreadError as error:
        message, exit_code = f"error: {error} {THREAD_IDS_HINT}", EXIT_USAGE
    except LaceError as error:
        message, exit_code = f"error: {error}", EXIT_USAGE
    except _database_errors() as error:
        message, exit_code = _database_message(error, args)
    except OSError as error:
        message, exit_code = _database_message(error, args)
        if exit_code != EXIT_STORAGE:
            message = f"error: {error}"
    except KeyboardInterrupt:  # the command has no line of its own for it
        return interrupted()
    one_line = "; ".join(line.strip().lstrip("- ") for line in message.splitlines() if line.strip())
    shown = shown_briefly(printable(mask(one_line or "error: failed", credential_values()),
                                    one_line=True), MOST_SHOWN)
    print(f"lace: {shown}", file=sys.stderr)
    return exit_code
