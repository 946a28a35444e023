"""Which schema a database holds, and the refusals before lace writes to one: a file or server
database that is not lace's, or one written by a newer lace."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from lace.core.errors import DatabaseRefusedError
from lace.store import postgres
from lace.store.failures import storage_error

HEAD_REVISION = "lace_0012"
REVISION_PREFIX = "lace_"


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
        storage = storage_error(error, path)
        if storage is not None:
            raise storage from None
        if getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT:
            raise DatabaseRefusedError(f"{path} is damaged ({error}); lace will not use it. "
                                       "Restore a backup, or see what is wrong with: sqlite3 "
                                       f"{path} 'PRAGMA integrity_check'") from None
        raise DatabaseRefusedError(f"{path} is not a lace database ({error}).") from None
    return _known_revision(row[0] if row else None, str(path))


def _known_revision(revision: str | None, where: str) -> str:
    """`revision`, unless it is not lace's or newer than this lace knows."""
    if revision is None or not revision.startswith(REVISION_PREFIX):
        raise DatabaseRefusedError(f"{where} is not a lace database (alembic revision {revision}).")
    if _revision_number(revision) > _revision_number(HEAD_REVISION):
        raise DatabaseRefusedError(
            f"{where} was written by a newer lace (schema {revision}, this lace knows up to "
            f"{HEAD_REVISION}); upgrade lace to open it."
        )
    return revision


def check_existing_server(url: str) -> str | None:
    """Refuse a server database that holds other tables or was written by a newer lace; its
    revision (None when it is empty). Read without taking the write lock."""
    where = postgres.shown(url)
    engine = sa.create_engine(url, poolclass=NullPool)
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
    return _known_revision(revision, where)
