"""`lace mcp serve` as an MCP client starts it: the SDK's client over stdio spawns an agent and
reads its result and thread, leaving the rows an agent's own task_create leaves; stdout carries
only the protocol; streamable HTTP (with the token) refuses a foreign Origin or Host; a bad
command line is one line on stderr."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.conftest import run_cli
from tests.lace_forks import lace_popen, run_lace
from tests.processes import free_port, lace_env

TASK = {"title": "Find the answer", "prompt": "What is six times seven?",
        "assigned_to": "new:openai/worker", "priority": "high"}
KEY = "sk-fake-key-for-the-fake-server"
TOKEN = "mcp-serve-test-token-0123456789"


def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The worker notes, completes its task with "forty-two" and says so; the root (of `lace
    run`) creates TASK, then waits for the completion."""
    said = "\n".join(str(message.get("content") or "") for message in messages)
    answered = sum(message["role"] == "assistant" for message in messages)
    if model == "worker":
        task_id = said.split("assigned task '", 1)[1].split("'", 1)[0]
        steps: list[tuple[str, dict[str, Any] | str]] = [
            ("task_add_note", {"task_id": task_id, "note": "multiplying"}),
            ("task_complete", {"task_id": task_id, "message": "forty-two"})]
        return ScriptedReply("Done." if answered >= 2 else None, steps[answered:answered + 1])
    if answered == 0:
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [TASK]})])
    return ScriptedReply("All done." if "has been completed by" in said else "Waiting.")


def serve_params(home: Path, server: FakeOpenAI, *argv: str) -> StdioServerParameters:
    env = lace_env(home, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "lace", "mcp", "serve", *argv], env=env)


async def text_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return str(getattr(result.content[0], "text"))  # noqa: B009


def rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql, params).fetchall()


