"""Fan-out efficiency, lace alone: a root assigns K tasks to `new:` agents through a scripted
model that takes a fixed latency L per call; wall time against the critical path of latencies.

    python -m benchmarks.fanout [--tasks 10 100 500] [--latency-ms 50] [--repeat 1] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import bench_runtime, db_file, raised_limits, table
from lace.llm.types import DeltaCallback, ModelReply, ToolCallRequest

ROOT_MODEL = "scripted/root"
WORKER = "new:scripted/worker"
WORKER_CALLS = 2  # task_add_note, task_complete (its turn then ends without another call)
TASKS_PER_CALL = 20  # task_create takes at most 20 tasks; more go in further calls of one reply
ASSIGNED = re.compile(r"You have been assigned task '([^']+)'")
TARGETS = {100: 1.10, 500: 1.25}
CRITICAL_PATH = ("ideal = (2 + T) x L: the root's first call (task_create), a child's T calls, "
                 "then the root's final turn after the last completion; its answer to the "
                 "tool results runs alongside the children's calls.")


class BenchmarkError(AssertionError):
    """The run did not do what the benchmark measures (so its figures would mean nothing)."""


@dataclass
class FanoutModel:
    """A scripted `ModelClient`: the root creates `tasks` tasks for `new:scripted/worker`
    agents in one reply, answers each wake, and sums up once every completion arrived; each
    worker adds a note, completes its task and answers. Every call sleeps `latency_s`.

    Timestamps (time.perf_counter): `created_at` when the reply carrying task_create returns
    to lace, `first_calls[task_id]` when a worker's first request arrives. When `hold` is set,
    workers' first calls wait for it (the memory benchmark holds K agents mid-call)."""

    tasks: int
    latency_s: float
    hold: asyncio.Event | None = None
    created_at: float | None = None
    first_calls: dict[str, float] = field(default_factory=dict)
    root_calls: int = 0
    worker_calls: int = 0
    held: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """Answer as the root or as a worker, after the fixed latency."""
        arrived = time.perf_counter()
        if model == ROOT_MODEL:
            self.root_calls += 1
            reply = self._root(messages)
        else:
            self.worker_calls += 1
            reply = self._worker(messages, arrived)
            if self.hold is not None and reply.tool_calls[:1] and \
                    reply.tool_calls[0].name == "task_add_note":
                self.held += 1
                await self.hold.wait()
                self.held -= 1
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        if reply.tool_calls and reply.tool_calls[0].name == "task_create":
            self.created_at = time.perf_counter()
        return reply

    def _reply(self, step: Step) -> ModelReply:
        text, calls = step
        return ModelReply(text, tuple(
            ToolCallRequest(f"call_{next(self._ids)}", name, json.dumps(arguments))
            for name, arguments in calls))

    def _root(self, messages: list[dict[str, Any]]) -> ModelReply:
        return self._reply(root_step(messages, self.tasks, WORKER))

    def _worker(self, messages: list[dict[str, Any]], arrived: float) -> ModelReply:
        if not any(message["role"] == "assistant" for message in messages):
            self.first_calls.setdefault(assigned_task(messages), arrived)
        return self._reply(worker_step(messages))


Step = tuple[str | None, list[tuple[str, dict[str, Any]]]]
"""What a scripted model answers: text, and tool calls (name, arguments)."""


def root_step(messages: list[dict[str, Any]], tasks: int, worker: str) -> Step:
    """The root: `tasks` tasks for `worker` agents in its first reply (20 per task_create
    call), then an answer to each wake, the last one the sum-up."""
    if not any(message["role"] == "assistant" for message in messages):
        specs = [{"title": f"Part {number}", "prompt": f"Do part {number}.",
                  "assigned_to": worker} for number in range(1, tasks + 1)]
        return None, [("task_create", {"tasks": specs[start:start + TASKS_PER_CALL]})
                      for start in range(0, len(specs), TASKS_PER_CALL)]
    done = sum((message["content"] or "").count("has been completed by")  # a batch: each
               for message in messages if message["role"] == "user")
    if messages[-1]["role"] == "tool":
        return f"Delegated {tasks} tasks; waiting.", []
    if done >= tasks:
        return f"All {tasks} tasks are done.", []
    return f"{done} of {tasks} done; waiting.", []


def assigned_task(messages: list[dict[str, Any]]) -> str:
    """The task id of a worker's assignment notification."""
    return next(match.group(1) for message in messages
                if (match := ASSIGNED.search(str(message.get("content") or ""))))


def worker_step(messages: list[dict[str, Any]]) -> Step:
    """A worker: a note, then completion (a short answer, were it asked again)."""
    task_id = assigned_task(messages)
    answered = sum(message["role"] == "assistant" for message in messages)
    if answered == 0:
        return None, [("task_add_note", {"task_id": task_id, "note": "Working on it."})]
    if answered == 1:
        return None, [("task_complete", {"task_id": task_id,
                                         "message": f"Result of {task_id}."})]
    return "Done.", []


