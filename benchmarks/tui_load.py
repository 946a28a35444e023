"""The app under load: a session whose root and 200 helper agents are all running, each model call
streaming `--rate` deltas a second, while a person presses keys. Measures, in a Pilot, how long
`n` (next thread: its latest events read and drawn) and `b` (the board opened, and closed) take
from the key event to the screen refreshed, and how late the event loop wakes meanwhile.

The agents are real: spawned through the `task_create` tool with limits raised in the settings,
run by the app's own Runtime on a real SQLite file (lace's WAL, synchronous=NORMAL). Their
model is a scripted `ModelClient` that streams text through `on_delta` (the runtime passes one
only for the watched thread, as it does with litellm; the others still take the same time) and
then calls a board tool, so every agent keeps writing. Run: `python -m benchmarks.tui_load`.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual import events
from textual.widgets import DataTable

from benchmarks.common import bench_settings, raised_limits, table
from lace.llm.types import DeltaCallback, ModelReply, ToolCallRequest
from lace.runtime.database import AsyncStore
from lace.runtime.tool_runner import ToolRunner
from lace.store import Store, open_database
from lace.tools.base import ToolContext
from lace.tui.app import LaceApp
from lace.tui.board import BoardScreen
from lace.tui.factory import create_app
from lace.tui.widgets.conversation import Conversation
from lace.tui.widgets.thread_tree import ThreadTree

TARGET_MS = 100.0
KEY_TIMEOUT_S = 30.0
SIZE = (160, 45)
WORDS = ("lace", "streams", "this", "answer", "word", "by", "word", "while", "every", "helper",
         "keeps", "working")
WORKER_TOOLS = ("task_view", "task_list", "task_add_note")
TASK_ID = re.compile(r"task_\d{8}_[0-9a-f]{6}")


class AppFailed(Exception):
    """The app crashed or stopped answering under load (a finding, not a figure)."""


@dataclass
class StreamingModel:
    """A ModelClient: each call streams `rate` deltas a second for `seconds`, then a worker
    calls a board tool on its task and the root answers in text."""

    rate: float
    seconds: float
    jitter: random.Random = field(default_factory=lambda: random.Random(7))
    calls: int = 0
    deltas: int = 0
    shown: int = 0
    in_flight: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        self.in_flight += 1
        try:
            length = self.seconds * self.jitter.uniform(0.5, 1.5)  # agents drift apart
            for number in range(max(1, round(self.rate * length))):
                await asyncio.sleep(1 / self.rate)
                self.deltas += 1
                if on_delta is not None:
                    self.shown += 1
                    outcome = on_delta(f"{WORDS[number % len(WORDS)]} ")
                    if inspect.isawaitable(outcome):
                        await outcome
        finally:
            self.in_flight -= 1
        self.calls += 1
        prompt_tokens, task_id = 50 * len(messages), _assigned_task(messages)
        if model.endswith("/root") or task_id is None:
            return ModelReply(content="Noted; the helpers keep working.",
                              prompt_tokens=prompt_tokens, completion_tokens=40)
        tool = WORKER_TOOLS[next(self._ids) % len(WORKER_TOOLS)]
        arguments = {"task_id": task_id} if tool == "task_view" else {} if tool == "task_list" \
            else {"task_id": task_id, "note": "progress: another part done"}
        call = ToolCallRequest(id=f"call_{next(self._ids)}", name=tool,
                               arguments=json.dumps(arguments))
        return ModelReply(content=None, tool_calls=(call,), prompt_tokens=prompt_tokens,
                          completion_tokens=40)


def _assigned_task(messages: list[dict[str, Any]]) -> str | None:
    """The task a worker was created for (its system prompt names it); None for the root."""
    found = TASK_ID.search(str(messages[0].get("content") or "")) if messages else None
    return found.group(0) if found else None


async def make_session(path: Path, agents: int) -> str:
    """A session whose root spawned `agents` helpers through task_create (limits raised)."""
    store = Store(open_database(str(path)))
    db = AsyncStore(store)
    try:
        with store.transaction() as tx:
            root = tx.threads.create_session(provider="scripted", model="root",
                                             title="200 helpers").id
        limits, _ = raised_limits(agents)
        runner = ToolRunner(db=db, limits=limits)
        context = ToolContext(thread_id=root, session_id=root, limits=limits)
        for first in range(0, agents, 20):
            batch = [{"title": f"Part {number}", "prompt": f"Work on part {number}.",
                      "assigned_to": "new:scripted/worker"}
                     for number in range(first + 1, min(agents, first + 20) + 1)]
            result = await runner.call(context, "task_create", {"tasks": batch})
            if result.is_error:
                raise SystemExit(f"could not spawn the helpers: {result.text}")
    finally:
        db.close()
        store.close()
    return root


@dataclass
class LoopLag:
    """How late a 10 ms sleep wakes up on the app's event loop."""

    samples: list[float] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            self.samples.append(time.perf_counter() - started - 0.01)


