"""The board on PostgreSQL on loopback against SQLite, as ratios in one run: one tool call's
store work, and the K-task fan-out through real `lace run` processes.

    python -m benchmarks.shared_board [--calls 200] [--rounds 3] [--tasks 100]
                                      [--latency-ms 500] [--workers 0 1 2 3] [--repeat 1]
                                      [--tiny]

Per tool call: per_event.py's loop (a zero-latency scripted model; a helper makes task_add_note
calls; the time from lace receiving each reply to its next model request), in-process, on a
SQLite file, on a PostgreSQL database, and on one set to synchronous_commit=off (SQLite's own
guarantee under WAL and synchronous=NORMAL), `--rounds` times each, alternating, samples pooled.

Fan-out: fanout_workers.py's run (an OpenAI-compatible server in its own process waits L per
call; the root assigns K tasks to `new:` helpers, each notes and completes), first on SQLite with
one process (`lace run`, the baseline), then `lace run --workers N --db URL` for each N, each on a
fresh database, and again on one set to synchronous_commit=off (unless
`--default-durability-only`). `cpu` adds the `lace` processes' CPU to the PostgreSQL server's
(the postmaster, its ended backends and its live processes).

The server is the tests' throwaway cluster (tests/postgres.py) with the server's default
durability (fsync and synchronous_commit on); SQLite runs with lace's WAL and synchronous=NORMAL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from benchmarks import fanout_workers, per_event
from benchmarks.common import percentile, postgres_server, raised_limits, table
from benchmarks.fanout import warm_up

if TYPE_CHECKING:
    from tests.postgres import PostgresServer

SQLITE, POSTGRES, ASYNC_COMMIT = "SQLite", "PostgreSQL", "PostgreSQL, async commit"
"""ASYNC_COMMIT: the database set to synchronous_commit=off, SQLite's guarantee with WAL and
synchronous=NORMAL (a crash of the machine may lose the last commits, never consistency)."""


@dataclass(frozen=True)
class FanoutRun:
    """One `lace run`: its database, `--workers`, wall and fan-out seconds, the CPU seconds of
    the lace processes and of the database server, how many processes ran helpers."""

    database: str
    workers: int
    wall_s: float
    fanout_s: float
    lace_cpu_s: float
    server_cpu_s: float
    holders: int
    round: int = 0
    """Which of the `--repeat` rounds: its ratios are over that round's SQLite run."""

    @property
    def cpu_s(self) -> float:
        return self.lace_cpu_s + self.server_cpu_s


@dataclass
class SharedBoardResult:
    """Microseconds per tool call by database, and the fan-out runs, the baseline first."""

    tool_call_us: dict[str, list[float]] = field(default_factory=dict)
    fanout: list[FanoutRun] = field(default_factory=list)

    def tool_call_ratio(self, fraction: float, database: str = POSTGRES) -> float:
        """`database`'s percentile over SQLite's."""
        return (percentile(self.tool_call_us[database], fraction)
                / percentile(self.tool_call_us[SQLITE], fraction))

    def fanout_ratios(self, run: FanoutRun) -> tuple[float, float, float]:
        """Wall, fan-out and CPU of `run` over its round's baseline's."""
        base = next(other for other in self.fanout
                    if other.round == run.round and other.database == SQLITE)
        return run.wall_s / base.wall_s, run.fanout_s / base.fanout_s, run.cpu_s / base.cpu_s

    def medians(self) -> list[list[str]]:
        """Per database and `--workers`: the median wall and fan-out ratio over the rounds,
        with their lowest and highest."""
        rows = []
        for database, workers in dict.fromkeys((run.database, run.workers)
                                               for run in self.fanout):
            runs = [run for run in self.fanout
                    if (run.database, run.workers) == (database, workers)]
            walls, fanouts = zip(*(self.fanout_ratios(run)[:2] for run in runs), strict=True)
            rows.append([database, str(workers), str(len(runs)),
                         f"{statistics.median(run.wall_s for run in runs):.2f}",
                         *(f"{statistics.median(values):.2f} ({min(values):.2f} to "
                           f"{max(values):.2f})" for values in (walls, fanouts))])
        return rows


