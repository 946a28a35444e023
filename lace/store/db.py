"""Opening a lace database: where it lives, which engine it needs, refusal checks and
migrations."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from lace.core.errors import DatabaseRefusedError
from lace.paths import lace_home
from lace.store.engines import (
    READONLY_OPTION,
    ChangeFeed,
    Engine,
    LockBusyError,
    driver,
    engine_for,
)
from lace.store.engines.postgresql import is_postgres_url, postgres_url
from lace.store.revisions import HEAD_REVISION

__all__ = ["HEAD_REVISION", "READONLY_OPTION", "Database", "LockBusyError", "alembic_config",
           "create_engine", "driver", "open_database", "resolve_db_url", "upgrade"]


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
    if is_postgres_url(value):
        return postgres_url(url)
    if url.get_backend_name() != "sqlite":
        raise DatabaseRefusedError(
            "lace stores its board in SQLite or PostgreSQL: --db takes a file path, a sqlite:/// "
            f"URL or a postgresql:// URL, not {url.render_as_string(hide_password=True)}")
    if url.database in (None, "", ":memory:"):
        raise DatabaseRefusedError("a database in memory would be lost when lace exits: --db "
                                   "takes a file path or a sqlite:///PATH URL.")
    return value


def migrations_dir() -> Path:
    """The alembic scripts: inside an installed wheel, else at the top of the checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    bundled = package_dir / "_migrations"
    return bundled if bundled.is_dir() else package_dir.parent / "migrations"


def create_engine(url: str, *, for_migrations: bool = False) -> sa.Engine:
    """An engine whose write transactions take turns (`Engine.create_engine`)."""
    return engine_for(url).create_engine(for_migrations=for_migrations)


def alembic_config(connection: sa.Connection | None = None) -> Any:
    """An alembic Config built in code, so migrations run from a checkout and from a wheel."""
    from alembic.config import Config

    config = Config(stdout=sys.stdout)  # the default is whatever sys.stdout was at import
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate to `revision` in one write transaction, so concurrent openers take turns."""
    from alembic import command

    engine = create_engine(url, for_migrations=True)
    try:
        with engine.connect() as connection, connection.begin():
            command.upgrade(alembic_config(connection), revision)
    finally:
        engine.dispose()


@dataclass
class Database:
    """An open, migrated database: its URL, its engine (`kind`) and a pooled SQLAlchemy
    engine."""

    url: str
    kind: Engine
    engine: sa.Engine

    @property
    def path(self) -> Path | None:
        """The SQLite file, for messages (None for a server)."""
        return self.kind.path

    @contextmanager
    def raw_transaction(self, connection: sa.Connection, *, write: bool) -> Iterator[None]:
        """One transaction begun and ended on the driver connection itself: SQLAlchemy's begin
        and commit cost about ten times what SQLite takes for them. A SQLAlchemy statement
        inside joins it (the begin listener sees the open transaction and emits nothing).
        LockBusyError if another connection holds the write lock past this one's wait."""
        self.kind.begin(connection, write=write)
        raw = driver(connection)
        try:
            yield
            raw.commit()  # may fail too (PostgreSQL: a conflict found at COMMIT)
        except BaseException:
            raw.rollback()
            if connection.in_transaction():
                connection.rollback()
            raise
        if connection.in_transaction():  # a SQLAlchemy statement joined: end its bookkeeping
            connection.commit()

    def change_feed(self) -> ChangeFeed:
        """How this process hears other processes' commits (`lace worker`, the app, `lace
        wait`): the quickest way the database offers."""
        return self.kind.change_feed(self.engine)

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()


def open_database(db: str | None = None) -> Database:
    """Resolve, check (read-only first), migrate to head, and return the database."""
    url = resolve_db_url(db)
    kind = engine_for(url)
    kind.prepare()
    if kind.existing_revision() != HEAD_REVISION:
        upgrade(url)
    return Database(url=url, kind=kind, engine=kind.create_engine())