def plain(value: Any) -> Any:
    """A JSON value without the ids that differ from one database to another."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()
                if key not in ("id", "call_id", "tool_call_id", "inbox_id", "inbox_ids")}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def child_rows(db: Path) -> dict[str, Any]:
    """The task, its notes, its agent, the agent's inbox and conversation, with the session,
    task and child ids named ROOT, TASK and CHILD, the creator CREATOR, and the budget left
    unsaid (an agent creator's own tokens count against its helpers')."""
    ((task_id, creator),) = rows(db, "SELECT id, created_by FROM tasks")
    ((child, root),) = rows(db, "SELECT id, parent_id FROM threads WHERE parent_id IS NOT NULL")

    def norm(value: Any) -> Any:
        text = json.dumps(value).replace(task_id, "TASK").replace(child, "CHILD")
        text = text.replace(f"Created by: {creator}", "Created by: CREATOR")
        text = re.sub(r"helpers: [\d,]+ tokens", "helpers: N tokens", text)  # the root's use
        return json.loads(text.replace(root, "ROOT").replace('"human"', '"ROOT"'))

    return norm({
        "task": rows(db, "SELECT title, prompt, description, priority, status, assigned_to, "
                         "created_by FROM tasks"),
        "notes": rows(db, "SELECT author, content FROM task_notes ORDER BY id"),
        "thread": rows(db, "SELECT parent_id, root_id, title FROM threads WHERE id = ?", child),
        "agent": rows(db, "SELECT name, provider, model, profile, type, status, "
                          "created_for_task, parent_thread_id, current_task, tools, "
                          "instructions, stop_reason, budget, turns, tokens_in, tokens_out, "
                          "lease_holder IS NOT NULL FROM agent_metadata WHERE thread_id = ?",
                      child),
        "inbox": rows(db, "SELECT sender, kind, text, priority, consumed_at IS NOT NULL, wakes "
                          "FROM inbox WHERE thread_id = ? ORDER BY id", child),
        "events": [(kind, plain(json.loads(data))) for kind, data in rows(
            db, "SELECT type, data FROM events WHERE thread_id = ? ORDER BY id", child)],
    })


@pytest.mark.slow
async def test_a_client_spawns_an_agent_waits_for_it_and_reads_its_thread(
        tmp_path: Path) -> None:
    served, db = tmp_path / "served", tmp_path / "served" / "lace.db"
    with FakeOpenAI(script) as server:
        async with Client(serve_params(served, server)) as client:
            created = await text_of(client, "task_create", {"tasks": [TASK]})
            task_id = created.split()[2].rstrip(":")
            waited = await text_of(client, "task_wait", {"task_ids": [task_id],
                                                         "timeout_s": 120})
            ((root,),) = rows(db, "SELECT id FROM threads WHERE parent_id IS NULL")
            child = f"{root}.1"
            deadline = time.monotonic() + 60
            while f"{child}  worker  openai/worker  [idle]" not in await text_of(
                    client, "threads_list", {}):  # the worker's last turn after completing
                assert time.monotonic() < deadline, "the worker never became idle"
            conversation = await text_of(client, "thread_read", {"thread_id": child})
    assert created == f"Created task {task_id}: Find the answer (assigned to {child})"
    assert waited == f"[{task_id}: completed] Find the answer\nResult: forty-two"
    assert conversation.startswith(f"Thread {child}  worker  openai/worker  [idle]\n")
    assert conversation.endswith(f"tool_result: task_complete ok: Completed task {task_id}: "
                                 "Find the answer")
    assert rows(db, "SELECT id FROM processes") == []  # the server gave up its lease on EOF

    by_agent = tmp_path / "agent"
    with FakeOpenAI(script) as server:
        run = run_lace(["run", "--model", "openai/root", "--timeout", "120", "Get the answer."],
                       env=lace_env(by_agent, OPENAI_BASE_URL=server.base_url,
                                    OPENAI_API_KEY=KEY), timeout=180)
    assert run.returncode == 0 and run.stdout == "All done.\n", run.stderr
    assert child_rows(db) == child_rows(by_agent / "lace.db")
    assert rows(db, "SELECT created_by, assigned_to FROM tasks") == [("human", child)]


def jsonrpc(method: str, params: dict[str, Any], request_id: int | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message) + "\n"


@pytest.mark.slow
def test_stdout_carries_only_the_protocol_and_the_narration_goes_to_stderr(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeOpenAI(script) as server:
        session = [
            jsonrpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "raw", "version": "1"}}, 1),
            jsonrpc("notifications/initialized", {}),
            jsonrpc("tools/call", {"name": "task_create", "arguments": {"tasks": [TASK]}}, 2),
            jsonrpc("tools/call", {"name": "task_wait", "arguments": {
                "task_ids": ["TASK_ID"], "timeout_s": 120}}, 3),
        ]
        process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   env=lace_env(home, OPENAI_BASE_URL=server.base_url,
                                                OPENAI_API_KEY=KEY))
        assert process.stdin is not None and process.stdout is not None
        replies = []
        try:
            for line in session:
                if '"TASK_ID"' in line:
                    created = replies[-1]["result"]["content"][0]["text"]
                    line = line.replace("TASK_ID", created.split()[2].rstrip(":"))
                process.stdin.write(line)
                process.stdin.flush()
                if '"id"' in line:
                    replies.append(json.loads(process.stdout.readline()))
            rest, stderr = process.communicate(timeout=60)  # closes stdin: the client left
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 0, stderr
    assert rest == ""  # nothing after the last answer, and every line was JSON-RPC
    assert [reply["id"] for reply in replies] == [1, 2, 3]
    assert replies[2]["result"]["content"][0]["text"].endswith("Result: forty-two")
    assert "spawned (openai/worker)" in stderr and "task_complete(" in stderr


@pytest.mark.slow
def test_http_serves_loopback_and_refuses_a_foreign_origin_or_host(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve", "--http",
                                f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE,
                               env=lace_env(tmp_path / "home", LACE_MCP_TOKEN=TOKEN))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "never listened"
                time.sleep(0.05)
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "page", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream",
                   "Authorization": f"Bearer {TOKEN}"}
        # httpx's 5 s default is short for a first request beside other tests (xdist)
        foreign = httpx.post(url, json=initialize, timeout=60,
                             headers={**headers, "Origin": "http://evil.example"})
        rebound = httpx.post(url, json=initialize, timeout=60,
                             headers={**headers, "Host": "evil.example"})
        same = httpx.post(url, json=initialize, timeout=60,
                          headers={**headers, "Origin": f"http://127.0.0.1:{port}"})
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert (foreign.status_code, rebound.status_code, same.status_code) == (403, 421, 200)
    assert process.returncode == 0, stderr


@pytest.mark.slow
async def test_the_sdk_client_works_over_http(tmp_path: Path) -> None:
    port = free_port()
    process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve", "--http",
                                f"localhost:{port}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE,
                               env=lace_env(tmp_path / "home", LACE_MCP_TOKEN=TOKEN))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("localhost", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "never listened"
                time.sleep(0.05)
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(f"http://localhost:{port}/mcp",
                                                       http_client=http)) as client:
            result = await client.call_tool("task_create", {"tasks": [
                {"title": "Review", "prompt": "Review it.", "assigned_to": "human"}]})
            listed = await client.call_tool("task_list", {"filter": "all"})
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert not result.is_error and "(assigned to human)" in str(result.content[0])
    assert "Review → human [pending]" in str(listed.content[0])


@pytest.mark.parametrize(("argv", "message"), [
    (["mcp"], "choose an action: lace mcp list, lace mcp serve"),
    (["mcp", "serve", "--http", "nonsense"], "--http expects HOST:PORT"),
    (["mcp", "serve", "--http", "127.0.0.1:0"], "a port from 1 to 65535"),
    (["mcp", "serve", "--http", "0.0.0.0:8765"], "add --allow-remote to mean it"),
    (["mcp", "serve", "--http", "[::]:8765", "--allow-remote"], "name the address clients use"),
    (["mcp", "serve", "--http", "192.0.2.1:8765"], "add --allow-remote to mean it"),
    (["mcp", "serve", "--http", "192.0.2.1:8765", "--allow-remote"],
     "cannot listen on 192.0.2.1:8765"),
    (["mcp", "serve", "--session", "lace_20990101_zzzzzz"], "lace_20990101_zzzzzz"),
    (["mcp", "serve", "--workspace", "/no/such/folder"], "is not a folder"),
])
def test_a_bad_command_line_is_one_line_on_stderr(
        capsys: pytest.CaptureFixture[str], db_path: Path, argv: list[str],
        message: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--db", str(db_path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    """Poll `condition` until it holds; fail (never pass) when `timeout` runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_dead_servers_agents_are_taken_over_by_lace_run_continue(tmp_path: Path) -> None:
    home, db = tmp_path / "home", tmp_path / "home" / "lace.db"
    lease = {"LACE_LIMITS__LEASE_TIMEOUT_S": "1.5"}
    server = lace_popen([sys.executable, "-m", "lace", "mcp", "serve"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True,
                              env=lace_env(home, LACE_DEMO_DELAY="600", **lease))
    assert server.stdin is not None and server.stdout is not None
    try:
        for line in (jsonrpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}}, 1),
                     jsonrpc("notifications/initialized", {}),
                     jsonrpc("tools/call", {"name": "task_create", "arguments": {"tasks": [
                         {"title": "Slow", "prompt": "Take your time.",
                          "assigned_to": "new:demo/worker"}]}}, 2)):
            server.stdin.write(line)
            server.stdin.flush()
            if '"id"' in line:
                server.stdout.readline()
        ((root,),) = rows(db, "SELECT id FROM threads WHERE parent_id IS NULL")
        wait_for(lambda: rows(db, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                              f"{root}.1") == [("running",)], "the helper's turn")
        ((holder, live),) = rows(db, "SELECT lease_holder, lease_holder IN (SELECT id FROM "
                                     "processes WHERE expires_at >= ?) FROM agent_metadata "
                                     "WHERE thread_id = ?", time.time(), f"{root}.1")
        assert live  # the app and other processes see the server's agent as live
    finally:
        server.kill()  # dies mid-turn: no chance to mark anything
        server.wait()
    wait_for(lambda: rows(db, "SELECT id FROM processes WHERE expires_at >= ?",
                          time.time()) == [], "the dead server's lease to run out")
    run = run_lace(["run", "--continue", root, "--timeout", "120"],
                   env=lace_env(home, **lease), timeout=180)
    assert run.returncode == 0, run.stderr
    assert rows(db, "SELECT status FROM tasks") == [("completed",)]
    ((taken_by,),) = rows(db, "SELECT lease_holder FROM agent_metadata WHERE thread_id = ?",
                          f"{root}.1")
    assert taken_by != holder


def test_a_port_in_use_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str],
                                             db_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, out, err = run_cli(capsys, "mcp", "serve", "--http", f"127.0.0.1:{port}",
                                 "--db", str(db_path))
    assert (code, out) == (2, "")
    assert err == f"lace: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
