"""Agents use MCP servers' tools: over stdio and streamable HTTP, through the same policy,
approvals and shrinking rules as lace's own tools, with results recorded like any other."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, McpServer, ToolSettings, load_settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import Warned
from lace.store import Store
from tests.conftest import query, until_quiet_then_closed
from tests.mcp_servers.harness import (
    NOTES_SERVER,
    QUICK,
    alive,
    notes_over_http,
    notes_stdio,
    runtime_with,
)
from tests.processes import trust_folder
from tests.scripted import ScriptedModels, reply, text, tools_called

RESULTS = ("SELECT json_extract(data, '$.tool_name'), json_extract(data, '$.server'), "
           "json_extract(data, '$.is_error'), json_extract(data, '$.message.content') "
           "FROM events WHERE type = 'tool_result' ORDER BY id")


def calls_in_turn(*calls: tuple[str, dict[str, Any]]) -> Any:
    """Makes each call in turn (one per model call), then answers with the results."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = len([m for m in messages if m["role"] == "tool"])
        if done < len(calls):
            return reply(None, calls[done])
        return reply(" | ".join(text(m) for m in messages if m["role"] == "tool"))

    return handle


async def run_session(runtime: Runtime, prompt: str = "go") -> str:
    root = await runtime.start_session(prompt, "scripted/root")
    await until_quiet_then_closed(runtime, root.id)
    return root.id


class Recording:
    """The runtime's real model client, noting the tools each request offered."""

    def __init__(self, client: Any) -> None:
        self.client, self.offered = client, []

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.offered.append({t["function"]["name"]: t["function"] for t in tools})
        return await self.client.complete(model, messages, tools, **kwargs)


def recording(runtime: Runtime) -> Recording:
    runtime.scheduler.runner.client = Recording(runtime.client)  # type: ignore[assignment]
    return runtime.scheduler.runner.client  # type: ignore[return-value]


