"""`lace worker` processes on one database (a SQLite file or a PostgreSQL URL), and what they
leave on it: shared by the tests of workers, `lace run --workers`, `lace run --detach` with
`lace wait`, and the shared board on PostgreSQL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from lace.core.assignee import HUMAN
from lace.store import Store, Tx, open_database
from lace.tools.names import ALL_TOOL_NAMES
from tests.lace_forks import lace_popen
from tests.processes import DELIVERED, DELIVERED_POSTGRES, MANY_PROMPT, board_rows, lace_env


def wait_for(condition: Callable[[], object], what: str, timeout: float = 90) -> None:
    """Poll `condition` until it holds; fail (never pass) when `timeout` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (sqlite3.OperationalError, psycopg.OperationalError):  # not there yet, or busy
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


rows = board_rows


def value(db: Path, sql: str, *params: Any) -> Any:
    return rows(db, sql, *params)[0][0]


def live_processes(db: Path) -> list[str]:
    return [row[0] for row in rows(db, "SELECT id FROM processes WHERE expires_at >= ?",
                                   time.time())]


def new_database(tmp_path: Path) -> Path:
    db = tmp_path / "home" / "lace.db"
    db.parent.mkdir(mode=0o700)
    Store(open_database(str(db))).close()
    return db


def assert_delivered_once(db: Path | str) -> None:
    """Every inbox row of every session was delivered, and none twice; no tool call has two
    results; every task completed."""
    delivered = DELIVERED_POSTGRES if str(db).startswith("postgresql://") else DELIVERED
    assert rows(db, f"SELECT inbox_id, COUNT(*) FROM ({delivered}) AS d GROUP BY 1 "
                    "HAVING COUNT(*) > 1") == []
    assert value(db, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL") == 0
    assert value(db, f"SELECT COUNT(DISTINCT inbox_id) FROM ({delivered}) AS d") == value(
        db, "SELECT COUNT(*) FROM inbox")
    assert rows(db, "SELECT thread_id, json_extract(data, '$.call_id'), COUNT(*) FROM events "
                    "WHERE type = 'tool_result' GROUP BY 1, 2 HAVING COUNT(*) > 1") == []
    assert {row[0] for row in rows(db, "SELECT status FROM tasks")} == {"completed"}


@contextmanager
def worker(tmp_path: Path, db: Path, *argv: str, name: str,
           **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """`lace worker --db DB *argv`, its stderr in tmp_path/NAME.log; killed if the test left
    it running."""
    with (tmp_path / f"{name}.log").open("wb") as log:
        process = lace_popen([sys.executable, "-m", "lace", "worker", "--db", str(db),
                                    *argv], env=lace_env(tmp_path / "home", **env),
                                   stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def ready(db: Path, count: int) -> None:
    """Wait until `count` lace processes hold a lease (a worker takes one once ready)."""
    wait_for(lambda: len(live_processes(db)) == count, f"{count} live lace processes")


def write_session(db: Path, prompt: str = MANY_PROMPT) -> str:
    """A session of the demo coordinator with the person's prompt in its inbox, written as
    another process would (`lace task add`, the app, a `lace run` on another host)."""
    store = Store(open_database(str(db)))

    def write(tx: Tx) -> str:
        root = tx.threads.create_session(provider="demo", model="coordinator",
                                         title=prompt[:80], tools=list(ALL_TOOL_NAMES))
        tx.inbox.post(root.id, sender=HUMAN, kind="message", text=prompt)
        return root.id

    try:  # run again, as lace's own writes are, while a worker's write runs alone
        return store.write(write)
    finally:
        store.close()
