"""Python functions as tools: their schema from the type hints, their calls through the one tool
path (bad arguments and exceptions as tool errors, the policy), handed to helpers by name, and a
slow sync function that leaves every other agent running."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from lace.config import Limits, Settings, ToolSettings, load_settings
from lace.core.errors import LaceError
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import RuntimeEvent, TurnEnded
from lace.store import Store
from lace.tools.python_tools import PythonTool, ToolDefinitionError, python_tools
from tests.conftest import query
from tests.root_turn import first_root_answer
from tests.scripted import ScriptedModels, reply, text

CALLED: list[str] = []


def lookup(city: str, units: Literal["c", "f"] = "c") -> str:
    """Today's temperature in a city."""
    CALLED.append(city)
    return f"{city}: 21 {units}"


async def add(a: int, b: int) -> dict[str, int]:
    """Add two whole numbers."""
    await asyncio.sleep(0)
    return {"sum": a + b}


def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")


@contextlib.asynccontextmanager
async def running(store: Store, *functions: Callable[..., Any],
                  policy: dict[str, Any] | None = None,
                  limits: Limits | None = None) -> AsyncIterator[Runtime]:
    """A runtime offering `functions` as Python tools, with quick retries."""
    quick = Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=2)
    settings = Settings(limits=limits or quick, tools=ToolSettings(policy=policy or {}))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                           python_tools=functions)
    try:
        yield runtime
    finally:
        await runtime.stop()
        runtime.close()


def tool_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [text(message) for message in messages if message["role"] == "tool"]


def results(db_path: Path, thread_id: str) -> list[tuple[Any, ...]]:
    """(tool, is_error, error kind, text) of each `tool_result` of a thread, in order."""
    return query(db_path, "SELECT json_extract(data, '$.tool_name'), json_extract(data, "
                          "'$.is_error'), json_extract(data, '$.error_kind'), json_extract(data, "
                          "'$.message.content') FROM events WHERE thread_id = ? AND type = "
                          "'tool_result' ORDER BY id", thread_id)


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert PythonTool.from_function(lookup).definition() == {
        "type": "function", "function": {
            "name": "lookup", "description": "Today's temperature in a city.",
            "parameters": {"type": "object", "additionalProperties": False,
                           "properties": {"city": {"type": "string"},
                                          "units": {"enum": ["c", "f"], "type": "string",
                                                    "default": "c"}},
                           "required": ["city"]}}}


@pytest.mark.parametrize(("functions", "problem"), [
    (lambda: [lambda city: city], "'<lambda>' is not a valid tool name"),
    (lambda: [PythonTool.from_function(lookup, name="task_create")],
     "has the name of one of lace's"),
    (lambda: [lookup, PythonTool.from_function(add, name="lookup")],
     "Two Python tools are named"),
    (lambda: [print], "takes \\*args"),
])
def test_a_function_that_cannot_be_a_tool_is_refused_when_the_runtime_is_assembled(
        functions: Callable[[], list[Any]], problem: str) -> None:
    with pytest.raises(ToolDefinitionError, match=problem):
        python_tools(functions())


def test_mcp_style_names_are_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="starts with mcp__"):
        PythonTool.from_function(lookup, name="mcp__notes__lookup")


def test_the_settings_may_name_a_python_tool_of_the_process() -> None:
    with pytest.raises(LaceError, match="unknown tool 'lookup'"):
        load_settings(tools={"policy": {"lookup": "deny"}})
    settings = load_settings(tools={"policy": {"lookup": "deny"}}, python_tools=("lookup",))
    assert settings.tools.policy_for("lookup") == "deny"


