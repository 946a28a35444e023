"""Whether a lace file is damaged, checked once per opened database before its first write, so a
damaged file is refused instead of written into.

A whole `PRAGMA quick_check` reads every page: 1.4 s warm (3.2 s cold) on an 868 MB file here,
too slow before each command. So the check has two parts. Always: the first and the last entry
of every table and index, which reads each b-tree's root and the pages down to both ends (where
SQLite appends): 2 ms on that file, and it finds a damaged root (tables' roots are the early
pages, such as page 6). Then a `quick_check` of the whole file when it is at most
`FULL_CHECK_BYTES` (30 ms at 32 MB), else of one table after another, smallest first, until
`CHECK_BUDGET_S` is spent (`interrupt()` ends a check mid-table): 0.105 s in all on 868 MB."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

FULL_CHECK_BYTES = 32 * 1024 * 1024
CHECK_BUDGET_S = 0.1
_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def is_damage(error: sqlite3.Error) -> bool:
    """Whether SQLite reported a damaged file (corrupt pages, or not a database at all)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _DAMAGE_CODES


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _edges(connection: sqlite3.Connection) -> dict[str, int]:
    """Read the first and the last entry of every table and index (their root, the pages down
    to both ends, and the leaves there); return each table's rough size in rows."""
    schema = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type "
                                "IN ('table', 'index') AND rootpage > 0").fetchall()
    sizes: dict[str, int] = {}
    for kind, name, table, sql in schema:
        if kind == "table":
            ends = [connection.execute(f"SELECT rowid FROM {_quoted(name)} ORDER BY rowid "
                                       f"{order} LIMIT 1").fetchone() for order in ("", "DESC")]
            sizes[name] = ends[1][0] - ends[0][0] + 1 if ends[0] else 0
            continue
        columns = [row[2] for row in connection.execute(f"PRAGMA index_info({_quoted(name)})")]
        if not columns or columns[0] is None:  # an expression index: its table's check has it
            continue
        _, partial, where = (sql or "").partition(" WHERE ")  # a partial index: its rows
        for order in ("", "DESC"):
            connection.execute(f"SELECT {_quoted(columns[0])} FROM {_quoted(table)} INDEXED BY "
                               f"{_quoted(name)} {partial.strip()} {where} ORDER BY "
                               f"{_quoted(columns[0])} {order} LIMIT 1").fetchone()
    return sizes


def _first_problem(rows: list[tuple[str]]) -> str | None:
    return None if rows == [("ok",)] else rows[0][0]


def _quick_check_within(connection: sqlite3.Connection, table: str,
                        seconds: float) -> str | None:
    """`quick_check` one table and its indexes, interrupted after `seconds` (then None)."""
    timer = threading.Timer(seconds, connection.interrupt)
    timer.start()
    try:
        return _first_problem(connection.execute(
            f"PRAGMA quick_check({_quoted(table)})").fetchall())
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode != sqlite3.SQLITE_INTERRUPT:
            raise
        return None
    finally:
        timer.cancel()
        timer.join()


def _bounded_quick_check(connection: sqlite3.Connection, tables: list[str]) -> str | None:
    """`quick_check` each table in turn until the budget is spent."""
    deadline = time.monotonic() + CHECK_BUDGET_S
    for table in tables:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if (problem := _quick_check_within(connection, table, remaining)) is not None:
            return problem
    return None


def damage(path: Path, busy_timeout_s: float) -> str | None:
    """What is wrong with the file at `path`, or None when the check found nothing (a missing or
    empty file has nothing to check). Errors other than damage (a locked or unreadable file)
    are raised."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=busy_timeout_s,
                                 check_same_thread=False)
    try:
        connection.execute("PRAGMA cell_size_check=ON")
        sizes = _edges(connection)
        if path.stat().st_size <= FULL_CHECK_BYTES:
            return _first_problem(connection.execute("PRAGMA quick_check").fetchall())
        return _bounded_quick_check(connection, sorted(sizes, key=sizes.__getitem__))
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            return str(error)
        raise
    finally:
        connection.close()


class WriteGuard:
    """Checks one database file for damage before the first write through an engine, once; a
    damaged file stays refused for the engine's life."""

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.checked = False
        self.problem: str | None = None
        self._lock = threading.Lock()

    def before_write(self) -> str | None:
        """None when writing may go on, else what is wrong with the file."""
        if self.checked:
            return self.problem
        with self._lock:
            if not self.checked:
                self.problem = damage(self.path, self.busy_timeout_s)
                self.checked = True
        return self.problem