async def timed_key(app: LaceApp, key: str, done: Callable[[], bool]) -> float:
    """Seconds from posting `key` to `done()` holding and the screen refreshed after it."""
    event = events.Key(key, key if len(key) == 1 else {"escape": "\x1b"}[key])
    event.set_sender(app)
    started = time.perf_counter()
    app.post_message(event)
    while not done():
        if not app.is_running or time.perf_counter() - started > KEY_TIMEOUT_S:
            raise AppFailed(f"the app stopped or hung handling {key!r}")
        await asyncio.sleep(0.001)
    await app.wait_for_refresh()
    return time.perf_counter() - started


async def until(condition: Callable[[], bool], timeout: float) -> None:
    """Wait for `condition` (checked every 10 ms), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for the app")
        await asyncio.sleep(0.01)


@dataclass
class Outcome:
    """What one run measured (seconds), and the load it ran under."""

    next_thread: list[float]
    board_open: list[float]
    board_close: list[float]
    lag: list[float]
    model: StreamingModel
    seconds: float
    agents: int
    shutdown_error: str | None = None


async def press_under_load(app: LaceApp, model: StreamingModel, agents: int, presses: int,
                           ramp_s: float) -> Outcome:
    """Wait until the agents stream, then press `n` and `b` (twice) `presses` times each."""
    lag = LoopLag()
    lagging = asyncio.create_task(lag.run())
    await until(lambda: model.in_flight >= agents * 0.9, timeout=60 + agents / 5)
    await asyncio.sleep(ramp_s)
    started, calls = time.perf_counter(), model.calls
    model.deltas = model.shown = 0
    lag.samples.clear()
    tree, conversation = app.query_one(ThreadTree), app.query_one(Conversation)
    await timed_key(app, "escape", lambda: app.focused is tree)
    next_thread, board_open, board_close = [], [], []
    for _ in range(presses):
        await until(lambda: app.focused is tree, timeout=10)  # focus moves after a refresh
        target = _next_of(app)
        next_thread.append(await timed_key(app, "n", _showing(conversation, target)))
        board_open.append(await timed_key(app, "b", lambda: _board_filled(app)))
        board_close.append(await timed_key(app, "b", lambda: not isinstance(app.screen,
                                                                          BoardScreen)))
    seconds = time.perf_counter() - started
    model.calls -= calls
    lagging.cancel()
    return Outcome(next_thread, board_open, board_close, lag.samples, model, seconds, agents)


def _showing(conversation: Conversation, thread_id: str) -> Callable[[], bool]:
    return lambda: conversation.thread_id == thread_id


def _next_of(app: LaceApp) -> str:
    order = app.query_one(ThreadTree).ordered_threads()
    return order[(order.index(app.selected or order[0]) + 1) % len(order)]


def _board_filled(app: LaceApp) -> bool:
    screen = app.screen
    if not isinstance(screen, BoardScreen):
        return False
    return any(table_.row_count == len(screen.tasks) > 0 for table_ in screen.query(DataTable))


async def run(agents: int, presses: int, rate: float, call_s: float, ramp_s: float,
              folder: Path) -> Outcome:
    """Build the session, open the app on it and measure the key presses."""
    path = folder / "lace.db"
    root = await make_session(path, agents)
    model = StreamingModel(rate=rate, seconds=call_s)
    limits, _ = raised_limits(agents)
    app = create_app(db=str(path), model="scripted/root", continue_thread=root,
                     settings=bench_settings(limits), client=model, workspace=folder)
    outcome: Outcome | None = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            try:
                outcome = await press_under_load(app, model, agents, presses, ramp_s)
            finally:
                await app.runtime.stop()
    except AppFailed:
        raise
    except Exception as error:  # the app's own crash, re-raised by run_test
        problem = f"{type(error).__name__}: {error}"
        if outcome is None:
            raise AppFailed(f"the app crashed under load: {problem}") from error
        outcome.shutdown_error = problem
    finally:
        app.runtime.close()
        app.runtime.store.close()
    return outcome


def summary(name: str, samples: list[float], target: float | None) -> tuple[object, ...]:
    """One table line in milliseconds."""
    median, worst = statistics.median(samples) * 1000, max(samples) * 1000
    verdict = "" if target is None else "ok" if worst < target else "SLOW"
    return (name, len(samples), f"{median:.1f}", f"{worst:.1f}",
            "" if target is None else f"< {target:g}", verdict)


def report(outcome: Outcome, rate: float, call_s: float) -> None:
    """Print the load and the table."""
    model, seconds = outcome.model, outcome.seconds
    print(f"{outcome.agents} helpers + root running, each call streaming {rate:g} deltas/s for "
          f"{call_s:g} s then calling a board tool; measured over {seconds:.1f} s: "
          f"{model.calls / seconds:.1f} model calls/s finished, "
          f"{model.deltas / seconds:,.0f} deltas/s produced, {model.shown / seconds:.0f}/s "
          "streamed to the screen (only the selected thread is watched)\n")
    print(table(("key (to screen refreshed)", "presses", "median ms", "max ms", "target", ""),
                [summary("n: next thread", outcome.next_thread, TARGET_MS),
                 summary("b: open the board", outcome.board_open, TARGET_MS),
                 summary("b: close the board", outcome.board_close, TARGET_MS),
                 summary("event-loop lag (10 ms sleep)", outcome.lag, None)]))
    if outcome.shutdown_error:
        print(f"\nWARNING: after the presses, the app raised {outcome.shutdown_error} while "
              "closing (a refresh still running when its widgets went away)")


def main(argv: list[str] | None = None) -> int:
    """Parse the sizes, run once, print the table."""
    parser = argparse.ArgumentParser(description="Key latency of the app with agents streaming.")
    parser.add_argument("--agents", type=int, default=200, help="helpers streaming at once")
    parser.add_argument("--presses", type=int, default=20, help="presses of each key")
    parser.add_argument("--rate", type=float, default=20.0, help="deltas a second per agent")
    parser.add_argument("--call-seconds", type=float, default=5.0, help="length of a model call")
    parser.add_argument("--ramp", type=float, default=10.0,
                        help="seconds of load before the first press")
    parser.add_argument("--tiny", action="store_true", help="10 agents, 3 presses (the test)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.agents, args.presses, args.call_seconds, args.ramp = 10, 3, 1.0, 0.5
    with tempfile.TemporaryDirectory(prefix="lace-tui-load-") as name:
        try:
            outcome = asyncio.run(run(args.agents, args.presses, args.rate, args.call_seconds,
                                      args.ramp, Path(name)))
        except AppFailed as failure:
            print(f"FAILED: {failure}")
            return 1
    report(outcome, args.rate, args.call_seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
