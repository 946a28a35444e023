"""The SQLite store: tables, migrations, and one class of verbs, each verb one transaction."""

from lace.store.db import Database, open_database, resolve_db_url
from lace.store.store import Store
from lace.store.tx import Tx

__all__ = ["Database", "Store", "Tx", "open_database", "resolve_db_url"]