async def test_an_agent_calls_a_stdio_server_whose_tools_are_in_the_first_request(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()})
    requests = recording(runtime)
    models.on("root", calls_in_turn(("mcp__notes__echo", {"text": "hello <b>[red]x"})))
    await run_session(runtime)
    assert query(db_path, RESULTS) == [("mcp__notes__echo", "notes", 0, "hello <b>[red]x")]
    first = requests.offered[0]
    assert first["mcp__notes__echo"] == {
        "name": "mcp__notes__echo",
        "description": "[MCP server notes, tool echo] Return the text unchanged.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]}}
    assert {"task_create", "bash", "mcp__notes__add_note", "mcp__notes__crash"} <= set(first)
    spawnable = first["spawn"]["parameters"]["properties"]["tools"]["items"]["enum"]
    assert "mcp__notes__echo" in spawnable and "task_create" in spawnable


async def test_an_agent_calls_a_server_over_streamable_http_allowed_by_a_pattern(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    with notes_over_http() as url:
        runtime = runtime_with(store, {"remote": McpServer(url=url)},
                               policy={"mcp__remote__*": "allow"})
        models.on("root", calls_in_turn(("mcp__remote__add_note", {"text": "one"}),
                                        ("mcp__remote__add_note", {"text": "two"}),
                                        ("mcp__remote__fail", {})))
        await run_session(runtime)
    assert query(db_path, RESULTS) == [
        ("mcp__remote__add_note", "remote", 0, "1 note(s)"),
        ("mcp__remote__add_note", "remote", 0, "2 note(s)"),
        ("mcp__remote__fail", "remote", 1, "MCP server remote, tool fail returned an error: "
                                           "Error executing tool fail")]
    assert query(db_path, "SELECT COUNT(*) FROM approvals") == [(0,)]


async def test_a_third_party_server_from_pypi_through_lace_toml(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    command = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent))
    assert command is not None, "mcp-server-time is a dev dependency: pip install -e '.[dev]'"
    (tmp_path / "lace.toml").write_text(
        f'[mcp_servers.time]\ncommand = "{command}"\nargs = ["--local-timezone", "UTC"]\n')
    trust_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    runtime = open_runtime(store, settings.model_copy(update={"limits": Limits(**QUICK)}),
                           default_client(), check_model=check_model)
    models.on("root", calls_in_turn(
        ("mcp__time__convert_time", {"source_timezone": "Europe/Paris", "time": "12:30",
                                     "target_timezone": "Asia/Tokyo"}),
        ("mcp__time__get_current_time", {"timezone": "Not/AZone"})))
    await run_session(runtime)
    (convert, wrong) = query(db_path, RESULTS)
    assert convert[:3] == ("mcp__time__convert_time", "time", 0)
    assert json.loads(convert[3])["target"]["datetime"].endswith("T20:30:00+09:00")
    assert wrong[:3] == ("mcp__time__get_current_time", "time", 1)
    assert "MCP server time, tool get_current_time returned an error" in wrong[3]
    assert "Not/AZone" in wrong[3]


async def test_a_policy_of_ask_waits_for_the_person_and_shows_the_whole_arguments(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()})
    long_text = "note " * 2000
    models.on("root", calls_in_turn(("mcp__notes__add_note", {"text": long_text}),
                                    ("mcp__notes__echo", {"text": "read-only: no question"})))
    root = await runtime.start_session("go", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    for _ in range(1000):
        pending = query(db_path, "SELECT id, tool, arguments FROM approvals "
                                 "WHERE status = 'pending'")
        if pending:
            break
        assert not run.done(), "the run ended without asking"
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("no approval request appeared")
    (approval_id, tool, arguments), = pending
    assert (tool, json.loads(arguments)) == ("mcp__notes__add_note", {"text": long_text})
    assert query(db_path, RESULTS) == []  # nothing ran while it waits
    assert query(db_path, "SELECT status FROM agent_metadata") == [("waiting",)]
    await runtime.decide(approval_id, "approved")
    await asyncio.wait_for(run, 60)
    await runtime.stop()
    runtime.close()
    assert query(db_path, RESULTS) == [
        ("mcp__notes__add_note", "notes", 0, "1 note(s)"),
        ("mcp__notes__echo", "notes", 0, "read-only: no question")]
    assert query(db_path, "SELECT tool, status FROM approvals") == [
        ("mcp__notes__add_note", "approved")]


async def test_deny_and_read_only_apply_to_mcp_tools(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    tools = ToolSettings(policy={"mcp__notes__echo": "deny"}).overridden(read_only=True)
    runtime = runtime_with(store, {"notes": notes_stdio()}, tools=tools)
    models.on("root", calls_in_turn(("mcp__notes__add_note", {"text": "x"}),
                                    ("mcp__notes__echo", {"text": "x"}),
                                    ("mcp__notes__pid", {})))
    await run_session(runtime)
    results = query(db_path, RESULTS)
    assert [row[:3] for row in results] == [("mcp__notes__add_note", "notes", 1),
                                            ("mcp__notes__echo", "notes", 1),
                                            ("mcp__notes__pid", "notes", 0)]
    assert results[0][3].startswith("Denied: the policy for mcp__notes__add_note is deny")
    assert results[1][3].startswith("Denied: the policy for mcp__notes__echo is deny")


async def test_a_helper_is_refused_an_mcp_tool_its_creator_lacks(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()}, policy={"mcp__notes__*": "allow"})
    requests = recording(runtime)

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            return reply(None, ("spawn", {"task": "use the notes", "model": "scripted/helper",
                                          "tools": ["task_list", "spawn",
                                                    "mcp__notes__echo"]}))
        return reply("spawned")

    models.on("root", root)
    models.on("helper", calls_in_turn(
        ("spawn", {"task": "write", "model": "scripted/helper",
                   "tools": ["mcp__notes__add_note"]}),
        ("spawn", {"task": "write", "model": "scripted/helper", "tools": ["mcp__notes__*"]}),
        ("mcp__notes__add_note", {"text": "sneaky"}),
        ("mcp__notes__echo", {"text": "allowed"})))
    await run_session(runtime)
    helper = query(db_path, "SELECT json_extract(data, '$.tool_name'), json_extract(data, "
                            "'$.is_error'), json_extract(data, '$.message.content') FROM events "
                            "WHERE type = 'tool_result' AND thread_id LIKE '%.1' ORDER BY id")
    assert [row[:2] for row in helper] == [("spawn", 1), ("spawn", 1),
                                           ("mcp__notes__add_note", 1),
                                           ("mcp__notes__echo", 0)]
    assert helper[0][2].startswith("You cannot give 'mcp__notes__add_note': a helper only gets "
                                   "tools you have yourself (task_list, spawn, "
                                   "mcp__notes__echo)")
    assert helper[1][2].startswith("You cannot give 'mcp__notes__*'")
    assert helper[2][2] == ("Unknown tool 'mcp__notes__add_note'. Available tools: task_list, "
                            "spawn, mcp__notes__echo.")
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(2,)]
    helper_request = requests.offered[1]
    assert sorted(helper_request) == ["mcp__notes__echo", "spawn", "task_list"]
    assert helper_request["spawn"]["parameters"]["properties"]["tools"]["items"]["enum"] == [
        "task_list", "spawn", "mcp__notes__echo"]


