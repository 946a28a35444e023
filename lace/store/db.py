"""Opening a lace database: where it lives, connection settings, refusal checks and migrations."""

from __future__ import annotations

import os
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from lace.core.errors import DatabaseRefusedError
from lace.paths import lace_home
from lace.store import postgres
from lace.store.damage import WriteGuard
from lace.store.failures import storage_error
from lace.store.revisions import HEAD_REVISION, check_existing_file, check_existing_server

BUSY_TIMEOUT_MS = 10_000
READONLY_OPTION = "lace_readonly"


def resolve_db_url(db: str | None = None) -> str:
    """A SQLAlchemy URL from `--db` (a path or a URL), else `$LACE_DB`, else the default file;
    a URL of another kind of database, or of one in memory, is refused."""
    value = db or os.environ.get("LACE_DB") or str(lace_home() / "lace.db")
    if "://" not in value:
        return f"sqlite:///{Path(value).expanduser().resolve()}"
    try:
        url = sa.make_url(value)
    except sa.exc.ArgumentError:
        raise DatabaseRefusedError("--db takes a file path, a sqlite:/// URL or a "
                                   "postgresql:// URL; the URL given does not parse.") from None
    if postgres.is_postgres_url(value):
        return postgres.postgres_url(url)
    if url.get_backend_name() != "sqlite":
        raise DatabaseRefusedError(
            "lace stores its board in SQLite or PostgreSQL: --db takes a file path, a sqlite:/// "
            f"URL or a postgresql:// URL, not {url.render_as_string(hide_password=True)}")
    if url.database in (None, "", ":memory:"):
        raise DatabaseRefusedError("a database in memory would be lost when lace exits: --db "
                                   "takes a file path or a sqlite:///PATH URL.")
    return value


