"""Fan-out through `lace run` with and without `--workers N`: a root assigns K tasks to
`new:openai/worker` agents of a small OpenAI-compatible server (its own process) that waits L
per call; each `lace run` is a real process, its workers too.

    python -m benchmarks.fanout_workers [--tasks 40 100] [--latency-ms 500] [--workers 0 1 2]
                                        [--db sqlite|postgresql]

Two figures per run: `wall`, the whole `lace run` as a person sees it (start-up, the root,
the fan-out, the workers' start and stop); and `fan-out`, from the root's task_create reply to
its final answer, with the root waiting (listing tasks) until the run's workers are up, so
that they can take part (`--no-wait`: it fans out at once, as a real run does). `cpu` is the
CPU time of the run and its workers together; `processes` how many ran the helpers' last turns.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from typing import Any

from benchmarks.common import postgres_server, table
from benchmarks.cpu_limits import per_process_limits
from benchmarks.fanout import root_step, worker_step

PROMPT = "Fan out {tasks} tasks once {processes} processes run on {db}"


def script(model: str, messages: list[dict[str, Any]]) -> Any:
    """The root lists tasks until the run's processes are up, then fans out; workers note and
    complete their task."""
    from lace.llm.types import ScriptedReply

    if model != "root":
        text, calls = worker_step(messages)
        return ScriptedReply(text=text, tool_calls=list(calls))
    prompt = next(str(message["content"]) for message in messages if message["role"] == "user")
    found = re.match(PROMPT.format(tasks=r"(\d+)", processes=r"(\d+)", db=r"(\S+)"), prompt)
    assert found is not None, prompt  # the budget line may follow the prompt
    tasks, processes, db = found.groups()
    started = any(message["role"] == "assistant" and any(
        call["function"]["name"] == "task_create" for call in message.get("tool_calls") or [])
        for message in messages)
    if not started:
        live = board_value(db, "SELECT COUNT(*) FROM processes WHERE expires_at >= ?",
                           time.time())
        if live < int(processes):
            return ScriptedReply(tool_calls=[("task_list", {})])
        messages = [message for message in messages if message["role"] in ("system", "user")]
    text, calls = root_step(messages, int(tasks), "new:openai/worker")
    return ScriptedReply(text=text, tool_calls=list(calls))


def board_value(database: str, sql: str, *parameters: Any) -> Any:
    """One value from a run's board: a SQLite file, or a PostgreSQL URL (the SQL translated as
    the tests translate theirs)."""
    if database.startswith("postgresql://"):
        from tests.postgres import query

        (value,), = query(database, sql, *parameters)
        return value
    with contextlib.closing(sqlite3.connect(database)) as connection:
        (value,), = connection.execute(sql, parameters)
        return value


def serve(latency_s: float, address: Any, stop: ProcessEvent) -> None:
    """The server process: answer from `script` until `stop` is set."""
    from lace.llm.openai_fake import FakeOpenAI

    with FakeOpenAI(script, latency_s, backlog=1024) as server:
        address.put(server.base_url)
        stop.wait()


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_once(base_url: str, tasks: int, workers: int, wait: bool = True,
             database: str | None = None,
             cpu_per_process: float | None = None) -> dict[str, float]:
    """One `lace run` on a fresh database (a SQLite file in a temporary folder, or `database`,
    the URL of an empty PostgreSQL database): wall, fan-out and CPU seconds, and how many
    processes ran the helpers' last turns. With `cpu_per_process`, the run and each process it
    starts are limited to that share of a core, each on its own (`benchmarks.cpu_limits`)."""
    with tempfile.TemporaryDirectory(prefix="lace-bench-") as folder, \
            per_process_limits(cpu_per_process) as limits:
        db = database or str(Path(folder) / "lace.db")
        env = {key: value for key, value in os.environ.items() if not key.startswith("LACE_")}
        env.update(LACE_HOME=folder, OPENAI_BASE_URL=base_url, OPENAI_API_KEY="sk-not-real",
                   LACE_LIMITS__MAX_RUNNING=str(tasks + 1), LACE_LIMITS__MAX_CHILDREN=str(tasks),
                   LACE_LIMITS__SPAWNS_PER_MINUTE=str(tasks))
        joined = [] if limits is None else [  # the run joins its group, then is lace
            "sh", "-c", 'echo $$ > "$0" && exec "$@"', str(limits.join_first())]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        process = subprocess.Popen(
            [*joined, sys.executable, "-m", "lace", "run", "--model", "openai/root", "--db", db,
             *(["--workers", str(workers)] if workers else []),
             PROMPT.format(tasks=tasks, processes=workers + 1 if wait else 1, db=db)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)
        if limits is not None:
            limits.watch(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if process.returncode != 0 or f"All {tasks} tasks are done" not in stdout:
            raise AssertionError(f"the run failed: {stderr[-2000:]}")
        created = board_value(db, "SELECT MIN(created_at) FROM events WHERE type = 'tool_call' "
                              "AND json_extract(data, '$.tool_name') = 'task_create'")
        ended = board_value(db, "SELECT MAX(created_at) FROM events "
                            "WHERE type = 'agent_message'")
        holders = board_value(db, "SELECT COUNT(DISTINCT lease_holder) FROM agent_metadata "
                              "WHERE thread_id LIKE '%.%'")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "fanout": stamp(ended) - stamp(created), "cpu": cpu,
            "holders": holders}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fanout_workers",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[40, 100])
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                        help="a SQLite file per run, or a database per run on a throwaway "
                             "PostgreSQL server on 127.0.0.1")
    parser.add_argument("--no-wait", action="store_true",
                        help="the root fans out at once, before the workers are up")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    address, stop = context.Queue(), context.Event()
    server = context.Process(target=serve, args=(args.latency_ms / 1000, address, stop),
                             daemon=True)
    server.start()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(server.join, 10)
        cleanup.callback(stop.set)
        postgres = cleanup.enter_context(postgres_server()) if args.db == "postgresql" else None
        base_url = address.get(timeout=30)
        print(f"L = {args.latency_ms:g} ms per call; {os.cpu_count()} cores; the server runs in "
              "its own process; `fan-out` = root's task_create reply to its final answer; "
              f"database: {args.db}")
        rows = []
        for tasks in args.tasks:
            baseline = None
            for workers in args.workers:
                for _ in range(args.repeat):
                    with (postgres.fresh_database() if postgres
                          else contextlib.nullcontext()) as url:
                        result = run_once(base_url, tasks, workers, wait=not args.no_wait,
                                          database=url)
                    baseline = baseline or result
                    rows.append([tasks, workers, f"{result['wall']:.2f}",
                                 f"{result['wall'] / baseline['wall']:.2f}",
                                 f"{result['fanout']:.2f}",
                                 f"{result['fanout'] / baseline['fanout']:.2f}",
                                 f"{result['cpu']:.1f}", result["holders"]])
                    print(rows[-1], flush=True)
    print(table(["K", "--workers", "wall s", "wall ratio", "fan-out s", "fan-out ratio",
                 "cpu s", "processes"], rows))


if __name__ == "__main__":
    main()
