"""Profile a runtime benchmark with cProfile on both of lace's threads: the event loop and the
store thread (cProfile alone sees only the thread that enabled it).

    python -m benchmarks.profile_runtime fanout --tasks 100 [--top 25]
    python -m benchmarks.profile_runtime per_event --calls 200

Everything after the benchmark's name goes to it. Both profilers count each thread's CPU time
(time.thread_time), so waiting for I/O or the GIL is not charged to anyone. Prints lace's
functions by own time (cProfile's tottime, the libraries they call excluded) and by cumulative
time, as a share of both threads' CPU time (setup and warm-up included). cProfile's overhead
inflates code that makes many small calls (pydantic's schema building, SQLAlchemy) several
times over: compare runs with each other, use the call counts, and use a sampling profiler
(py-spy) for true shares.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from benchmarks.common import table
from lace.runtime.database import AsyncStore

T = TypeVar("T")
BENCHMARKS = ("fanout", "per_event", "spawn_latency", "memory")


def profile_writer(writer: cProfile.Profile) -> Callable[[], None]:
    """Run every piece of store work under `writer`; returns the undo."""
    original = AsyncStore.call

    async def call(self: AsyncStore, work: Callable[[], T]) -> T:
        return await original(self, lambda: writer.runcall(work))

    AsyncStore.call = call  # type: ignore[method-assign]

    def undo() -> None:
        AsyncStore.call = original  # type: ignore[method-assign]

    return undo


def lace_rows(stats: pstats.Stats, key: int, top: int) -> list[list[str]]:
    """The `top` lace functions by column `key` of cProfile's (cc, nc, tt, ct, callers)."""
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values())
    ranked = sorted(((entry[key], entry[1], file, name)
                     for (file, _line, name), entry in entries.items() if "/lace/" in file),
                    reverse=True)[:top]
    return [[f"{file.rsplit('/lace/', 1)[1]}:{name}", f"{100 * seconds / total:.1f}",
             f"{seconds * 1000:.0f}", calls] for seconds, calls, file, name in ranked]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the named benchmark under both profilers and print the two tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_runtime",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", choices=BENCHMARKS)
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    args, rest = parser.parse_known_args(argv)
    module = importlib.import_module(f"benchmarks.{args.benchmark}")
    loop, writer = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
    undo = profile_writer(writer)
    try:
        loop.runcall(module.main, rest)
    finally:
        undo()
    stats = pstats.Stats(loop)
    writer.create_stats()
    if writer.stats:  # the store thread ran nothing when no lock was held
        stats.add(writer)
    headers = ["lace function", "% of time", "ms", "calls"]
    print(f"\n{args.benchmark}, both threads; by own time:")
    print(table(headers, lace_rows(stats, 2, args.top)))
    print("\nby cumulative time (a caller includes its callees):")
    print(table(headers, lace_rows(stats, 3, args.top)))


if __name__ == "__main__":
    main()
