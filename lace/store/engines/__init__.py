"""The databases lace runs on, one module each behind `Engine`: SQLite (the embedded default)
and PostgreSQL (a board shared by processes on several hosts)."""

from __future__ import annotations

from lace.store.engines.base import (
    READONLY_OPTION,
    ChangeFeed,
    Engine,
    LockBusyError,
    Polling,
    driver,
)
from lace.store.engines.postgresql import PostgreSQL, is_postgres_url
from lace.store.engines.sqlite import SQLite

__all__ = ["READONLY_OPTION", "ChangeFeed", "Engine", "LockBusyError", "Polling", "driver",
           "engine_for"]


def engine_for(url: str) -> Engine:
    """The engine of a database URL lace resolved (`resolve_db_url`)."""
    return PostgreSQL(url) if is_postgres_url(url) else SQLite(url)
