"""Fan-out efficiency, the whole path: lace with litellm against a small OpenAI-compatible server
on 127.0.0.1 (its own process) that waits L per call, beside a bare loop of
`litellm.acompletion` calls sending the same conversations without lace, in the same run.

    python -m benchmarks.fanout_http [--tasks 40 100] [--latency-ms 50] [--tiny]

Target: lace's actual/ideal within 1.15x of the bare loop's, at K = 40 and 100. Nothing streams
(a headless run streams only where someone watches).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from benchmarks.common import bench_runtime, raised_limits, table
from benchmarks.fanout import WORKER_CALLS, root_step, worker_step

TARGET = 1.15


def script(model: str, messages: list[dict[str, Any]]) -> Any:
    """The model behind the server: the fan-out benchmark's root (K from its prompt, tasks for
    `new:openai/worker` agents) and workers."""
    from lace.llm.types import ScriptedReply

    if model == "root":
        prompt = next(message["content"] for message in messages if message["role"] == "user")
        tasks = int(re.findall(r"\d+", str(prompt))[0])
        text, calls = root_step(messages, tasks, "new:openai/worker")
    else:
        text, calls = worker_step(messages)
    return ScriptedReply(text=text, tool_calls=list(calls))


def serve(latency_s: float, address: Any, stop: ProcessEvent) -> None:
    """The server process: answer from `script` until `stop` is set."""
    from lace.llm.openai_fake import FakeOpenAI

    with FakeOpenAI(script, latency_s) as server:
        address.put(server.base_url)
        stop.wait()


@dataclass(frozen=True)
class Row:
    tasks: int
    ideal_s: float
    lace_s: float
    bare_s: float

    @property
    def lace_ratio(self) -> float:
        return self.lace_s / self.ideal_s

    @property
    def bare_ratio(self) -> float:
        return self.bare_s / self.ideal_s


async def run_lace(tasks: int) -> float:
    """Wall time of a lace session fanning `tasks` tasks out over HTTP (board checked)."""
    from lace.llm.client import LiteLLMClient

    limits, _ = raised_limits(tasks)
    async with bench_runtime(LiteLLMClient(), limits) as supervisor:
        began = time.perf_counter()
        root = await supervisor.start_session(f"Fan out {tasks} tasks.", "openai/root")
        await supervisor.run_until_quiet(root.id)
        wall = time.perf_counter() - began
        done = await supervisor.db.read(lambda tx: tx.query_tasks(root.id, include_closed=True))
    if [task.status for task in done[0]] != ["completed"] * tasks:
        raise AssertionError(f"lace did not complete all {tasks} tasks")
    return wall


async def run_bare(tasks: int, tools: list[dict[str, Any]]) -> float:
    """The same conversations as plain `litellm.acompletion` calls: the root's first call, then
    every worker's two calls; the root's last call starts when the last worker completes."""
    from lace.llm.litellm_setup import litellm

    module = litellm()

    async def call(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        response = await module.acompletion(model=model, messages=messages, tools=tools,
                                            max_retries=0)
        message: dict[str, Any] = response.choices[0].message.model_dump()
        return message

    async def worker(number: int, completed: asyncio.Queue[int]) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a worker."},
            {"role": "user", "content": f"You have been assigned task 'task_{number}':"}]
        for step in range(WORKER_CALLS):
            message = await call("openai/worker", messages)
            messages.append(message)
            for tool_call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": tool_call["id"],
                                 "content": "ok"})
            if step == 1:
                completed.put_nowait(number)

    began = time.perf_counter()
    root = [{"role": "system", "content": "You are the root."},
            {"role": "user", "content": f"Fan out {tasks} tasks."}]
    await call("openai/root", root)
    completed: asyncio.Queue[int] = asyncio.Queue()
    workers = [asyncio.create_task(worker(n, completed)) for n in range(tasks)]
    for _ in range(tasks):
        await completed.get()
    await asyncio.gather(call("openai/root", root), *workers)
    return time.perf_counter() - began


def tool_definitions() -> list[dict[str, Any]]:
    """The tools lace sends a worker, so the bare loop sends the same bytes."""
    from lace.tools.registry import ToolRegistry

    return ToolRegistry().definitions(profiles=[], can_spawn=True)


async def measure(sizes: Sequence[int], latency_s: float) -> list[Row]:
    tools = tool_definitions()
    await run_bare(2, tools)  # first-call costs (lazy imports) paid once, for both
    await run_lace(2)
    rows = []
    for tasks in sizes:
        bare = await run_bare(tasks, tools)
        lace = await run_lace(tasks)
        rows.append(Row(tasks, (1 + WORKER_CALLS) * latency_s, lace, bare))
    return rows


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fanout_http", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[40, 100])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--tiny", action="store_true", help="K=3, L=1 ms (a smoke test)")
    args = parser.parse_args(argv)
    sizes, latency_ms = ([3], 1.0) if args.tiny else (args.tasks, args.latency_ms)
    context = multiprocessing.get_context("spawn")
    address, stop = context.Queue(), context.Event()
    server = context.Process(target=serve, args=(latency_ms / 1000, address, stop), daemon=True)
    server.start()
    try:
        os.environ["OPENAI_BASE_URL"] = address.get(timeout=30)
        os.environ.setdefault("OPENAI_API_KEY", "not-a-real-key")
        for tasks in sizes:
            print(raised_limits(tasks)[1])
        print(f"L = {latency_ms:g} ms per call, T = {WORKER_CALLS} calls per child, ideal = "
              f"(1 + T) x L; the server runs in its own process; nothing streams")
        rows = asyncio.run(measure(sizes, latency_ms / 1000))
    finally:
        stop.set()
        server.join(10)
    print(table(["K", "ideal ms", "bare litellm ms", "bare/ideal", "lace ms", "lace/ideal",
                 "lace/bare", "target", "met"],
                [[row.tasks, f"{row.ideal_s * 1000:.0f}", f"{row.bare_s * 1000:.0f}",
                  f"{row.bare_ratio:.2f}", f"{row.lace_s * 1000:.0f}", f"{row.lace_ratio:.2f}",
                  f"{row.lace_ratio / row.bare_ratio:.2f}", f"<= {TARGET:.2f}",
                  "yes" if row.lace_ratio / row.bare_ratio <= TARGET else "NO"]
                 for row in rows]))
    return rows


if __name__ == "__main__":
    main()
