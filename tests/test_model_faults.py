"""Model faults from a scripted model: malformed calls go back as tool errors,
empty answers are retried, and a context overflow trims old tool results instead of failing."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lace.config import Settings
from lace.llm.types import DeltaCallback, ModelReply, ScriptedReply, ToolCallRequest
from lace.runtime import Runtime, open_runtime
from lace.runtime.turns import TRIMMED
from lace.store import Store
from tests.conftest import query
from tests.scripted import ScriptedModels, reply, text


def results(messages: list[dict[str, Any]]) -> list[str]:
    return [text(m) for m in messages if m["role"] == "tool"]


async def test_malformed_and_unknown_calls_come_back_as_tool_errors(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    def model(messages: list[dict[str, Any]]) -> ScriptedReply:
        seen = results(messages)
        if not seen:
            return reply(None, ("task_create", '{"tasks": [{"title": "x"'),
                         ("rm_rf", {"path": "/"}))
        if len(seen) == 2:
            return reply(None, ("task_create", {"tasks": [{"title": "Fixed", "prompt": "p"}]}))
        return reply("recovered")

    models.on("root", model)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    bad_json, unknown = results(models.calls_of("root")[1])
    assert bad_json.startswith("Invalid JSON arguments for task_create:")
    assert unknown.startswith("Unknown tool 'rm_rf'. Available tools: task_create,")
    assert query(db_path, "SELECT title FROM tasks") == [("Fixed",)]
    errors = query(db_path, "SELECT json_extract(data, '$.is_error') FROM events WHERE "
                            "type = 'tool_result' ORDER BY id")
    assert errors == [(1,), (1,), (0,)]


async def test_an_empty_answer_is_retried(runtime: Runtime, models: ScriptedModels,
                                          db_path: Path) -> None:
    answers = iter([reply(None), reply("")])
    models.on("root", lambda messages: next(answers, reply("finally")))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert query(db_path, "SELECT error FROM llm_calls ORDER BY id") == [
        ("empty answer",), ("empty answer",), (None,)]
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                          "type = 'agent_message'") == [("finally",)]


async def test_a_context_overflow_trims_old_tool_results(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    def model(messages: list[dict[str, Any]]) -> ScriptedReply:
        seen = results(messages)
        if len(seen) < 4:
            return reply(None, ("task_create", {"tasks": [{"title": f"t{len(seen)}",
                                                           "prompt": "p" * 50}]}))
        if sum(len(r) for r in seen if r != TRIMMED) > 60:
            raise litellm().ContextWindowExceededError("too long", model="x",
                                                       llm_provider="scripted")
        return reply(f"fits: {json.dumps([r == TRIMMED for r in seen])}")

    models.on("root", model)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE type = 'agent_message' AND json_extract(data, "
                                "'$.message.content') IS NOT NULL")
    trimmed = json.loads(answer.removeprefix("fits: "))
    assert trimmed[0] and not trimmed[-1]  # the oldest went first, the newest stayed
    full = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                          "type = 'tool_result' ORDER BY id")
    assert len(full) == 4 and all(row[0].startswith("Created task") for row in full)
    overflows = query(db_path, "SELECT COUNT(*) FROM llm_calls WHERE error LIKE "
                               "'ContextWindowExceededError%'")
    assert overflows[0][0] >= 1


async def test_a_provider_timeout_is_retried(runtime: Runtime, models: ScriptedModels,
                                             db_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    outcomes = iter(["timeout"])

    def slow_then_fine(messages: list[dict[str, Any]]) -> ScriptedReply:
        if next(outcomes, None) == "timeout":
            raise litellm().Timeout("took too long", model="root", llm_provider="scripted")
        return reply("in time")

    models.on("root", slow_then_fine)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    (first,), (second,) = query(db_path, "SELECT error FROM llm_calls ORDER BY id")
    assert first.startswith("Timeout:") and second is None
    assert query(db_path, "SELECT status FROM agent_metadata") == [("idle",)]


@dataclass
class CancelledAsItAnswers:
    """A model client (lace's own seam, no litellm) whose answer and the cancellation of its
    agent's turn land in the same event-loop iteration: the race in which Python 3.11's
    `asyncio.wait_for` returns the answer and drops the cancellation."""

    supervisor: Runtime | None = None
    calls: int = 0

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        assert self.supervisor is not None
        self.calls += 1
        if self.calls > 3:  # with the cancellation lost, end the turn so the test can fail
            return ModelReply(content="done")
        (turn,) = self.supervisor.scheduler.running.values()
        asyncio.get_running_loop().call_soon(turn.cancel)
        call = ToolCallRequest(id=f"call_{self.calls}", name="task_list", arguments="{}")
        return ModelReply(content=None, tool_calls=(call,))


async def test_a_turn_cancelled_as_its_answer_arrives_stops(store: Store) -> None:
    client = CancelledAsItAnswers()
    supervisor = open_runtime(store, Settings(), client)
    client.supervisor = supervisor
    await supervisor.start_session("go", "scripted/root")
    (turn,) = supervisor.scheduler.running.values()
    await asyncio.wait({turn}, timeout=30)
    await supervisor.stop()
    supervisor.close()
    assert client.calls == 1  # no second call after the cancellation
    assert turn.cancelled()
