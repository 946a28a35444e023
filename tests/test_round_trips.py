"""What a helper's whole life costs in round trips to a PostgreSQL server: every statement whose
answer lace reads is one (writes ride along with it), and one process's transactions all go
through one store thread, so their number bounds how fast a fan-out runs there."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from benchmarks.fanout import Step, root_step, worker_step
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from tests.conftest import query
from tests.scripted import ScriptedModels

pytestmark = pytest.mark.parametrize("db_path", ["postgresql"], indirect=True)

FEW, MANY = 2, 10
PER_HELPER = 8.5
"""The most statements a helper adds, from its spawn to its task's completion (its two model
calls, a note then task_complete, their checks and records, the scheduler's looks): 7.8 here,
where it was 28 when two statements asked about one row, transactions read again what they had
already read, and each appended event's id was a round trip of its own (16 with those ids
alone left), 10.8 while a first turn read its thread's events (it has none), 9.6 while
task_complete looked for a worktree the helper was never given, 8.6 while the budget checks
read the root's row for nothing (its age, only where the session caps seconds); the rest
leaves room for a heartbeat or a transaction run again after a conflict, not for one more
read per helper."""


class Executes:
    """Counts the statements psycopg sends on every connection of this process (the store's)."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def executes(monkeypatch: pytest.MonkeyPatch) -> Executes:
    counter = Executes()
    real = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return counter


async def fan_out(runtime: Runtime, models: ScriptedModels, executes: Executes,
                  helpers: int) -> int:
    """Statements sent while a root gives `helpers` tasks to new helpers and hears they are
    done; each helper notes, then completes its task."""
    root = f"root{helpers}"
    models.on(root, lambda messages: scripted(root_step(messages, helpers,
                                                        "new:scripted/worker")))
    before = executes.count
    session = await runtime.start_session(f"Fan out {helpers} tasks.", f"scripted/{root}")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)
    return executes.count - before


def scripted(step: Step) -> ScriptedReply:
    text, calls = step
    return ScriptedReply(text=text, tool_calls=list(calls))


async def test_a_helper_costs_at_most_its_round_trips(
        runtime: Runtime, models: ScriptedModels, executes: Executes, db_path: str) -> None:
    models.on("worker", lambda messages: scripted(worker_step(messages)))
    few = await fan_out(runtime, models, executes, FEW)
    many = await fan_out(runtime, models, executes, MANY)
    assert query(db_path, "SELECT COUNT(*) FROM tasks WHERE status = 'completed'") == [
        (FEW + MANY,)]
    per_helper = (many - few) / (MANY - FEW)
    assert per_helper <= PER_HELPER, f"{per_helper:.1f} statements per helper"
