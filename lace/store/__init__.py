"""The store: tables, migrations, and one class of verbs, each verb one transaction, on SQLite
or PostgreSQL (`lace.store.engines`)."""

from lace.store.agent_rules import Tx
from lace.store.db import Database, open_database, resolve_db_url
from lace.store.store import Store

__all__ = ["Database", "Store", "Tx", "open_database", "resolve_db_url"]
