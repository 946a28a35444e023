"""Opening a lace database: where it lives, connection settings, refusal checks and migrations."""

from __future__ import annotations

import os
import sqlite3
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

HEAD_REVISION = "lace_0006"
REVISION_PREFIX = "lace_"
BUSY_TIMEOUT_MS = 10_000
READONLY_OPTION = "lace_readonly"


def resolve_db_url(db: str | None = None) -> str:
    """A SQLAlchemy URL from `--db` (a path or a URL), else `$LACE_DB`, else the default file."""
    value = db or os.environ.get("LACE_DB") or str(lace_home() / "lace.db")
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


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
        connection.exec_driver_sql("BEGIN DEFERRED" if readonly else "BEGIN IMMEDIATE")


def create_engine(url: str, *, for_migrations: bool = False) -> Engine:
    """An engine whose connections use WAL, a busy timeout and IMMEDIATE write transactions."""
    path = sqlite_path(url)
    if path is None:
        return sa.create_engine(url, poolclass=NullPool if for_migrations else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, poolclass=NullPool if for_migrations else None)
    _configure_sqlite(engine, foreign_keys=not for_migrations)
    return engine


class LockBusyError(Exception):
    """Another connection holds SQLite's write lock (past this connection's busy timeout)."""


def driver(connection: sa.Connection) -> sqlite3.Connection:
    """The sqlite3 connection under a SQLAlchemy one."""
    raw = connection.connection.driver_connection
    if not isinstance(raw, sqlite3.Connection):
        raise TypeError(f"lace stores its board in SQLite, not {connection.dialect.name}")
    return raw


@contextmanager
def raw_transaction(connection: sa.Connection, *, write: bool) -> Iterator[None]:
    """One transaction begun and ended on the sqlite3 connection itself: SQLAlchemy's begin
    and commit cost about ten times what SQLite takes for them. A SQLAlchemy statement inside
    joins it (the begin listener sees the open transaction and emits nothing). LockBusyError
    if another connection holds the lock past the busy timeout."""
    raw = driver(connection)
    try:
        raw.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise LockBusyError(str(error)) from error
        raise
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


def _revision_number(revision: str) -> int:
    return int(revision.removeprefix(REVISION_PREFIX))


def check_existing_file(path: Path) -> str | None:
    """Refuse a non-lace or newer file; return its revision (None when empty)."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as connection:
            query = "SELECT name FROM sqlite_master WHERE type = 'table'"
            tables = {row[0] for row in connection.execute(query)}
            if not tables:
                return None
            if "alembic_version" not in tables:
                raise DatabaseRefusedError(
                    f"{path} is not a lace database (it holds other tables).")
            row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError as error:
        raise DatabaseRefusedError(f"{path} is not a lace database ({error}).") from None
    revision = row[0] if row else None
    if revision is None or not revision.startswith(REVISION_PREFIX):
        raise DatabaseRefusedError(f"{path} is not a lace database (alembic revision {revision}).")
    if _revision_number(revision) > _revision_number(HEAD_REVISION):
        raise DatabaseRefusedError(
            f"{path} was written by a newer lace (schema {revision}, this lace knows up to "
            f"{HEAD_REVISION}); upgrade lace to open it."
        )
    return str(revision)


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


def current_revision(url: str) -> str | None:
    """The schema revision stored in the database, or None for a fresh one."""
    engine = create_engine(url, for_migrations=True)
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("alembic_version"):
                return None
            return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    finally:
        engine.dispose()


@dataclass
class Database:
    """An open, migrated database: its URL and a pooled engine."""

    url: str
    engine: Engine

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()


def open_database(db: str | None = None) -> Database:
    """Resolve, check (read-only first), migrate to head, and return the database."""
    url = resolve_db_url(db)
    path = sqlite_path(url)
    revision = check_existing_file(path) if path else current_revision(url)
    if revision != HEAD_REVISION:
        upgrade(url)
    return Database(url=url, engine=create_engine(url))