def server_cpu_s(data: Path) -> float:
    """CPU seconds a PostgreSQL cluster has used so far: its postmaster with the backends it
    reaped, and its live processes."""
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            fields = stat.read_text().rpartition(")")[2].split()  # from the state on
            if int(stat.parent.name) == postmaster:
                ticks += sum(int(value) for value in fields[11:15])  # utime .. cstime
            elif int(fields[1]) == postmaster:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def commit_asynchronously(server: PostgresServer, url: str) -> None:
    """Set the database at `url` to synchronous_commit=off (as a person would: ALTER DATABASE);
    its connections opened from now on take it."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


def tool_calls(result: SharedBoardResult, calls: int, server: PostgresServer | None,
               async_commit: bool = False) -> None:
    """One round of per_event's loop on a SQLite file, or on a fresh database of `server`."""
    if server is None:
        timings, _ = asyncio.run(per_event.run_lace(calls))
    else:
        with server.fresh_database() as url:
            if async_commit:
                commit_asynchronously(server, url)
            timings, _ = asyncio.run(per_event.run_lace(calls, url))
    name = SQLITE if server is None else ASYNC_COMMIT if async_commit else POSTGRES
    result.tool_call_us.setdefault(name, []).extend(ms * 1000 for ms in timings)


def fan_out(result: SharedBoardResult, server: PostgresServer, tasks: int, latency_s: float,
            workers: Sequence[int], async_commit: bool = True, repeat: int = 1,
            cpu_per_process: float | None = None) -> None:
    """The baseline and one run per `--workers` N on PostgreSQL, against one model server;
    with `async_commit`, each N again on a database set to synchronous_commit=off; all of it
    `repeat` times (rounds), so that every figure's neighbours in time are the others'."""
    context = multiprocessing.get_context("spawn")
    address, stop = context.Queue(), context.Event()
    model_server = context.Process(target=fanout_workers.serve, args=(latency_s, address, stop),
                                   daemon=True)
    model_server.start()
    try:
        base_url = address.get(timeout=30)
        for round_ in range(repeat):
            run = fanout_workers.run_once(base_url, tasks, 0, cpu_per_process=cpu_per_process)
            result.fanout.append(FanoutRun(SQLITE, 0, run["wall"], run["fanout"], run["cpu"],
                                           0.0, int(run["holders"]), round_))
            for count in workers:
                for database in (POSTGRES, ASYNC_COMMIT) if async_commit else (POSTGRES,):
                    with server.fresh_database() as url:
                        if database == ASYNC_COMMIT:
                            commit_asynchronously(server, url)
                        before = server_cpu_s(server.data)
                        run = fanout_workers.run_once(base_url, tasks, count, database=url,
                                                      cpu_per_process=cpu_per_process)
                        used = server_cpu_s(server.data) - before
                    result.fanout.append(FanoutRun(database, count, run["wall"], run["fanout"],
                                                   run["cpu"], used, int(run["holders"]),
                                                   round_))
                    print(f"  {database} --workers {count} done", flush=True)
    finally:
        stop.set()
        model_server.join(10)


