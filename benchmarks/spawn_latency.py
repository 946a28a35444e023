"""Spawn latency: from the moment the root's task_create reply reaches lace to each child's
first model request, both stamped inside the scripted model client.

    python -m benchmarks.spawn_latency [--tasks 100] [--latency-ms 50] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.common import bench_runtime, db_file, percentile, raised_limits, table
from benchmarks.fanout import ROOT_MODEL, BenchmarkError, FanoutModel, check_board, warm_up

TARGETS_MS = {"median": 5.0, "p99": 20.0}


@dataclass(frozen=True)
class SpawnRun:
    """Per child, milliseconds from the task_create reply to its first model request."""

    tasks: int
    latencies_ms: list[float]

    def figures(self) -> dict[str, float]:
        """median, p90, p99 and max."""
        values = self.latencies_ms
        return {"median": statistics.median(values), "p90": percentile(values, 0.90),
                "p99": percentile(values, 0.99), "max": max(values)}


async def run_spawn(tasks: int, latency_s: float) -> SpawnRun:
    """One fan-out of `tasks` children, run until quiet and checked."""
    model = FanoutModel(tasks, latency_s)
    limits, _ = raised_limits(tasks)
    async with bench_runtime(model, limits) as supervisor:
        root = await supervisor.start_session("Fan the work out.", ROOT_MODEL)
        await supervisor.run_until_quiet(root.id)
        check_board(str(db_file(supervisor)), root.id, tasks)
    if model.created_at is None or len(model.first_calls) != tasks:
        raise BenchmarkError(f"{len(model.first_calls)} of {tasks} children called their model")
    return SpawnRun(tasks, [(first - model.created_at) * 1000
                            for first in model.first_calls.values()])


def report(run: SpawnRun) -> str:
    """The table of figures against the targets."""
    rows = []
    for name, value in run.figures().items():
        target = TARGETS_MS.get(name)
        rows.append([name, f"{value:.2f}", f"< {target:g}" if target else "-",
                     ("yes" if value < target else "NO") if target else "-"])
    return table(["spawn latency", "ms", "target ms", "met"], rows)


def main(argv: Sequence[str] | None = None) -> SpawnRun:
    """Parse the flags, run, print the table; returns the run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spawn_latency",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="K: children spawned")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="L: latency per call")
    parser.add_argument("--tiny", action="store_true", help="K=3, L=1 ms (a smoke test)")
    args = parser.parse_args(argv)
    tasks, latency_ms = (3, 1.0) if args.tiny else (args.tasks, args.latency_ms)
    print(raised_limits(tasks)[1])
    print(f"K = {tasks} children created by one reply (task_create takes 20 tasks per call, "
          f"so {-(-tasks // 20)} calls), L = {latency_ms:g} ms per model call; "
          "clock: time.perf_counter in the model client")
    asyncio.run(warm_up())
    began = time.perf_counter()
    run = asyncio.run(run_spawn(tasks, latency_ms / 1000))
    print(report(run))
    print(f"(whole run {time.perf_counter() - began:.2f} s)")
    return run


if __name__ == "__main__":
    main()