def prepare_file(path: Path) -> None:
    """Create lace's own folder (0700) when the file goes there, refuse any other missing
    folder, and create a new file as 0600: it holds conversations and tool output, and SQLite
    gives its -wal and -shm files the same mode."""
    if path.is_dir():
        raise DatabaseRefusedError(f"{path} is a folder; --db takes a database file.")
    home = lace_home().resolve()
    if not path.parent.is_dir() and path.parent.resolve() != home:
        raise DatabaseRefusedError(f"the folder {path.parent} does not exist; create it, or "
                                   "leave out --db to use lace's own folder.")
    try:
        if not path.parent.is_dir():
            missing = [folder for folder in (home, *home.parents) if not folder.exists()]
            for folder in reversed(missing):
                folder.mkdir(mode=0o700, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as error:
        raise storage_error(error, path) or error from None


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for other databases."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def migrations_dir() -> Path:
    """The alembic scripts: inside an installed wheel, else at the top of the checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    bundled = package_dir / "_migrations"
    return bundled if bundled.is_dir() else package_dir.parent / "migrations"


_GUARDS: weakref.WeakKeyDictionary[Engine, WriteGuard] = weakref.WeakKeyDictionary()


def _check_before_write(engine: Engine) -> None:
    """Refuse to write into a damaged file: checked before the engine's first write."""
    guard = _GUARDS.get(engine)
    if guard is None:
        return
    problem = guard.before_write()
    if problem is not None:
        raise DatabaseRefusedError(
            f"{guard.path} is damaged ({problem}); lace will not write to it. Restore a backup, "
            f"or see what is wrong with: sqlite3 {guard.path} 'PRAGMA integrity_check'")


def _configure_sqlite(engine: Engine, *, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        if driver(connection).in_transaction:
            return  # begun on the sqlite3 connection itself (`raw_transaction`): join it
        readonly = connection.get_execution_options().get(READONLY_OPTION, False)
        if not readonly:
            _check_before_write(connection.engine)
        connection.exec_driver_sql("BEGIN DEFERRED" if readonly else "BEGIN IMMEDIATE")


def _configure_postgres(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        postgres.bind_text_without_nul(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        if postgres.in_transaction(driver(connection)):
            return  # begun on the psycopg connection itself (`raw_transaction`): join it
        if connection.get_execution_options().get(READONLY_OPTION, False):
            connection.exec_driver_sql(postgres.READ_SNAPSHOT)
        else:
            connection.exec_driver_sql(postgres.TAKE_WRITE_LOCK)


def is_postgres(engine: Engine) -> bool:
    """Whether the engine's database is PostgreSQL."""
    return engine.dialect.name == "postgresql"


def create_engine(url: str, *, for_migrations: bool = False) -> Engine:
    """An engine whose write transactions take turns: on SQLite with WAL, a busy timeout and
    BEGIN IMMEDIATE; on PostgreSQL with an advisory lock (`lace.store.postgres`)."""
    path = sqlite_path(url)
    if path is None:
        engine = sa.create_engine(url, poolclass=NullPool if for_migrations else None,
                                  connect_args=postgres.connect_args(url), pool_pre_ping=True)
        _configure_postgres(engine)
        return engine
    prepare_file(path)  # also for `alembic upgrade`, which reaches lace here
    engine = sa.create_engine(url, poolclass=NullPool if for_migrations else None)
    _configure_sqlite(engine, foreign_keys=not for_migrations)
    _GUARDS[engine] = WriteGuard(path, BUSY_TIMEOUT_MS / 1000)
    return engine


class LockBusyError(Exception):
    """Another connection holds SQLite's write lock (past this connection's busy timeout)."""


def driver(connection: sa.Connection) -> Any:
    """The sqlite3 or psycopg connection under a SQLAlchemy one."""
    return connection.connection.driver_connection


@contextmanager
def raw_transaction(connection: sa.Connection, *, write: bool) -> Iterator[None]:
    """One transaction begun and ended on the sqlite3 connection itself: SQLAlchemy's begin
    and commit cost about ten times what SQLite takes for them. A SQLAlchemy statement inside
    joins it (the begin listener sees the open transaction and emits nothing). LockBusyError
    if another connection holds the lock past the busy timeout."""
    raw = driver(connection)
    if is_postgres(connection.engine):
        _begin_postgres(raw, write=write)
    else:
        _begin_sqlite(connection, raw, write=write)
    try:
        yield
    except BaseException:
        raw.rollback()
        if connection.in_transaction():
            connection.rollback()
        raise
    raw.commit()
    if connection.in_transaction():  # a SQLAlchemy statement joined: end its bookkeeping
        connection.commit()


def _begin_sqlite(connection: sa.Connection, raw: sqlite3.Connection, *, write: bool) -> None:
    if write:
        _check_before_write(connection.engine)
    try:
        raw.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise LockBusyError(str(error)) from error
        raise


def _begin_postgres(raw: Any, *, write: bool) -> None:
    """Open the transaction; a writer takes the write lock only if it is free (LockBusyError
    otherwise: the AsyncStore then waits for it on its thread)."""
    if not write:
        raw.execute(postgres.READ_SNAPSHOT)
        return
    if not raw.execute(postgres.TRY_WRITE_LOCK).fetchone()[0]:
        raw.rollback()
        raise LockBusyError("another process holds lace's write lock")
    raw.execute(postgres.ANNOUNCE)


def alembic_config(connection: sa.Connection | None = None) -> Any:
    """An alembic Config built in code, so migrations run from a checkout and from a wheel."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate to `revision` in one IMMEDIATE transaction, so concurrent openers take turns."""
    from alembic import command

    engine = create_engine(url, for_migrations=True)
    try:
        with engine.connect() as connection, connection.begin():
            command.upgrade(alembic_config(connection), revision)
    finally:
        engine.dispose()


@dataclass
class Database:
    """An open, migrated database: its URL and a pooled engine."""

    url: str
    engine: Engine

    @property
    def path(self) -> Path | None:
        """The SQLite file, for messages (None for another database)."""
        return sqlite_path(self.url)

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()


def open_database(db: str | None = None) -> Database:
    """Resolve, check (read-only first), migrate to head, and return the database."""
    url = resolve_db_url(db)
    path = sqlite_path(url)
    if path is not None:
        prepare_file(path)
    revision = check_existing_file(path) if path else check_existing_server(url)
    if revision != HEAD_REVISION:
        upgrade(url)
    return Database(url=url, engine=create_engine(url))
