"""Per-event overhead: the time lace adds per tool call (validation, persistence, inbox,
events) with a zero-latency model behind its seam, against the best plain sqlite3 loop that
writes the same rows with the same durability and the same transactions.

    python -m benchmarks.per_event [--calls 200] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import (
    bench_runtime,
    percentile,
    raised_limits,
    table,
    traced_statements,
)
from benchmarks.fanout import ASSIGNED, ROOT_MODEL, BenchmarkError, warm_up
from lace.core.records import NewAgent
from lace.llm.types import DeltaCallback, ModelReply, ToolCallRequest
from lace.store import Store, open_database

NOTER = "new:scripted/noter"
TARGET_RATIO, TARGET_MS = 3.0, 1.0


@dataclass
class NoterModel:
    """A zero-latency scripted `ModelClient`. The root assigns one task to a `noter` agent and
    then blocks in its next call until the noter is done (so only the noter touches the
    database); the noter makes `calls` task_add_note calls, one per reply, then completes (which
    ends its turn).
    `gaps[i]` is the time from lace receiving reply i (a note) to lace's next request."""

    calls: int
    gaps: list[tuple[float, float]] = field(default_factory=list)
    noter_done: asyncio.Event = field(default_factory=asyncio.Event)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _returned: float | None = None

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """Answer as the root or as the noter, at once."""
        if model == ROOT_MODEL:
            return await self._root(messages)
        arrived = time.perf_counter()
        if self._returned is not None:
            self.gaps.append((self._returned, arrived))
        reply = self._noter(messages)
        self._returned = time.perf_counter() if reply.tool_calls and \
            reply.tool_calls[0].name == "task_add_note" else None
        return reply

    def _call(self, name: str, arguments: dict[str, Any]) -> ToolCallRequest:
        return ToolCallRequest(f"call_{next(self._ids)}", name, json.dumps(arguments))

    async def _root(self, messages: list[dict[str, Any]]) -> ModelReply:
        if not any(message["role"] == "assistant" for message in messages):
            return ModelReply(None, (self._call("task_create", {"tasks": [
                {"title": "Take notes", "prompt": "Add notes.", "assigned_to": NOTER}]}),))
        await self.noter_done.wait()
        return ModelReply("Waiting." if messages[-1]["role"] == "tool" else "Noted.")

    def _noter(self, messages: list[dict[str, Any]]) -> ModelReply:
        task_id = next(match.group(1) for message in messages
                       if (match := ASSIGNED.search(message.get("content") or "")))
        answered = sum(message["role"] == "assistant" for message in messages)
        if answered < self.calls:
            return ModelReply(None, (self._call(
                "task_add_note", {"task_id": task_id, "note": f"Progress note {answered}."}),))
        self.noter_done.set()  # its last reply: completing ends its turn
        return ModelReply(None, (self._call(
            "task_complete", {"task_id": task_id, "message": "All noted."}),))


@dataclass
class SqlCounter:
    """Counts the statements SQLite runs for an engine (lace runs its hot statements on the
    raw sqlite3 connection, so SQLAlchemy's events would miss them), stamped with
    time.perf_counter."""

    log: list[tuple[float, str]] = field(default_factory=list)

    def record(self, statement: str) -> None:
        """Log one statement's kind."""
        words = statement.split(None, 2)
        kind = " ".join(words[:2]) if words[0] == "BEGIN" else words[0]
        self.log.append((time.perf_counter(), kind.upper()))

    def between(self, start: float, end: float) -> Counter[str]:
        """What ran in the window."""
        return Counter(kind for stamp, kind in self.log if start <= stamp <= end)


def typical(counts: Sequence[Counter[str]]) -> Counter[str]:
    """The most common statement mix per tool call."""
    common = Counter(tuple(sorted(count.items())) for count in counts).most_common(1)[0][0]
    return Counter(dict(common))


def describe(mix: Counter[str]) -> str:
    """A statement mix as one line."""
    return ", ".join(f"{number} {kind}" for kind, number in sorted(mix.items()))


