"""A database as the person names it (`--db`, else $LACE_DB, else lace's own file): opened,
shown without its password, upgraded, and its failures explained. Front ends call these so that
none of them opens the store's engines or parses a URL itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa

from lace.store import Store, open_database, resolve_db_url
from lace.store.db import upgrade
from lace.store.engines import engine_for
from lace.store.engines.postgresql import passwords
from lace.store.engines.reconnect import Backoff, is_retried, is_silent
from lace.store.failures import damage_error, storage_error

__all__ = ["damage_error", "database_file", "database_passwords", "database_url",
           "load_driver", "missing_board", "open_store", "shown_database", "storage_error",
           "upgrade_database", "when_answering", "when_reachable"]
T = TypeVar("T")


def database_url(db: str | None = None) -> str:
    """The URL of the database named by `db` (a path or a URL) or by the environment."""
    return resolve_db_url(db)


def shown_database(url: str) -> str:
    """A SQLite file as its path; a server's URL without its password."""
    return engine_for(url).shown()


def database_file(db: str | None = None) -> Path | None:
    """The file of a SQLite database (None for a server)."""
    return engine_for(resolve_db_url(db)).path


def database_passwords(db: str | None = None) -> list[str]:
    """The passwords the database's URL carries (none for a file)."""
    return passwords(resolve_db_url(db))


def load_driver(db: str | None = None) -> None:
    """Import what opening the database takes (its driver, SQLAlchemy's dialect), connecting
    nowhere: done once in a process that forks workers, it is done for them all."""
    sa.create_engine(resolve_db_url(db)).dispose()


def open_store(db: str | None = None) -> Store:
    """The store of the database, migrated to the current schema."""
    return Store(open_database(db))


def upgrade_database(db: str | None = None) -> str:
    """Check the database, migrate it to the current schema, and return how it is shown."""
    database = open_database(db)
    database.close()
    upgrade(database.url)
    return shown_database(database.url)


def missing_board(db: str | None = None) -> str | None:
    """Why the database holds no lace board yet (no file, or an empty database), without
    writing anything; None when it holds one."""
    engine = engine_for(resolve_db_url(db))
    if engine.path is not None and not engine.path.exists():
        return f"no lace board at {engine.path} (there is no such file)"
    if engine.path is not None and not engine.path.is_file():  # opening it says what it is
        return None
    if engine.existing_revision() is None:  # empty: migrating would write
        return f"no lace board in {engine.shown()} (the database is empty)"
    return None


def when_reachable(open_: Callable[[], T], db: str | None = None) -> T:
    """`open_()`, tried again after a growing wait while the database's server refuses, drops
    or ends the connection (a worker started before its server, or during a restart); past a
    bound it says so on stderr and keeps trying. Any other error is raised at once."""
    backoff: Backoff | None = None
    while True:
        try:
            return open_()
        except Exception as error:
            if not is_retried(error):
                raise
            backoff = backoff or Backoff(shown_database(resolve_db_url(db)))
            time.sleep(backoff.next_delay(error))


def when_answering(open_: Callable[[], T], db: str | None, silent: Callable[[str], None]) -> T:
    """`open_()`, tried again while the database's server does not answer at all (a paused
    server, a host gone silent: each attempt ends at `connect_timeout`), `silent` told once
    with the server's name; a server that refuses, or any other error, is raised at once."""
    told = False
    while True:
        try:
            return open_()
        except Exception as error:
            if not is_silent(error):
                raise
            if not told:
                silent(shown_database(resolve_db_url(db)))
                told = True
