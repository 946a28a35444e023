"""The path of one spawn: every lace function called (in order, nesting shown) from the moment
the root's reply carrying `task_create {assigned_to: "new:..."}` reaches lace to the child's
first model request, and the SQL statements run meanwhile.

    python -m benchmarks.spawn_path [--all]   (--all: every call, not only the first of each)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from benchmarks.common import bench_runtime, db_file, raised_limits, traced_statements
from benchmarks.fanout import ROOT_MODEL, FanoutModel
from lace.llm.types import DeltaCallback, ModelReply

SKIPPED = ("lace.store.prepared", "lace.core.clock", "lace.runtime.events", "lace.core.records")


@dataclass
class PathModel(FanoutModel):
    """A one-child fan-out that records lace's calls from the task_create reply to the
    child's first request."""

    calls: list[tuple[int, str]] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    tracing: bool = False
    depth: int = 0

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        if model != ROOT_MODEL and self.tracing:
            self.tracing = False
            sys.setprofile(None)
        reply = await super().complete(model, messages, tools, on_delta=on_delta)
        if reply.tool_calls and reply.tool_calls[0].name == "task_create":
            self.tracing = True
            sys.setprofile(self._profile)
        return reply

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith("lace.") or module.startswith(SKIPPED):
            return
        if event == "call":
            name = frame.f_code.co_qualname if hasattr(frame.f_code, "co_qualname") \
                else frame.f_code.co_name
            if not name.startswith("<"):
                self.calls.append((self.depth, f"{module.removeprefix('lace.')}.{name}"))
            self.depth += 1
        elif event == "return":
            self.depth = max(0, self.depth - 1)


async def trace() -> PathModel:
    """Run the fan-out of one child and return what was recorded."""
    model = PathModel(1, 0.0)
    limits, _ = raised_limits(1)
    async with bench_runtime(model, limits) as supervisor:
        engine = supervisor.store.database.engine
        with traced_statements(engine.pool, lambda statement: model.statements.append(
                statement) if model.tracing else None):
            root = await supervisor.start_session("Fan the work out.", ROOT_MODEL)
            await supervisor.run_until_quiet(root.id)
        assert db_file(supervisor)
    return model


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="list repeated calls too")
    args = parser.parse_args(argv)
    model = asyncio.run(trace())
    seen: set[str] = set()
    for depth, name in model.calls:
        if args.all or name not in seen:
            print(f"{'  ' * min(depth, 12)}{name}")
        seen.add(name)
    writes = [s for s in model.statements if not s.startswith(("SELECT", "BEGIN", "COMMIT",
                                                                 "SAVEPOINT", "RELEASE"))]
    print(f"\n{len(model.calls)} lace calls, {len(model.statements)} statements "
          f"({len(writes)} writes) from the task_create reply to the child's first request")


if __name__ == "__main__":
    main()
