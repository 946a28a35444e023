"""Helpers shared by the benchmarks: a runtime on a temporary SQLite file (or a PostgreSQL
database) with raised limits, a throwaway PostgreSQL server, percentiles, and plain-text tables."""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

os.environ.setdefault("LACE_TEST_PROVIDERS", "1")  # the benchmarks' `scripted` models

from lace.config import Budgets, Limits, Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.types import ModelClient
from lace.runtime import Runtime, open_runtime
from lace.store import Store, open_database

if TYPE_CHECKING:
    from tests.postgres import PostgresServer

RAISED = ("max_running", "max_children", "spawns_per_minute")


def raised_limits(agents: int) -> tuple[Limits, str]:
    """Spawn and concurrency limits high enough for `agents` children of one root (the
    shipped defaults refuse the 21st live child), and a line saying which were raised."""
    defaults = Limits()
    limits = Limits(max_running=max(defaults.max_running, agents + 1),
                    max_children=max(defaults.max_children, agents),
                    spawns_per_minute=max(defaults.spawns_per_minute, agents))
    described = ", ".join(f"{key}={getattr(limits, key)} (default {getattr(defaults, key)})"
                          for key in RAISED)
    return limits, (f"limits raised for {agents} children: {described}; max_depth="
                    f"{limits.max_depth} and the rest at their defaults")


def bench_settings(limits: Limits) -> Settings:
    """Settings with every field given, so no lace.toml or LACE_ variable leaks in."""
    return Settings(model="scripted/root", limits=limits, budgets=Budgets(),
                    tools=ToolSettings(), profiles={})


@asynccontextmanager
async def bench_runtime(client: ModelClient, limits: Limits, directory: Path | None = None,
                        database: str | None = None) -> AsyncIterator[Runtime]:
    """A runtime over a fresh, migrated SQLite file (lace's own WAL, synchronous=NORMAL), or
    over `database` (the URL of an empty PostgreSQL database), built as tests/conftest.py
    builds it; stopped and closed on exit."""
    with tempfile.TemporaryDirectory(prefix="lace-bench-", dir=directory) as folder:
        store = Store(open_database(database or str(Path(folder) / "lace.db")))
        runtime = open_runtime(store, bench_settings(limits), client, check_model=check_model)
        try:
            yield runtime
        finally:
            await runtime.stop()
            runtime.close()
            store.close()


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (the tests' own, tests/postgres.py) with the
    server's default durability (fsync, synchronous_commit and full_page_writes on)."""
    from tests.postgres import BINARIES_MISSING, PostgresServer, find_binaries

    bindir = find_binaries()
    if bindir is None:
        raise RuntimeError(BINARIES_MISSING)
    server = PostgresServer.start(bindir, settings=())
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def traced_statements(target: Any, record: Callable[[str], None]) -> Iterator[None]:
    """Hand `record` every statement SQLite runs, meanwhile, on the connections `target` (an
    engine, or `sqlalchemy.pool.Pool` for all) checks out; lace runs its hot statements on the
    raw sqlite3 connection, which SQLAlchemy's events miss."""
    traced: list[Any] = []

    def trace(dbapi_connection: Any, *_args: Any) -> None:
        dbapi_connection.set_trace_callback(record)
        traced.append(dbapi_connection)

    sa.event.listen(target, "checkout", trace)
    try:
        yield
    finally:
        sa.event.remove(target, "checkout", trace)
        for connection in traced:
            with contextlib.suppress(sqlite3.ProgrammingError):  # closed meanwhile: nothing to undo
                connection.set_trace_callback(None)


def db_file(runtime: Runtime) -> Path:
    """The SQLite file behind a runtime."""
    path = runtime.store.database.engine.url.database
    assert path is not None
    return Path(path)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (`fraction` in 0..1) of non-empty `values`."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows as aligned plain-text columns: the first column left, the others right."""
    cells = [[str(header) for header in headers],
             *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    lines = []
    for number, row in enumerate(cells):
        parts = [cell.ljust(width) if column == 0 else cell.rjust(width)
                 for column, (cell, width) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)
