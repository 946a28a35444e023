"""The board served over MCP, driven in-process by the SDK's own client: the tools a client sees
(pinned), the agents' error texts for hostile arguments with nothing written, task_wait (results,
approvals, timeouts), threads, agent_stop, the resources and their change notices, and no key
in anything served."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from lace.cli.mcp_board import BoardServer
from lace.config import Limits, Settings
from lace.core.assignee import HUMAN
from lace.core.records import Thread
from lace.core.text import MAX_NESTING
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.conftest import new_session, query
from tests.scripted import ScriptedModels, assigned_task, dutiful_worker, reply, tools_called

PINNED = Path(__file__).with_name("mcp_tool_schemas.json")
AGENT_SCHEMAS = Path(__file__).with_name("tool_schemas.json")
SECRET = "sk-test-secret-value-0123456789"


@asynccontextmanager
async def connected(board: BoardServer) -> AsyncIterator[Client]:
    """The SDK's client connected in-process to the served board."""
    async with Client(board.server) as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """(is_error, text) of one tool call."""
    result = await client.call_tool(tool, arguments)
    (content,) = result.content
    return bool(result.is_error), str(getattr(content, "text"))  # noqa: B009


def nested(depth: int) -> list[Any]:
    """A list `depth` levels deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def create(title: str, assignee: str) -> dict[str, Any]:
    return {"tasks": [{"title": title, "prompt": f"{title}, please.", "assigned_to": assignee}]}


def created_id(text: str) -> str:
    assert text.startswith("Created task "), text
    return text.split()[2].rstrip(":")


async def test_a_client_sees_the_agents_schemas_and_the_served_list_is_pinned(
        runtime: Runtime, session: Thread) -> None:
    async with connected(BoardServer(runtime, session.id)) as client:
        tools = (await client.list_tools()).tools
    served = [{"name": tool.name, "description": tool.description,
               "input_schema": tool.input_schema,
               "read_only": bool(tool.annotations and tool.annotations.read_only_hint)}
              for tool in tools]
    assert served == json.loads(PINNED.read_text())
    agents = {entry["function"]["name"]: entry["function"]
              for entry in json.loads(AGENT_SCHEMAS.read_text())}
    for tool in served:
        if tool["name"] in agents:  # the six task tools and agent_stop, exactly as agents see them
            assert tool["input_schema"] == agents[tool["name"]]["parameters"]
            assert tool["description"] == agents[tool["name"]]["description"]
    assert [tool["name"] for tool in served if tool["name"] in agents] == [
        "task_create", "task_list", "task_view", "task_update", "task_add_note",
        "task_complete", "agent_stop"]


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("task_create", {"tasks": [{"title": "x", "prompt": "y", "assignTo": "human"}]},
     "unknown key 'assignTo'; did you mean 'assigned_to'?"),
    ("task_create", {"tasks": [{"title": "x" * 1_000_000, "prompt": "y"}]},
     "String should have at most 200 characters"),
    ("task_create", {"tasks": []}, "List should have at least 1 item"),
    ("task_create", {"tasks": [{"title": "t", "prompt": "p", "assigned_to": "new:nope/x"}]},
     "Unknown provider 'nope'"),
    ("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                "assigned_to": "lace_20990101_zzzzzz.9"}]},
     "Unknown agent thread 'lace_20990101_zzzzzz.9' in this session"),
    ("task_view", {"task_id": "task_20990101_zzzzzz"}, "task_20990101_zzzzzz"),
    ("task_update", {"task_id": "x", "status": "done"}, "Input should be 'pending'"),
    ("task_list", {"filter": nested(MAX_NESTING + 1)}, "nested deeper than"),
    ("task_wait", {"task_ids": ["task_20990101_zzzzzz"], "timeout_s": 601},
     "less than or equal to 600"),
    ("task_wait", {"task_ids": ["task_20990101_zzzzzz"], "timeout_s": 0}, "greater than 0"),
    ("task_wait", {"task_ids": ["task_20990101_zzzzzz"]}, "task_20990101_zzzzzz"),
    ("thread_read", {"thread_id": "lace_20990101_zzzzzz"}, "threads_list shows its threads"),
    ("thread_read", {"thread_id": "x", "last": 10**9}, "less than or equal to 200"),
    ("agent_stop", {"thread_id": "lace_20990101_zzzzzz", "reason": "r"},
     "threads_list shows its agents"),
    ("rm_rf", {}, "Unknown tool 'rm_rf'. Available tools: task_create, task_list"),
]


@pytest.mark.parametrize(("tool", "arguments", "expected"), HOSTILE,
                         ids=[f"{n}-{case[0]}" for n, case in enumerate(HOSTILE)])
async def test_bad_arguments_get_the_agents_error_text_and_write_nothing(
        runtime: Runtime, session: Thread, store: Store, unchanged: Callable[[], Any],
        tool: str, arguments: dict[str, Any], expected: str) -> None:
    async with connected(BoardServer(runtime, session.id)) as client:
        with unchanged():
            is_error, text = await call(client, tool, arguments)
    assert is_error and expected in text, text
    if tool in runtime.tools.registry.tools:  # what the person's call gets in the app
        with unchanged():
            assert (await runtime.act_as_human(session.id, tool, arguments)).text == text


async def test_markup_and_control_characters_are_kept_as_text(
        runtime: Runtime, session: Thread, db_path: Path) -> None:
    title = "[bold red]x[/] <script>alert(1)</script> \x1b[31m"
    async with connected(BoardServer(runtime, session.id)) as client:
        is_error, text = await call(client, "task_create", create(title, HUMAN))
        task_id = created_id(text)
        _, view = await call(client, "task_view", {"task_id": task_id})
    assert not is_error and title in view
    assert query(db_path, "SELECT title, created_by FROM tasks") == [(title, HUMAN)]


async def test_task_wait_returns_the_result_and_thread_read_the_childs_conversation(
        runtime: Runtime, session: Thread, models: ScriptedModels) -> None:
    models.on("worker", dutiful_worker("forty-two"))
    async with connected(BoardServer(runtime, session.id)) as client:
        _, text = await call(client, "task_create", create("Answer", "new:scripted/worker"))
        task_id, child = created_id(text), f"{session.id}.1"
        assert text.endswith(f"(assigned to {child})")
        is_error, waited = await call(client, "task_wait", {"task_ids": [task_id]})
        _, conversation = await call(client, "thread_read", {"thread_id": child, "last": 3})
        _, threads = await call(client, "threads_list", {})
    assert not is_error and waited == f"[{task_id}: completed] Answer\nResult: forty-two"
    assert conversation.startswith(f"Thread {child}  worker  scripted/worker  [")
    _, earlier, *shown = conversation.splitlines()
    assert earlier == f"(5 earlier events: raise last, or lace show {child})"
    assert len(shown) == 3 and shown[-1].endswith(
        f"tool_result: task_complete ok: Completed task {task_id}: Answer")
    assert [line.split()[0] for line in threads.splitlines()] == [session.id, child]


async def test_task_wait_times_out_with_the_task_still_open(
        runtime: Runtime, session: Thread) -> None:
    async with connected(BoardServer(runtime, session.id)) as client:
        _, text = await call(client, "task_create", create("For a person", HUMAN))
        task_id = created_id(text)
        is_error, waited = await call(client, "task_wait",
                                      {"task_ids": [task_id], "timeout_s": 0.2})
    assert not is_error
    assert waited == (f"[{task_id}: pending] For a person (assigned to human)\n"
                      "Still open: call task_wait again to keep waiting.")


async def test_task_wait_says_which_approval_an_agent_waits_for(
        store: Store, session: Thread, models: ScriptedModels, tmp_path: Path,
        db_path: Path) -> None:
    def shell(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id = assigned_task(messages)
        if "bash" not in tools_called(messages):
            return reply(None, ("bash", {"command": "echo hi"}))
        if "task_complete" not in tools_called(messages):
            return reply(None, ("task_complete", {"task_id": task_id, "message": "denied"}))
        return reply("done")

    models.on("shell", shell)
    runtime = open_runtime(store, Settings(
        limits=Limits(approval_timeout_s=60)), default_client(), check_model=check_model,
            workspace=tmp_path)
    try:
        async with connected(BoardServer(runtime, session.id)) as client:
            _, text = await call(client, "task_create", create("Shell", "new:scripted/shell"))
            task_id = created_id(text)
            _, waited = await call(client, "task_wait", {"task_ids": [task_id]})
            ((approval_id,),) = query(db_path, "SELECT id FROM approvals")
            assert waited == (
                f"[{task_id}: in_progress] Shell (assigned to {session.id}.1)\n"
                f"{session.id}.1 waits for the person's approval #{approval_id} to run bash "
                f'{{"command": "echo hi", "timeout_s": 60}}: answer with lace approve '
                f"{approval_id} or lace deny {approval_id}, or in the app.")
            await runtime.decide(approval_id, "denied")
            _, waited = await call(client, "task_wait", {"task_ids": [task_id]})
        assert waited == f"[{task_id}: completed] Shell\nResult: denied"
    finally:
        await runtime.stop()
        runtime.close()


async def test_agent_stop_stops_a_running_agent_as_the_person(
        runtime: Runtime, session: Thread, models: ScriptedModels, db_path: Path) -> None:
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(_messages: list[dict[str, Any]]) -> ScriptedReply:
        started.set()
        await never.wait()
        return reply("unreachable")

    models.on("stuck", stuck)
    async with connected(BoardServer(runtime, session.id)) as client:
        _, text = await call(client, "task_create", create("Forever", "new:scripted/stuck"))
        task_id, child = created_id(text), f"{session.id}.1"
        async with asyncio.timeout(30):
            await started.wait()
        is_error, stopped = await call(client, "agent_stop",
                                       {"thread_id": child, "reason": "enough"})
        _, waited = await call(client, "task_wait", {"task_ids": [task_id]})
    assert not is_error and stopped == f"Stopped 1 agent(s): {child}."
    assert waited == (f"[{task_id}: blocked] Forever\n"
                      "Last note: Blocked: stopped: enough (by human)")
    assert query(db_path, "SELECT status, stop_reason, stopped_by_person FROM agent_metadata "
                          "WHERE thread_id = ?", child) == [("stopped", "enough (by human)", 1)]


async def test_another_sessions_threads_are_out_of_reach(
        runtime: Runtime, session: Thread, store: Store,
        unchanged: Callable[[], Any]) -> None:
    other = new_session(store, "someone else's")
    async with connected(BoardServer(runtime, session.id)) as client:
        with unchanged():
            stop = await call(client, "agent_stop", {"thread_id": other.id, "reason": "r"})
            read = await call(client, "thread_read", {"thread_id": other.id})
            with pytest.raises(MCPError, match="threads_list shows its threads"):
                await client.read_resource(f"lace://thread/{other.id}")
    assert stop[0] and f"Unknown agent {other.id!r} in this session" in stop[1]
    assert read[0] and f"Unknown thread {other.id!r} in this session" in read[1]


async def test_with_no_session_the_first_task_create_starts_one(
        runtime: Runtime, store: Store, db_path: Path, unchanged: Callable[[], Any]) -> None:
    board = BoardServer(runtime, None)
    async with connected(board) as client:
        with unchanged():
            listed = await call(client, "task_list", {})
            refused = await call(client, "task_create", create("Bad", "new:nope/x"))
            resource = await client.read_resource("lace://board")
        is_error, _ = await call(client, "task_create", create("First", HUMAN))
    assert listed == (True, "No session yet: create a task with task_create to start one (or "
                            "start lace mcp serve with --session ID).")
    assert refused[0] and "Unknown provider 'nope'" in refused[1]
    assert json.loads(resource.contents[0].text) == {"session": None, "tasks": []}
    assert not is_error and board.session_id is not None
    assert query(db_path, "SELECT id, title FROM threads") == [(board.session_id, "First")]


async def test_the_resources_hold_the_board_and_a_thread_and_announce_changes(
        runtime: Runtime, session: Thread, models: ScriptedModels) -> None:
    models.on("worker", dutiful_worker("done well"))
    async with connected(BoardServer(runtime, session.id)) as client:
        listed = [str(resource.uri) for resource in (await client.list_resources()).resources]
        async with client.listen(resource_subscriptions=["lace://board"]) as events:
            _, text = await call(client, "task_create", create("Report", "new:scripted/worker"))
            async with asyncio.timeout(30):
                first = await anext(aiter(events))
            await call(client, "task_wait", {"task_ids": [created_id(text)]})
        board = json.loads((await client.read_resource("lace://board")).contents[0].text)
        thread = json.loads((await client.read_resource(
            f"lace://thread/{session.id}.1")).contents[0].text)
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.read_resource("lace://secrets")
    assert listed == ["lace://board", f"lace://thread/{session.id}"]
    assert str(getattr(first, "uri", "")) == "lace://board"
    assert [(task["title"], task["status"], task["created_by"]) for task in board["tasks"]] == [
        ("Report", "completed", HUMAN)]
    assert thread["agent"]["model"] == "worker" and thread["earlier_events"] == 0
    assert "task_complete" in [event["data"].get("tool_name") for event in thread["events"]]


async def test_no_key_is_served(runtime: Runtime, session: Thread, models: ScriptedModels,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    models.on("worker", dutiful_worker(f"the key is {SECRET}"))
    async with connected(BoardServer(runtime, session.id)) as client:
        _, text = await call(client, "task_create",
                             create(f"Leak {SECRET}", "new:scripted/worker"))
        served = [text, *(await call(client, "task_wait", {"task_ids": [created_id(text)]})),
                  *(await call(client, "thread_read", {"thread_id": f"{session.id}.1"})),
                  (await client.read_resource("lace://board")).contents[0].text,
                  (await client.read_resource(f"lace://thread/{session.id}.1")).contents[0].text]
    assert all(SECRET not in str(item) for item in served)
    assert "the key is [redacted]" in str(served[2])


async def test_a_client_of_the_2025_protocol_subscribes_to_a_thread(
        runtime: Runtime, session: Thread, models: ScriptedModels) -> None:
    models.on("worker", dutiful_worker("done"))
    updated: asyncio.Queue[str] = asyncio.Queue()

    async def receive(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.put_nowait(str(message.params.uri))

    board = BoardServer(runtime, session.id)
    async with Client(board.server, mode="legacy", message_handler=receive) as client:
        assert client.server_capabilities.resources is not None
        assert client.server_capabilities.resources.subscribe
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource(f"lace://thread/{session.id}.1")
        await call(client, "task_create", create("Note it", "new:scripted/worker"))
        async with asyncio.timeout(30):
            first = await updated.get()
    assert first == f"lace://thread/{session.id}.1"  # the board's updates were not asked for


async def test_a_long_task_wait_reports_progress_to_a_client_that_asks(
        runtime: Runtime, session: Thread) -> None:
    board = BoardServer(runtime, session.id)
    board.runner.progress_every_s = 0.05
    reports: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        reports.append((done, total, message))

    async with Client(board.server, mode="legacy") as client:
        _, text = await call(client, "task_create", create("For a person", HUMAN))
        result = await client.call_tool("task_wait", {"task_ids": [created_id(text)],
                                                      "timeout_s": 0.5},
                                        progress_callback=progress)
    assert not result.is_error and reports
    assert all(0 < done < 0.6 and total == 0.5 and str(message).startswith("waited ")
               for done, total, message in reports)
