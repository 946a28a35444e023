"""Memory per agent, in one process: resident memory after setup, with K agents mid-call
(their model requests held open), with the same K idle, and with K more spawned and finished.

    python -m benchmarks.memory [--tasks 500] [--tracemalloc] [--tiny]

RSS is the current resident set (/proc/self/statm), measured after gc.collect(); peak RSS is
resource.getrusage's ru_maxrss. RSS rarely shrinks (the allocator keeps freed arenas), so the
idle figure is the growth from K more idle agents after the first K set the high-water mark.
With --tracemalloc the Python heap (tracemalloc's current traced size) is reported too;
tracing slows the run about fourfold and adds its own overhead to RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from benchmarks.common import bench_runtime, db_file, raised_limits, table
from benchmarks.fanout import ROOT_MODEL, BenchmarkError, FanoutModel, check_board, warm_up
from lace.runtime import Runtime

HOLD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Snapshot:
    """Memory and asyncio tasks at one moment."""

    phase: str
    rss: int
    peak_rss: int
    heap: int | None
    tasks: int
    agents: int


def rss_bytes() -> int:
    """The current resident set size, from /proc/self/statm (Linux), else the peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """The peak resident set size so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def snapshot(phase: str, agents: int) -> Snapshot:
    """Collect garbage, then measure."""
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
    return Snapshot(phase, rss_bytes(), peak_rss_bytes(), heap, len(asyncio.all_tasks()),
                    agents)


async def wait_held(model: FanoutModel, count: int) -> None:
    """Until `count` workers are blocked inside their first model call."""
    async with asyncio.timeout(HOLD_TIMEOUT_S):
        while model.held < count:
            await asyncio.sleep(0.01)


async def fan_out(runtime: Runtime, model: FanoutModel, tasks: int, prompt: str,
                  held: Callable[[], Awaitable[None]] | None = None) -> None:
    """One session of `tasks` children run until quiet and checked; with `held`, the
    workers' first calls wait until `held` (run once all of them are waiting) returns."""
    model.hold = asyncio.Event() if held is not None else None
    root = await runtime.start_session(prompt, ROOT_MODEL)
    quiet = asyncio.ensure_future(runtime.run_until_quiet(root.id))
    if held is not None and model.hold is not None:
        await wait_held(model, tasks)
        await held()
        model.hold.set()
    await quiet
    check_board(str(db_file(runtime)), root.id, tasks)


async def measure(tasks: int) -> list[Snapshot]:
    """Baseline; K agents held mid-call; the same K idle; K more spawned and finished."""
    await warm_up()
    model = FanoutModel(tasks, 0.0)
    limits, _ = raised_limits(tasks)
    async with bench_runtime(model, limits) as runtime:
        snapshots = [snapshot("baseline (runtime ready)", 0)]

        async def record_running() -> None:
            snapshots.append(snapshot(f"{tasks} agents mid-call", tasks + 1))

        await fan_out(runtime, model, tasks, "Fan out, held.", record_running)
        snapshots.append(snapshot(f"the same {tasks} idle", tasks + 1))
        await fan_out(runtime, model, tasks, "Fan out again.")
        snapshots.append(snapshot(f"{tasks} more, idle", 2 * (tasks + 1)))
    return snapshots


def per_agent(snapshots: Sequence[Snapshot], tasks: int) -> dict[str, float]:
    """Bytes per running agent (mid-call over the baseline: spawning included) and per idle
    agent (K more idle agents over K idle ones, once the allocator's high-water is set)."""
    base, running, idle, more = snapshots[:4]
    figures = {"rss per running agent": (running.rss - base.rss) / tasks,
               "rss per idle agent": (more.rss - idle.rss) / tasks}
    if None not in (base.heap, running.heap, idle.heap, more.heap):
        assert base.heap is not None and running.heap is not None
        assert idle.heap is not None and more.heap is not None
        figures["heap per running agent"] = (running.heap - base.heap) / tasks
        figures["heap per idle agent"] = (more.heap - idle.heap) / tasks
    return figures


def report(snapshots: Sequence[Snapshot], tasks: int) -> str:
    """Both tables: the phases, then bytes per agent."""
    mib = 1024 * 1024
    rows = [[shot.phase, shot.agents, f"{shot.rss / mib:.1f}", f"{shot.peak_rss / mib:.1f}",
             "-" if shot.heap is None else f"{shot.heap / mib:.1f}", shot.tasks]
            for shot in snapshots]
    phases = table(["phase", "agents", "RSS MiB", "peak RSS MiB", "heap MiB",
                    "asyncio tasks"], rows)
    figures = table(["per agent", "bytes"], [[name, f"{value:,.0f}"] for name, value
                                             in per_agent(snapshots, tasks).items()])
    return f"{phases}\n\n{figures}"


def main(argv: Sequence[str] | None = None) -> list[Snapshot]:
    """Parse the flags, measure, print the tables; returns the snapshots."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500, help="K: agents per phase")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace the heap")
    parser.add_argument("--tiny", action="store_true", help="K=3 (a smoke test)")
    args = parser.parse_args(argv)
    tasks = 3 if args.tiny else args.tasks
    print(raised_limits(tasks)[1])
    if args.tracemalloc:
        tracemalloc.start()
    try:
        snapshots = asyncio.run(measure(tasks))
    finally:
        tracemalloc.stop()
    if max(snapshots[2].tasks, snapshots[3].tasks) > snapshots[0].tasks + 1:
        raise BenchmarkError(f"idle agents hold asyncio tasks: {snapshots[3].tasks} exist")
    print(report(snapshots, tasks))
    return snapshots


if __name__ == "__main__":
    main()
