"""The ACP surfaces attacked: an editor sending huge, deeply nested or malformed JSON-RPC to
`lace acp`, or a `cwd` outside any folder; an `acp:NAME` worker that floods updates, hangs,
asks for powers its task lacks or names files outside the workspace; and a repository whose
untrusted `lace.toml` names an ACP agent command."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.config import AcpAgent, Limits, Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.acp_stdio import MAX_MESSAGE_BYTES
from lace.runtime.acp_worker import MAX_TEXT_CHARACTERS
from lace.store import Store
from tests.conftest import query
from tests.lace_forks import lace_popen
from tests.processes import lace_at, lace_env
from tests.scripted import ScriptedModels, reply

AGENT = str(Path(__file__).parent.parent / "acp_worker_agent.py")


async def read_answer(stdout: asyncio.StreamReader, request_id: int,
                      seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Read protocol lines until the answer to `request_id`; every line must be JSON-RPC."""
    while True:
        line = await asyncio.wait_for(stdout.readline(), 60)
        assert line, "lace acp closed its stdout"
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
        seen.append(message)
        if message.get("id") == request_id:
            return message


@pytest.mark.slow
async def test_huge_nested_and_malformed_messages_leave_lace_acp_answering(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lace", "acp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=lace_env(home), limit=2**20)
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    nested = "[" * 200_000 + "]" * 200_000
    deep_meta = '{"a":' * 5_000 + "1" + "}" * 5_000
    hostile = [
        b"this is not json\n",
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {\n',  # cut short
        b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": '
        + b"x" * (9 * 2**20) + b"}\n",  # past the 8 MB lace reads
        f'{{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {nested}}}\n'.encode(),
        f'{{"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {{"protocolVersion":'
        f' 1, "_meta": {deep_meta}}}}}\n'.encode(),
        b'{"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": {"sessionId": '
        b'"lace_20260101_nosuch", "prompt": [{"type": "text", "text": "hi"}]}}\n',
        b'{"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": {"cwd": "../rel", '
        b'"mcpServers": []}}\n',
        b'{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}}'
        b"\n",
    ]
    seen: list[dict[str, Any]] = []
    try:
        for line in hostile:
            process.stdin.write(line)
        await process.stdin.drain()
        answer = await read_answer(process.stdout, 7, seen)
        assert answer["result"]["protocolVersion"] == 1
        assert answer["result"]["agentCapabilities"]["loadSession"] is True
        by_id = {message.get("id"): message for message in seen}
        assert 2 not in by_id and 3 not in by_id  # dropped: too long, too deep to parse
        assert by_id[5]["error"]["message"] == "Resource not found"
        assert by_id[6]["error"]["message"] == "Invalid params"
        assert "must be the absolute path of a folder" in json.dumps(by_id[6]["error"])
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 30)
        stderr = (await process.stderr.read()).decode()
        assert "dropped a message of 9,437," in stderr
        assert process.returncode == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def worker_runtime(store: Store, workspace: Path, *argv: str, **settings: Any) -> Runtime:
    agent = AcpAgent(command=sys.executable, args=[AGENT, *argv],
                     tools=settings.pop("acp_tools", None))
    return open_runtime(store, Settings(acp_agents={"hostile": agent}, **settings),
                        default_client(), check_model=check_model, workspace=workspace)


async def worked(store: Store, models: ScriptedModels, workspace: Path, *argv: str,
                 timeout: float = 60, **settings: Any) -> str:
    """A session whose root hands one task to acp:hostile, run until quiet; the root's id."""

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if len(messages) <= 2:
            return reply(None, ("task_create", {"tasks": [
                {"title": "Work", "prompt": "Work", "assigned_to": "acp:hostile"}]}))
        return reply("heard back")

    models.on("root", root)
    runtime = worker_runtime(store, workspace, *argv, **settings)
    try:
        session = await runtime.start_session("Go.", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(session.id), timeout)
        return session.id
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_worker_flooding_updates_records_at_most_500(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    root = await worked(store, models, tmp_path, "flood", "3000")
    child = f"{root}.1"
    assert query(db_path, "SELECT count(*) FROM events WHERE thread_id = ? AND type = "
                 "'tool_call'", child) == [(500,)]
    assert query(db_path, "SELECT status FROM tasks") == [("completed",)]
    ((answer,),) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                         "WHERE thread_id = ? AND type = 'agent_message'", child)
    assert answer.startswith("flooded") and "2,500 updates not recorded" in answer


async def test_a_worker_sending_one_long_message_is_heard_and_kept_capped(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    """A megabyte in one JSON-RPC line (a file's content, say) passes asyncio's 64 KiB line
    limit; what is kept of the answer stays capped."""
    root = await worked(store, models, tmp_path, "big", str(2**20))
    assert query(db_path, "SELECT status FROM tasks") == [("completed",)]
    ((answer,),) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                         "WHERE thread_id = ? AND type = 'agent_message'", f"{root}.1")
    assert answer.startswith("x" * 1000) and len(answer) < MAX_TEXT_CHARACTERS + 1000