async def test_the_root_calls_a_sync_and_an_async_function(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return reply(" | ".join(tool_texts(messages)))
        return reply(None, ("lookup", {"city": "Oslo"}), ("add", '{"a": 2, "b": 3}'))

    models.on("root", root)
    async with running(store, lookup, add) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert answer == 'Oslo: 21 c | {"sum":5}'
    assert sorted(results(db_path, session.id)) == [("add", 0, None, '{"sum":5}'),
                                                    ("lookup", 0, None, "Oslo: 21 c")]


async def test_bad_arguments_come_back_as_a_tool_error_the_model_fixes(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        if not answers:
            return reply(None, ("add", {"a": "two", "b": 3, "total": 5}))
        if len(answers) == 1:
            return reply(None, ("add", {"a": 2, "b": 3}))
        return reply(answers[-1])

    models.on("root", root)
    async with running(store, add) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert answer == '{"sum":5}'
    (first, second) = results(db_path, session.id)
    assert first[:3] == ("add", 1, "ToolError")
    assert first[3].splitlines() == [
        "Invalid arguments for add:",
        "- a: Input should be a valid integer, unable to parse string as an integer "
        '(got "two")',
        "- total: unknown key 'total'"]
    assert second == ("add", 0, None, '{"sum":5}')


async def test_an_exception_in_the_function_is_a_tool_error_naming_it(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        return reply(answers[-1]) if answers else reply(None, ("explode", {"reason": "x"}))

    models.on("root", root)
    async with running(store, explode) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert answer == "explode raised ValueError: boom: x"
    assert results(db_path, session.id) == [
        ("explode", 1, "ToolError", "explode raised ValueError: boom: x")]


async def test_a_deny_policy_keeps_the_function_from_running(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        return reply(answers[-1]) if answers else reply(None, ("lookup", {"city": "Lima"}))

    models.on("root", root)
    CALLED.clear()
    async with running(store, lookup, policy={"lookup": "deny"}) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert answer == ("Denied: the policy for lookup is deny ([tools.policy] lookup). Do "
                      "without it, or ask the person.")
    assert CALLED == []
    assert results(db_path, session.id)[0][:3] == ("lookup", 1, "ToolError")


async def test_a_helper_may_call_a_function_only_when_given_it(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        if not answers:
            return reply(None, *(("spawn", {"task": task, "model": "scripted/helper",
                                            "tools": tools})
                                 for task, tools in (("with", ["lookup"]),
                                                     ("without", ["task_list"]),
                                                     ("unknown", ["forecast"]))))
        if len(answers) == 3:
            return reply(None, ("spawn_await", {"job_ids": "*"}))
        return reply(answers[-1])

    def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        return reply(answers[-1]) if answers else reply(None, ("lookup", {"city": "Rome"}))

    models.on("root", root)
    models.on("helper", helper)
    async with running(store, lookup) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    spawned = results(db_path, session.id)[:3]
    assert [row[1] for row in spawned] == [0, 0, 1]
    assert spawned[2][3].startswith("You cannot give 'forecast': a helper only gets tools you "
                                    "have yourself (")
    assert query(db_path, "SELECT thread_id, tools FROM agent_metadata WHERE thread_id LIKE ? "
                          "ORDER BY thread_id", f"{session.id}.%") == [
        (f"{session.id}.1", '["lookup"]'), (f"{session.id}.2", '["task_list"]')]
    helper_answers = {line for line in (answer or "").splitlines()
                      if line and not line.startswith("[")}
    assert helper_answers == {"Rome: 21 c", "Unknown tool 'lookup'. Available tools: task_list."}


async def test_a_slow_sync_function_does_not_stop_another_agent(
        store: Store, models: ScriptedModels) -> None:
    started, released = threading.Event(), threading.Event()

    def wait_for_release() -> str:
        """Wait until another agent has run."""
        started.set()
        return "released" if released.wait(5) else "never released"

    def waiter(messages: list[dict[str, Any]]) -> ScriptedReply:
        answers = tool_texts(messages)
        return reply(answers[-1]) if answers else reply(None, ("wait_for_release", {}))

    async def other(messages: list[dict[str, Any]]) -> ScriptedReply:
        while not started.is_set():
            await asyncio.sleep(0.01)
        released.set()  # only reached while the function runs, if the loop is free
        return reply("other done")

    models.on("waiter", waiter)
    models.on("other", other)
    async with running(store, wait_for_release) as runtime:
        answers: dict[str, str | None] = {}
        both = asyncio.Event()

        def on_event(event: RuntimeEvent) -> None:
            if isinstance(event, TurnEnded) and "." not in event.thread_id:
                answers[event.thread_id] = event.text
                if len(answers) == 2:
                    both.set()

        runtime.bus.subscribe(on_event)
        waiting = await runtime.start_session("go", "scripted/waiter")
        other_session = await runtime.start_session("go", "scripted/other")
        async with asyncio.timeout(30):
            await both.wait()
    assert answers == {waiting.id: "released", other_session.id: "other done"}
