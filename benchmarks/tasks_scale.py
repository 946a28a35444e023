"""`lace tasks` on a board of 100,000 tasks, on SQLite and on PostgreSQL side by side: the same
rows bulk-inserted into a database lace migrated (`open_database`), then the command run in
this process (its output thrown away), with and without `--limit`.

    python -m benchmarks.tasks_scale [--tasks 100000] [--latest 20000] [--runs 7] [--tiny]

The latest session (the one `lace tasks` shows) holds `--latest` of the tasks, the others are
spread over 99 older sessions; statuses and priorities are mixed as on a used board, and every
fourth task has a note. PostgreSQL is a throwaway server on 127.0.0.1 (the tests' own,
`tests/postgres.py`) with its default durability. Target: under 100 ms for a page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import postgres_server, table
from lace.cli.board import tasks_command
from lace.store import Store, open_database, schema

if TYPE_CHECKING:
    from tests.postgres import PostgresServer

TARGET_MS = 100.0
SESSIONS = 100
STATUSES = {"completed": 60, "archived": 5, "pending": 15, "in_progress": 12, "blocked": 8}
PRIORITIES = {"high": 20, "medium": 60, "low": 20}
START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def rows(tasks: int, latest: int, seed: int = 7) -> tuple[list[dict[str, Any]], ...]:
    """Threads (the sessions' roots), tasks and notes of the board, as dicts of values."""
    pick = random.Random(seed)
    roots = [f"lace_bench_{index:04d}" for index in range(SESSIONS)]
    threads = [{"id": root, "parent_id": None, "root_id": root, "title": f"Session {index}",
                "created_at": _at(index * 3600), "updated_at": _at(index * 3600)}
               for index, root in enumerate(roots)]
    older = tasks - latest
    task_rows, notes = [], []
    for number in range(tasks):
        session = SESSIONS - 1 if number >= older else number * (SESSIONS - 1) // max(older, 1)
        task_id = f"task_bench_{number:07d}"
        when = _at(session * 3600 + number % 3000)
        task_rows.append({
            "id": task_id, "title": f"Task {number}", "prompt": "Do the part.",
            "status": pick.choices(list(STATUSES), list(STATUSES.values()))[0],
            "priority": pick.choices(list(PRIORITIES), list(PRIORITIES.values()))[0],
            "assigned_to": None, "created_by": roots[session], "thread_id": roots[session],
            "created_at": when, "updated_at": when})
        if number % 4 == 0:
            notes.append({"task_id": task_id, "author": roots[session], "content": "noted",
                          "created_at": when})
    return threads, task_rows, notes


def _at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build(url: str, tasks: int, latest: int) -> float:
    """Migrate the database and bulk-insert the board; seconds it took."""
    started = time.perf_counter()
    store = Store(open_database(url))
    threads, task_rows, notes = rows(tasks, latest)
    with store.database.engine.begin() as connection:
        for table_, values in ((schema.threads, threads), (schema.tasks, task_rows),
                               (schema.task_notes, notes)):
            for start in range(0, len(values), 20_000):
                connection.execute(table_.insert(), values[start:start + 20_000])
    if store.database.path is None:
        with store.database.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "ANALYZE")
    store.close()
    return time.perf_counter() - started


def timed(db: str, limit: int | None, as_json: bool, runs: int) -> tuple[float, float, int]:
    """Median and best milliseconds of `lace tasks` in this process, and its lines."""
    times, lines = [], 0
    for _ in range(runs):
        output = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(output):
            tasks_command(argparse.Namespace(db=db, session=None, all=False, limit=limit,
                                             json=as_json))
        times.append((time.perf_counter() - started) * 1000)
        lines = output.getvalue().count("\n")
    return statistics.median(times), min(times), lines


@contextlib.contextmanager
def databases(folder: Path, server: PostgresServer | None) -> Iterator[list[tuple[str, str]]]:
    """A SQLite file and a fresh database on `server`, else on a throwaway PostgreSQL server."""
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(postgres_server())
        url = stack.enter_context(server.fresh_database())
        yield [("SQLite", str(folder / "lace.db")), ("PostgreSQL", url)]


def main(argv: list[str] | None = None,
         server: PostgresServer | None = None) -> list[list[str]]:
    """Parse the flags, build both boards, time `lace tasks` on each; the table's rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--latest", type=int, default=20_000,
                        help="tasks of the latest session, the one `lace tasks` shows")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tiny", action="store_true", help="1,000 tasks, 3 runs")
    args = parser.parse_args(argv)
    tasks, latest, runs = (1_000, 300, 3) if args.tiny else (args.tasks, args.latest, args.runs)
    print(f"lace tasks on {tasks:,} tasks ({latest:,} in the latest session), "
          f"median and best of {runs} runs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    found = []
    with tempfile.TemporaryDirectory() as folder, databases(Path(folder), server) as engines:
        for name, db in engines:
            built = build(db, tasks, latest)
            for limit, as_json in ((50, False), (50, True), (None, False)):
                median, best, lines = timed(db, limit, as_json, runs)
                shown = f"--limit {limit}" if limit else "no limit"
                found.append([name, shown + (" --json" if as_json else ""), f"{lines:,}",
                              f"{median:.1f}", f"{best:.1f}", f"{built:.1f}",
                              "yes" if limit is None or median < TARGET_MS else "no"])
    print(table(["engine", "lace tasks", "lines", "median ms", "best ms", "build s",
                 f"page < {TARGET_MS:.0f} ms"], found))
    return found


if __name__ == "__main__":
    main()
