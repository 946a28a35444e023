"""The store: tables, migrations, and `Tx`, one transaction made of row verbs per table and
the board's rules over them, on SQLite or PostgreSQL (`lace.store.engines`)."""

from lace.store.db import Database, open_database, resolve_db_url
from lace.store.prepared import Later
from lace.store.store import Store
from lace.store.tx import Tx

__all__ = ["Database", "Later", "Store", "Tx", "open_database", "resolve_db_url"]