def report(result: SharedBoardResult) -> str:
    """Both tables."""
    calls = [[name, len(values), *(f"{percentile(values, fraction):.0f}"
                                    for fraction in (0.50, 0.95)),
              *(f"{result.tool_call_ratio(fraction, name):.2f}" for fraction in (0.50, 0.95))]
             for name, values in result.tool_call_us.items()]
    runs = []
    for run in result.fanout:
        wall, fanout, cpu = result.fanout_ratios(run)
        runs.append([run.database, run.workers, run.holders, f"{run.wall_s:.2f}", f"{wall:.2f}",
                     f"{run.fanout_s:.2f}", f"{fanout:.2f}", f"{run.lace_cpu_s:.1f}",
                     f"{run.server_cpu_s:.1f}", f"{cpu:.2f}"])
    tables = [
        table(["per tool call", "calls", "p50 us", "p95 us", "p50 ratio", "p95 ratio"], calls),
        table(["fan-out", "--workers", "processes", "wall s", "wall ratio", "fan-out s",
               "fan-out ratio", "lace cpu s", "db cpu s", "cpu ratio"], runs)]
    if any(run.round for run in result.fanout):
        tables.append(table(["median over rounds", "--workers", "rounds", "wall s",
                             "wall ratio", "fan-out ratio"], result.medians()))
    return "\n\n".join(tables)


def machine(bindir: Path) -> str:
    """Cores, load, date and the two databases' versions."""
    postgres = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                              text=True, check=False).stdout.strip()
    return (f"{os.cpu_count()} cores, load average {load_average()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"SQLite {sqlite3.sqlite_version}; {postgres}")


def load_average() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def main(argv: Sequence[str] | None = None,
         server: PostgresServer | None = None) -> SharedBoardResult:
    """Parse the flags, start a PostgreSQL server (unless given one), run both parts, print the
    tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shared_board",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="tool calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="tool-call rounds per database")
    parser.add_argument("--tasks", type=int, default=100, help="K, the fan-out's tasks")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="L per model call")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 3],
                        help="the `lace run --workers N` runs on PostgreSQL")
    parser.add_argument("--repeat", type=int, default=1, metavar="K",
                        help="run the fan-outs K times, in turn, and add their medians")
    parser.add_argument("--default-durability-only", action="store_true",
                        help="no fan-out runs on a database set to synchronous_commit=off")
    parser.add_argument("--cpu-per-process", type=float, metavar="CORES",
                        help="limit each lace process of the fan-outs to CORES of a core, each "
                             "in a CPU cgroup of its own, as workers in containers with a CPU "
                             "limit (Linux, as root); PostgreSQL and the model server unlimited")
    parser.add_argument("--tiny", action="store_true",
                        help="5 calls, 1 round, K=3, L=20 ms, --workers 1 (a smoke test)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.calls, args.rounds, args.tasks, args.latency_ms, args.workers = 5, 1, 3, 20.0, [1]
    result = SharedBoardResult()
    with contextlib.nullcontext(server) if server else postgres_server() as server:
        print(machine(server.bindir))
        print(f"PostgreSQL on 127.0.0.1:{server.port} with "
              f"{', '.join(server.settings) or 'its default durability'}; "
              "SQLite: lace's WAL, synchronous=NORMAL")
        print(raised_limits(1)[1])
        asyncio.run(warm_up())
        for _ in range(args.rounds):
            tool_calls(result, args.calls, None)
            tool_calls(result, args.calls, server)
            tool_calls(result, args.calls, server, async_commit=True)
        print(f"fan-out: K = {args.tasks}, L = {args.latency_ms:g} ms; limits raised through "
              "LACE_LIMITS__ variables; `processes` ran the helpers' last turns", flush=True)
        if args.cpu_per_process is not None:
            print(f"each lace process limited to {args.cpu_per_process:g} of a core, in a CPU "
                  "cgroup of its own (a container's CPU limit); PostgreSQL and the model "
                  "server unlimited", flush=True)
        fan_out(result, server, args.tasks, args.latency_ms / 1000, args.workers,
                async_commit=not args.default_durability_only, repeat=args.repeat,
                cpu_per_process=args.cpu_per_process)
        print(f"load average at the end: {load_average()}")
    print(report(result))
    print(f"ratios: over {SQLITE}'s per tool call, and over {SQLITE} with one process (no "
          "workers) in the fan-out")
    return result


if __name__ == "__main__":
    main()