async def run_lace(calls: int, database: str | None = None,
                   ) -> tuple[list[float], Counter[str]]:
    """Milliseconds lace takes per task_add_note call, and its statement mix per call (on
    SQLite; empty on `database`, the URL of an empty PostgreSQL database)."""
    model, counter = NoterModel(calls), SqlCounter()
    limits, _ = raised_limits(1)
    async with bench_runtime(model, limits, database=database) as supervisor:
        engine = supervisor.store.database.engine
        with (traced_statements(engine, counter.record) if database is None
              else contextlib.nullcontext()):
            root = await supervisor.start_session("Take notes.", ROOT_MODEL)
            await supervisor.run_until_quiet(root.id)
        with engine.connect() as connection:
            notes = connection.execute(sa.text("SELECT COUNT(*) FROM task_notes")).scalar_one()
            inbox = connection.execute(sa.text(
                "SELECT COUNT(*) FROM inbox WHERE thread_id = :root AND kind = 'note'"),
                {"root": root.id}).scalar_one()
    if notes != calls + 1 or inbox != calls or len(model.gaps) != calls:
        raise BenchmarkError(f"{notes} notes, {inbox} note notices, {len(model.gaps)} gaps "
                             f"for {calls} calls")
    mix = typical([counter.between(start, end) for start, end in model.gaps])
    return [(end - start) * 1000 for start, end in model.gaps], mix


Statement = tuple[str, tuple[Any, ...]]
EVENT_SQL = "INSERT INTO events (thread_id, type, data, created_at) VALUES (?, ?, ?, ?)"
TOUCH_SQL = "UPDATE threads SET updated_at = ? WHERE id = ?"


def seed(path: Path) -> tuple[str, str, str]:
    """A lace database with a root, its child and the child's task: (root, child, task)."""
    store = Store(open_database(str(path)))
    with store.transaction() as tx:
        root = tx.threads.create_session(provider="scripted", model="root")
        task = tx.board.create_task(session_id=root.id, actor=root.id, title="Take notes",
                                    prompt="Add notes.")
        child = tx.threads.create_child(root.id)
        tx.agents.create(NewAgent(thread_id=child.id, name="noter", provider="scripted",
                                  model="noter", parent_thread_id=root.id,
                                  created_for_task=task.id))
        tx.tasks.set_fields(task.id, assigned_to=child.id)
    store.close()
    return root.id, child.id, task.id


def write_groups(number: int, root: str, child: str, task: str) -> list[list[Statement]]:
    """The rows of one task_add_note call, in lace's order: the llm_calls row and the agent's
    totals; the reply's agent_message and tool_call events; the note (after reading the task
    for the rules and the notice text), the creator's inbox notice and the tool_result."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    call_id = f"call_{number}"
    arguments = json.dumps({"task_id": task, "note": f"Progress note {number}."})
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "task_add_note", "arguments": arguments}}]}
    result = {"message": {"role": "tool", "tool_call_id": call_id,
                          "content": f"Added note {number + 1} to task {task}."},
              "call_id": call_id, "tool_name": "task_add_note", "is_error": False}
    return [
        [("INSERT INTO llm_calls (thread_id, model, prompt_tokens, completion_tokens, cost_usd, "
          "latency_ms, created_at) VALUES (?, 'scripted/noter', 0, 0, 0.0, 0.01, ?)",
          (child, now)),
         ("UPDATE agent_metadata SET tokens_in = tokens_in + 0, tokens_out = tokens_out + 0, "
          "cost_usd = cost_usd + 0.0, updated_at = ? WHERE thread_id = ?", (now, child))],
        [(EVENT_SQL, (child, "agent_message", json.dumps({"message": message}), now)),
         (EVENT_SQL, (child, "tool_call", json.dumps(
             {"call_id": call_id, "tool_name": "task_add_note", "arguments": arguments}), now))],
        [("SELECT title, created_by, assigned_to FROM tasks WHERE id = ?", (task,)),
         ("INSERT INTO task_notes (task_id, author, content, created_at) VALUES (?, ?, ?, ?)",
          (task, child, f"Progress note {number}.", now)),
         ("INSERT INTO inbox (thread_id, sender, task_id, kind, text, priority, wakes, "
          "created_at) "
          "VALUES (?, ?, ?, 'note', ?, 'normal', 0, ?)", (root, child, task, "a note", now)),
         (EVENT_SQL, (child, "tool_result", json.dumps(result), now))],
    ]


def transactions(groups: list[list[Statement]], writes: int, child: str,
                 ) -> list[list[Statement]]:
    """`groups` merged into `writes` write transactions (front ones first), each touching the
    thread's updated_at once if it appended an event."""
    merged = [statement for group in groups[: len(groups) - writes + 1] for statement in group]
    result = [merged, *groups[len(groups) - writes + 1:]]
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return [[*group, (TOUCH_SQL, (now, child))] if any(sql == EVENT_SQL for sql, _ in group)
            else group for group in result]