async def test_a_server_that_crashes_mid_call_gives_a_tool_error_and_is_restarted(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()}, policy={"mcp__notes__*": "allow"})
    models.on("root", calls_in_turn(("mcp__notes__pid", {}), ("mcp__notes__crash", {}),
                                    ("mcp__notes__pid", {})))
    warnings: list[str] = []
    runtime.bus.subscribe(lambda event: warnings.append(event.text)
                          if isinstance(event, Warned) else None)
    await run_session(runtime)
    (first, crash, second) = query(db_path, RESULTS)
    assert crash[:3] == ("mcp__notes__crash", "notes", 1)
    assert crash[3].startswith("MCP server notes, tool crash: the server stopped during the "
                               "call (Connection closed). lace restarted it")
    assert first[2] == second[2] == 0 and first[3] != second[3]
    assert not alive(int(first[3])) and not alive(int(second[3]))  # stopped with the runtime
    assert warnings == ["MCP server notes stopped; restarting it"]


async def test_a_server_that_cannot_start_is_left_out_with_a_warning(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"broken": McpServer(command="/nonexistent/mcp-server"),
                                   "notes": notes_stdio()})
    warnings: list[str] = []
    runtime.bus.subscribe(lambda event: warnings.append(event.text)
                          if isinstance(event, Warned) else None)
    models.on("root", calls_in_turn(("mcp__broken__anything", {"x": 1}),
                                    ("mcp__notes__echo", {"text": "still here"})))
    await run_session(runtime)
    assert query(db_path, RESULTS) == [
        ("mcp__broken__anything", None, 1,
         "MCP server broken is not running (command not found: /nonexistent/mcp-server); it "
         "is tried again within 60 s. Do without it for now."),
        ("mcp__notes__echo", "notes", 0, "still here")]
    assert warnings == ["MCP server broken failed to start: command not found: "
                        "/nonexistent/mcp-server; its tools are left out, and it is tried "
                        "again in 60 s"]