@dataclass(frozen=True)
class FanoutRun:
    """One measured fan-out."""

    tasks: int
    latency_s: float
    wall_s: float
    root_calls: int
    worker_calls: int

    @property
    def ideal_s(self) -> float:
        """The critical path of model latencies (see CRITICAL_PATH)."""
        return (2 + WORKER_CALLS) * self.latency_s

    @property
    def ratio(self) -> float:
        """Actual over ideal wall time."""
        return self.wall_s / self.ideal_s


def check_board(path: str, root_id: str, tasks: int) -> None:
    """Every task completed by its own child, every agent idle, and the root's last answer is
    the sum-up: raise BenchmarkError otherwise."""
    with sqlite3.connect(path) as connection:
        statuses = dict(connection.execute(
            "SELECT status, COUNT(*) FROM tasks WHERE thread_id = ? GROUP BY status", (root_id,)))
        agents = dict(connection.execute(
            "SELECT a.status, COUNT(*) FROM agent_metadata a JOIN threads t ON t.id = a.thread_id"
            " WHERE t.root_id = ? GROUP BY a.status", (root_id,)))
        answer = connection.execute(
            "SELECT json_extract(data, '$.message.content') FROM events WHERE thread_id = ? "
            "AND type = 'agent_message' ORDER BY id DESC LIMIT 1", (root_id,)).fetchone()
    if statuses != {"completed": tasks}:
        raise BenchmarkError(f"expected {tasks} completed tasks, the board has {statuses}")
    if agents != {"idle": tasks + 1}:
        raise BenchmarkError(f"expected {tasks + 1} idle agents, found {agents}")
    if answer is None or answer[0] != f"All {tasks} tasks are done.":
        raise BenchmarkError(f"the root's last answer is {answer!r}")


async def run_fanout(tasks: int, latency_s: float) -> FanoutRun:
    """Fan `tasks` tasks out and run the session until quiet; the board is checked."""
    model = FanoutModel(tasks, latency_s)
    limits, _ = raised_limits(tasks)
    async with bench_runtime(model, limits) as runtime:
        began = time.perf_counter()
        root = await runtime.start_session("Fan the work out.", ROOT_MODEL)
        await runtime.run_until_quiet(root.id)
        wall = time.perf_counter() - began
        check_board(str(db_file(runtime)), root.id, tasks)
    return FanoutRun(tasks, latency_s, wall, model.root_calls, model.worker_calls)


async def warm_up() -> None:
    """A small fan-out on a throwaway database, so measured runs do not pay first-use costs
    (statement compilation, schema building, imports) that a long-lived process pays once."""
    await run_fanout(2, 0.0)


def report(runs: Sequence[FanoutRun]) -> str:
    """The table: per K the median run of its repeats."""
    rows = []
    for tasks in dict.fromkeys(run.tasks for run in runs):
        mine = sorted((run for run in runs if run.tasks == tasks), key=lambda run: run.wall_s)
        run = mine[(len(mine) - 1) // 2]
        target = TARGETS.get(tasks)
        rows.append([
            tasks, f"{run.ideal_s * 1000:.0f}", f"{run.wall_s * 1000:.0f}", f"{run.ratio:.2f}",
            f"<= {target:.2f}" if target else "-",
            ("yes" if run.ratio <= target else "NO") if target else "-",
            f"{(run.wall_s - run.ideal_s) * 1000 / tasks:.2f}", run.root_calls,
            run.worker_calls])
    return table(["K", "ideal ms", "actual ms", "actual/ideal", "target", "met",
                  "extra ms/child", "root calls", "child calls"], rows)


def main(argv: Sequence[str] | None = None) -> list[FanoutRun]:
    """Parse the flags, run every size, print the table; returns the runs."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fanout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[10, 100, 500],
                        help="K values: tasks (and child agents) per run")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="L: latency per call")
    parser.add_argument("--repeat", type=int, default=1, help="runs per K (median reported)")
    parser.add_argument("--tiny", action="store_true", help="K=3, L=1 ms (a smoke test)")
    args = parser.parse_args(argv)
    sizes, latency_ms = ([3], 1.0) if args.tiny else (args.tasks, args.latency_ms)
    for tasks in dict.fromkeys(sizes):
        print(raised_limits(tasks)[1])
    print(f"L = {latency_ms:g} ms per model call, T = {WORKER_CALLS} calls per child; "
          f"{CRITICAL_PATH}")
    asyncio.run(warm_up())
    runs = [asyncio.run(run_fanout(tasks, latency_ms / 1000))
            for tasks in sizes for _ in range(args.repeat)]
    print(report(runs))
    return runs


if __name__ == "__main__":
    main()