def bare_loop(path: Path, calls: int, mix: Counter[str]) -> tuple[list[float], Counter[str]]:
    """The same rows as one lace task_add_note call, per iteration, with plain sqlite3 on the
    same schema and lace's commit boundaries from `mix`: its read transactions (is the agent
    stopped?) and its write transactions (up to three); returns timings and its own mix."""
    root, child, task = seed(path)
    reads = mix["BEGIN DEFERRED"]
    writes = max(1, min(3, mix["BEGIN IMMEDIATE"]))
    connection = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        connection.execute(f"PRAGMA {pragma}")
    timings, done = [], Counter[str]()
    check = ("SELECT status, stop_reason FROM agent_metadata WHERE thread_id = ?", (child,))
    for number in range(calls):
        began = time.perf_counter()
        plan = [("BEGIN DEFERRED", [check])] * reads + [
            ("BEGIN IMMEDIATE", group)
            for group in transactions(write_groups(number, root, child, task), writes, child)]
        for begin, statements in plan:
            connection.execute(begin)
            for sql, parameters in statements:
                connection.execute(sql, parameters).fetchall()
            connection.execute("COMMIT")
        timings.append((time.perf_counter() - began) * 1000)
        if number == 0:
            done.update(kind for begin, statements in plan
                        for kind in (begin, *(sql.split()[0] for sql, _ in statements), "COMMIT"))
    connection.close()
    return timings, done


@dataclass(frozen=True)
class PerEventResult:
    """Both loops' timings (ms per tool call) and lace's statement mix per call."""

    lace_ms: list[float]
    bare_ms: list[float]
    lace_mix: Counter[str]
    bare_mix: Counter[str]

    @property
    def ratio(self) -> float:
        """lace's median over the bare loop's median."""
        return statistics.median(self.lace_ms) / statistics.median(self.bare_ms)


def report(result: PerEventResult) -> str:
    """The table: median and p90 of both, the ratio, the targets."""
    rows = []
    for name, values in (("lace (tool call)", result.lace_ms),
                         ("bare sqlite3 loop", result.bare_ms)):
        rows.append([name, len(values), f"{statistics.median(values):.3f}",
                     f"{percentile(values, 0.90):.3f}"])
    median = statistics.median(result.lace_ms)
    return "\n".join([
        table(["loop", "calls", "median ms", "p90 ms"], rows),
        f"ratio lace/bare (medians): {result.ratio:.2f}  target <= {TARGET_RATIO:g}: "
        f"{'met' if result.ratio <= TARGET_RATIO else 'NOT met'}",
        f"lace median {median:.3f} ms  target < {TARGET_MS:g} ms: "
        f"{'met' if median < TARGET_MS else 'NOT met'}"])


def main(argv: Sequence[str] | None = None) -> PerEventResult:
    """Parse the flags, run both loops, print the table; returns the result."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.per_event", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="task_add_note calls timed")
    parser.add_argument("--tiny", action="store_true", help="5 calls (a smoke test)")
    args = parser.parse_args(argv)
    calls = 5 if args.tiny else args.calls
    print(raised_limits(1)[1])
    asyncio.run(warm_up())
    lace_ms, mix = asyncio.run(run_lace(calls))
    with tempfile.TemporaryDirectory(prefix="lace-bench-") as folder:
        bare_ms, bare_mix = bare_loop(Path(folder) / "bare.db", calls, mix)
    result = PerEventResult(lace_ms, bare_ms, mix, bare_mix)
    print("Both on a SQLite file with WAL and synchronous=NORMAL. Time per call: from lace "
          "receiving a reply with one task_add_note call to its next model request.")
    print(f"lace per tool call: {describe(mix)}")
    print(f"bare loop per call: {describe(bare_mix)} (lace's transactions, the same rows, "
          "each thread's updated_at touched once per transaction)")
    print(report(result))
    return result


if __name__ == "__main__":
    main()