async def test_a_worker_sending_a_line_over_the_cap_fails_its_turn_with_the_reason(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    await worked(store, models, tmp_path, "big", str(MAX_MESSAGE_BYTES + 1))
    assert time.monotonic() - began < 30
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    notes = [note for (note,) in query(db_path, "SELECT content FROM task_notes")]
    assert any(f"ACP agent 'hostile' sent a message over {MAX_MESSAGE_BYTES // 2**20} MB "
               "(lace reads no longer one)" in note for note in notes), notes


async def test_a_worker_writing_for_ever_without_a_newline_is_ended_at_the_cap(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    await worked(store, models, tmp_path, "endless")
    assert time.monotonic() - began < 30  # not the 30-minute turn timeout
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    notes = [note for (note,) in query(db_path, "SELECT content FROM task_notes")]
    assert any("sent a message over 16 MB" in note for note in notes), notes


async def test_a_worker_that_hangs_is_failed_at_the_turn_timeout(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    await worked(store, models, tmp_path, "hang", str(tmp_path / "cancelled"),
                 limits=Limits(turn_timeout_s=5))
    assert time.monotonic() - began < 30
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    assert any("ACP agent 'hostile' did not answer in time" in note for (note,) in query(
        db_path, "SELECT content FROM task_notes"))


async def test_a_worker_asking_beyond_its_powers_is_refused_without_asking(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    root = await worked(store, models, tmp_path, "ask", "execute", acp_tools=["file_read"],
                        tools=ToolSettings(policy={"bash": "allow"}))
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                 "thread_id = ? AND type = 'agent_message'", f"{root}.1") == [("told no",)]
    assert query(db_path, "SELECT count(*) FROM approvals") == [(0,)]


async def test_a_workers_file_requests_stay_inside_the_workspace(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("inside\n")
    (tmp_path / "outside.txt").write_text("not for the worker\n")
    root = await worked(store, models, workspace, "files", str(tmp_path / "outside.txt"),
                        tools=ToolSettings(policy={"file_write": "allow"}))
    ((answer,),) = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                         "WHERE thread_id = ? AND type = 'agent_message'", f"{root}.1")
    assert "[read inside]" in answer
    assert "not for the worker" not in answer
    assert "is not an absolute path inside the workspace" in answer
    assert (workspace / "out.txt").read_text() == "from the worker\n"


def assigns_evil(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    if messages[-1]["role"] == "tool":
        return ScriptedReply(f"result: {messages[-1]['content'][:200]}")
    return ScriptedReply(tool_calls=[("task_create", {"tasks": [
        {"title": "Evil", "prompt": "x", "assigned_to": "acp:evil"}]})])


@pytest.mark.slow
def test_an_untrusted_repository_cannot_start_its_acp_agent(tmp_path: Path) -> None:
    repo, marker, home = tmp_path / "repo", tmp_path / "agent-ran", tmp_path / "home"
    repo.mkdir()
    home.mkdir(mode=0o700)
    (repo / "lace.toml").write_text(
        f'[acp_agents.evil]\ncommand = "{sys.executable}"\n'
        f'args = ["-c", "open({str(marker)!r}, \'w\').write(\'ran\')"]\n')
    with FakeOpenAI(assigns_evil) as fake:
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-fake-0123456789"}
        done = lace_at(repo, home, "run", "go", "--model", "openai/fake", **env)
        assert done.returncode == 0, done.stderr
        assert not marker.exists()
        assert "No ACP agent 'evil' in [acp_agents]" in done.stdout
        assert lace_at(repo, home, "trust", "--yes").returncode == 0
        done = lace_at(repo, home, "run", "go", "--model", "openai/fake", **env)
    assert marker.read_text() == "ran"  # trusted: its command is lace's to start


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def assigns_hang(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    if messages[-1]["role"] == "tool":
        return ScriptedReply("waiting")
    return ScriptedReply(tool_calls=[("task_create", {"tasks": [
        {"title": "Hang", "prompt": "x", "assigned_to": "acp:hang"}]})])


@pytest.mark.slow
def test_no_acp_agent_outlives_lace_even_killed(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", tmp_path / "hang"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'[acp_agents.hang]\ncommand = "{sys.executable}"\nargs = ["{AGENT}", "hang", '
        f'"{marker}"]\n')
    with FakeOpenAI(assigns_hang) as fake:
        lace = lace_popen(
            [sys.executable, "-m", "lace", "run", "go", "--model", "openai/fake"], cwd=tmp_path,
            env=lace_env(home, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-fake-0123456"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            pid_file = marker.with_suffix(".pid")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not pid_file.exists():
                time.sleep(0.1)
            agent = int(pid_file.read_text())
            assert alive(agent)
            lace.kill()  # SIGKILL: no code of lace runs
            lace.wait(10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and alive(agent):
                time.sleep(0.1)
            assert not alive(agent)
        finally:
            lace.kill()
            lace.wait(10)


@pytest.mark.parametrize("stdin", ["/dev/null", "a-file"])
def test_lace_acp_on_a_file_says_so_in_one_line_and_writes_nothing(tmp_path: Path,
                                                                  stdin: str) -> None:
    """Started with a file (or /dev/null) as stdin, as a script might by mistake: the event
    loop cannot watch it (lace acp printed tracebacks, then hung with its threads alive)."""
    source = Path(stdin) if stdin.startswith("/") else tmp_path / stdin
    if not source.exists():
        source.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize"}) + "\n")
    home = tmp_path / "home"
    with source.open("rb") as given:
        done = subprocess.run([sys.executable, "-m", "lace", "acp"], stdin=given,
                              capture_output=True, text=True, env=lace_env(home), timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["lace: error: lace acp speaks ACP on pipes, as an "
                                        "editor starts it; its stdin is a file here"]
    assert done.stdout == "" and not home.exists()
