"""What prompt caching saves on an Anthropic model: the same fan-out, and a three-level tree,
run through litellm over real HTTP against lace's scripted Anthropic server (whose prompt cache
follows the `cache_control` marks it receives), once with lace's marks and once without;
the bill is litellm's price of the tokens each call reported (cache reads at a tenth of the
input rate, cache writes at 1.25 times).

    python -m benchmarks.prompt_cache [--helpers 3] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import bench_runtime, db_file, raised_limits, table
from lace.llm.anthropic_fake import FakeAnthropic
from lace.llm.client import LiteLLMClient
from lace.llm.types import ScriptedReply

MODEL = "anthropic/claude-sonnet-4-5"
ASSIGNED = "You have been assigned task '"
NOTICE = "[LACE TASK SYSTEM]"


@dataclass(frozen=True)
class Run:
    """One session's model calls, summed from `llm_calls`."""

    shape: str
    marks: bool
    calls: int
    tokens_in: int
    cache_read: int
    cache_write: int
    cost_usd: float

    @property
    def cached_share(self) -> float:
        return self.cache_read / self.tokens_in if self.tokens_in else 0.0


def _text(message: dict[str, Any]) -> str:
    return str(message.get("content") or "")


def tree_script(helpers: int, levels: int) -> Any:
    """The root gives `helpers` parts to `new:MODEL` agents (task_create); down to `levels`
    levels below the root each agent hands two parts on (delegate, waiting in its turn) and
    completes its own; the lowest note and complete theirs."""

    def script(_model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        thread = _text(messages[0]).split("Your thread id: ", 1)[1].split(" ", 1)[0]
        level = thread.rstrip(".").count(".")
        task = next((_text(m).split(ASSIGNED, 1)[1].split("'", 1)[0] for m in messages
                     if m["role"] == "user" and ASSIGNED in _text(m)), None)
        called = [call["function"]["name"] for m in messages for call in m.get("tool_calls") or []]
        done = sum(_text(m).count("has been completed by") for m in messages if m["role"] == "user")
        if task is not None and level >= levels:  # a leaf
            if "task_add_note" not in called:
                return ScriptedReply(tool_calls=[("task_add_note", {"task_id": task,
                                                                    "note": "working"})])
            return ScriptedReply(tool_calls=[("task_complete", {"task_id": task,
                                                                "message": "part done"})])
        if task is not None:  # a middle level: hands out its parts and waits in its turn
            if "delegate" not in called:
                return ScriptedReply(tool_calls=[("delegate", {"tasks": [
                    {"title": f"Part {n}", "prompt": f"Do part {n}", "expected_response": "done",
                     "assigned_to": f"new:{MODEL}"} for n in (1, 2)]})])
            return ScriptedReply(tool_calls=[("task_complete", {"task_id": task,
                                                                "message": "all parts done"})])
        if "task_create" not in called:
            return ScriptedReply(tool_calls=[("task_create", {"tasks": [
                {"title": f"Part {n}", "prompt": f"Do part {n}", "assigned_to": f"new:{MODEL}"}
                for n in range(1, helpers + 1)]})])
        if done < helpers or messages[-1]["role"] == "tool":
            return ScriptedReply(text=f"{done} of {helpers} done; waiting")
        return ScriptedReply(text="all parts done")

    return script


async def run_once(shape: str, helpers: int, levels: int, marks: bool) -> Run:
    """One session on a fresh server (an empty cache) and a fresh database."""
    limits, _ = raised_limits(helpers * 2 ** levels)
    with FakeAnthropic(tree_script(helpers, levels)) as server:
        saved = {name: os.environ.get(name) for name in ("ANTHROPIC_API_BASE",
                                                         "ANTHROPIC_API_KEY")}
        os.environ.update(ANTHROPIC_API_BASE=server.base_url,
                          ANTHROPIC_API_KEY="sk-ant-benchmark-not-a-key")
        try:
            async with bench_runtime(LiteLLMClient(cache_marks=marks), limits) as runtime:
                root = await runtime.start_session("Do the parts.", MODEL)
                await asyncio.wait_for(runtime.run_until_quiet(root.id), 600)
                with sqlite3.connect(db_file(runtime)) as connection:
                    (calls, failed, tokens_in, read, write, cost), = connection.execute(
                        "SELECT COUNT(*), COUNT(error), SUM(prompt_tokens), "
                        "COALESCE(SUM(cache_read_tokens), 0), "
                        "COALESCE(SUM(cache_write_tokens), 0), SUM(cost_usd) FROM llm_calls")
                    errors = connection.execute(
                        "SELECT DISTINCT error FROM llm_calls WHERE error IS NOT NULL").fetchall()
                    open_tasks = connection.execute(
                        "SELECT COUNT(*) FROM tasks WHERE status != 'completed'").fetchone()[0]
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None) if value is None else os.environ.update({name: value})
    if failed or open_tasks:
        raise AssertionError(f"{shape}: {failed} failed calls ({errors}), {open_tasks} tasks "
                             "not completed")
    return Run(shape, marks, calls, tokens_in, read, write, cost)


def main(argv: Sequence[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--helpers", type=int, default=3,
                        help="helpers of the root in the fan-out (3: about ten calls)")
    parser.add_argument("--tiny", action="store_true", help="one helper, two levels")
    args = parser.parse_args(argv)
    helpers = 1 if args.tiny else args.helpers
    shapes = [(f"fan-out of {helpers}", helpers, 1), ("3-level tree (2 x 2)", 2, 2)]
    runs = [asyncio.run(run_once(shape, width, levels, marks))
            for shape, width, levels in shapes for marks in (False, True)]
    rows = []
    for run in runs:
        unmarked = next(other for other in runs if other.shape == run.shape and not other.marks)
        saving = 1 - run.cost_usd / unmarked.cost_usd
        rows.append([run.shape, "marks" if run.marks else "none", run.calls, run.tokens_in,
                     f"{run.cached_share:.0%}", run.cache_write, f"${run.cost_usd:.4f}",
                     f"{saving:.0%}" if run.marks else "-"])
    print(f"model {MODEL} (litellm's prices) on the scripted Anthropic server")
    print(table(["session", "cache marks", "calls", "input tok", "cached", "cache writes",
                 "cost", "saved"], rows))
    return runs


if __name__ == "__main__":
    main()