async def test_a_slow_call_times_out_as_a_tool_error_and_keys_are_masked(
        store: Store, models: ScriptedModels, db_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-lace-provider-key-123")
    runtime = runtime_with(store, {"notes": notes_stdio(NOTES_TOKEN="tok-configured-secret")},
                           policy={"mcp__*": "allow"}, mcp_call_timeout_s=0.5)
    models.on("root", calls_in_turn(("mcp__notes__slow", {"seconds": 5}),
                                    ("mcp__notes__secret", {}),
                                    ("mcp__notes__flood", {"characters": 100_000})))
    await run_session(runtime)
    (slow, secret, flood) = query(db_path, RESULTS)
    assert slow == ("mcp__notes__slow", "notes", 1, "MCP server notes, tool slow: no answer "
                    "within 0.5 s ([limits] mcp_call_timeout_s).")
    assert secret[3] == "token=[redacted] openai=False"
    assert query(db_path, "SELECT COUNT(*) FROM events WHERE data LIKE '%tok-configured%'") \
        == [(0,)]
    assert len(flood[3]) < 30_100 and "[70,000 characters cut]" in flood[3]


FLAKY = """
import os, sys
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit("not today")
os.execv(sys.executable, [sys.executable, sys.argv[2]])
"""


async def test_a_server_that_failed_to_start_is_tried_again_later(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    flaky = McpServer(command=sys.executable,
                      args=["-c", FLAKY, str(tmp_path / "tried"), str(NOTES_SERVER)])
    runtime = runtime_with(store, {"flaky": flaky}, mcp_retry_s=0.2)
    requests = recording(runtime)
    models.on("root", lambda messages: reply(None, ("mcp__flaky__echo", {"text": "hi"}))
              if messages[-1]["role"] == "user" else reply("ok"))
    root = await runtime.start_session("first", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    await asyncio.sleep(0.3)  # past mcp_retry_s: the next turn starts the server again
    await runtime.send(root.id, "second")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    await runtime.stop()
    runtime.close()
    (failed, worked) = query(db_path, RESULTS)
    assert failed[:3] == ("mcp__flaky__echo", None, 1)
    assert failed[3].startswith("MCP server flaky is not running (")
    assert worked == ("mcp__flaky__echo", "flaky", 0, "hi")
    assert "mcp__flaky__echo" not in requests.offered[0]


async def test_hostile_arguments_come_back_as_tool_errors_and_images_as_descriptions(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()})
    nested = "[" * 500 + "]" * 500
    models.on("root", lambda messages: reply(None, ("mcp__notes__add_note", nested),
                                             ("mcp__notes__add_note", "{not json"),
                                             ("mcp__notes__add_note", "[1, 2]"),
                                             ("mcp__notes__echo", {"wrong": "key"}),
                                             ("mcp__notes__picture", {}))
              if messages[-1]["role"] == "user" else reply("ok"))
    await run_session(runtime)
    results = query(db_path, RESULTS)
    assert [row[1:3] for row in results] == [("notes", 1)] * 4 + [("notes", 0)]
    assert results[0][3].startswith("Invalid arguments for mcp__notes__add_note: the JSON is "
                                    "nested deeper than")
    assert results[1][3].startswith("Invalid JSON arguments for mcp__notes__add_note")
    assert results[2][3] == "Arguments for mcp__notes__add_note must be a JSON object, got list."
    assert results[3][3].startswith("MCP server notes, tool echo returned an error: ")
    assert results[4][3] == "a red dot\n[image image/png, about 300 bytes, not shown]"
    assert query(db_path, "SELECT COUNT(*) FROM approvals") == [(0,)]  # refused before asking


async def test_lace_own_board_is_not_offered_to_its_agents_as_an_mcp_server(
        tmp_path: Path) -> None:
    """A project whose `.mcp.json` adds lace for Claude Code or Cursor (`lace mcp serve`) must
    not give lace's agents the board as the person: a helper limited to a few tools would
    create tasks (and agents with every tool) and stop agents as `human`."""
    from lace.tools.mcp.servers import McpServers

    home = tmp_path / "home"
    board = McpServer(command=sys.executable, args=[
        "-m", "lace", "mcp", "serve", "--db", str(tmp_path / "board.db")],
        env={"LACE_HOME": str(home), "PYTHONPATH": str(Path(__file__).parents[1])})
    warned: list[str] = []
    servers = McpServers({"lace": board, "notes": notes_stdio()},
                         Limits(mcp_retry_s=0.001), warned.append)
    try:
        tools = await servers.ready()
        await asyncio.sleep(0.01)
        assert {tool.server for tool in await servers.ready()} == {"notes"}
        assert not servers._starts  # never started again
    finally:
        await servers.stop()
    assert {tool.server for tool in tools} == {"notes"}
    assert warned == ["MCP server lace is lace's own board (lace mcp serve): its tools are left "
                      "out, since agents act on the board with their own task tools, not as "
                      "the person"]
    assert "lace's own board" in servers.unavailable("mcp__lace__task_create")


async def test_a_server_with_hundreds_of_tools_cannot_swamp_every_model_request() -> None:
    """Every request carries the tools' definitions, and OpenAI takes at most 128 tools: a
    server listing 300 (each within the per-tool cap) must not make every request of every
    agent too big or refused; the tools past the cap are left out, and said so once."""
    from lace.tools.mcp.results import MAX_SERVER_CHARACTERS, MAX_SERVER_TOOLS
    from lace.tools.mcp.servers import McpServers

    warned: list[str] = []
    servers = McpServers({"notes": notes_stdio(NOTES_EXTRA_TOOLS="300")}, Limits(),
                         warned.append)
    try:
        tools = await servers.ready()
    finally:
        await servers.stop()
    assert 9 <= len(tools) <= MAX_SERVER_TOOLS
    assert sum(len(json.dumps(tool.definition())) for tool in tools) <= MAX_SERVER_CHARACTERS
    assert "mcp__notes__echo" in {tool.name for tool in tools}
    (note,) = servers.left_out["notes"]
    assert note.startswith(f"{309 - len(tools)} more tools (extra_")
    assert warned == [f"MCP server notes: {note} are left out"]


async def test_odd_tool_schemas_leave_out_only_those_tools() -> None:
    """`"$defs": []` or `"properties": [1, 2]` from one server raised TypeError in every
    agent's tool listing, so no agent of the process could take a turn (and one nested deeper
    would reach the provider, which refuses every request carrying it)."""
    from lace.tools.mcp.servers import McpServers

    odd = McpServer(command=sys.executable,
                    args=[str(Path(__file__).parent / "mcp_servers" / "odd_server.py")])
    warned: list[str] = []
    servers = McpServers({"odd": odd, "notes": notes_stdio()}, Limits(), warned.append)
    try:
        tools = {tool.name: tool for tool in await servers.ready()}
        result = await servers.call(tools["mcp__odd__fine"], {})
    finally:
        await servers.stop()
    assert "mcp__notes__echo" in tools and result.text == "called fine"
    assert [name for name in tools if name.startswith("mcp__odd__")] == ["mcp__odd__fine"]
    assert len(servers.left_out["odd"]) == 5
    for tool in tools.values():
        assert isinstance(tool.parameters["properties"], dict)
