"""Tool arguments nested far too deep (1,100 levels) are a tool error the model can act on: the
registry, the progress printer and the app never hit Python's recursion limit, and the turn goes
on to its answer."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from lace.cli.progress import progress_printer
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.runtime.events import EventAppended
from tests.conftest import Caller, query
from tests.scripted import ScriptedModels, reply, text

DEPTH = 1100
DEEP_JSON = '{"tasks": ' + "[" * DEPTH + "]" * DEPTH + "}"


def deep_value(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.fixture(autouse=True)
def test_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_TEST_PROVIDERS", "1")


async def test_deep_arguments_are_a_tool_error_and_the_turn_goes_on(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    printed = io.StringIO()
    runtime.bus.subscribe(progress_printer(printed))

    def model(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = [text(m) for m in messages if m["role"] == "tool"]
        if not results:
            return ScriptedReply(tool_calls=[("task_create", DEEP_JSON)])
        return reply(f"understood: {results[0].splitlines()[0]}")

    models.on("root", model)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert query(db_path, "SELECT status FROM agent_metadata") == [("idle",)]
    (result, is_error), = query(
        db_path, "SELECT json_extract(data, '$.message.content'), json_extract(data, "
                 "'$.is_error') FROM events WHERE type = 'tool_result'")
    assert is_error == 1
    assert result.startswith("Invalid arguments for task_create: the JSON is nested deeper "
                             "than 64 levels")
    answers = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                             "WHERE type = 'agent_message' AND json_extract(data, "
                             "'$.message.content') IS NOT NULL")
    assert answers == [(f"understood: {result.splitlines()[0]}",)]
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(0,)]
    # the replayed call is one a provider adapter that decodes arguments (Anthropic's) survives
    (replayed,) = [m for m in models.calls_of("root")[1] if m.get("tool_calls")]
    assert json.loads(replayed["tool_calls"][0]["function"]["arguments"]) == {
        "omitted": "nested deeper than 64 levels; refused by lace"}
    assert query(db_path, "SELECT json_extract(data, '$.arguments') FROM events WHERE type = "
                          "'tool_call'") == [(DEEP_JSON,)]
    lines = printed.getvalue().splitlines()
    assert any(line.startswith(f"  {root.id} → task_create({{\"tasks\": [[[[") for line in lines)
    assert any(line.startswith(f"  {root.id} ✗ task_create: Invalid arguments") for line in lines)


def test_the_progress_printer_shows_a_deep_call_in_one_line() -> None:
    printed = io.StringIO()
    show = progress_printer(printed)
    show(EventAppended("lace_20990101_aaaaaa", 1, "tool_call",
                       {"call_id": "c1", "tool_name": "task_create", "arguments": DEEP_JSON}))
    (line,) = printed.getvalue().splitlines()
    assert line.startswith("  lace_20990101_aaaaaa → task_create({\"tasks\": [[[[")
    assert line.endswith("…)") and len(line) < 200


def test_deep_values_from_the_command_line_or_the_app_are_refused(
        call: Caller, unchanged: Any) -> None:
    with unchanged():
        result = call("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                                 "description": deep_value(DEPTH)}]})
    assert result.is_error and result.kind == "ToolError"
    assert "nested deeper than 64 levels" in result.text


def test_sixty_four_levels_still_parse(call: Caller) -> None:
    shallow = json.dumps({"tasks": [{"title": "t", "prompt": "p",
                                     "description": deep_value(61)}]})
    result = call("task_create", shallow)
    assert result.is_error and "description: Input should be a valid string" in result.text
