"""No MCP server outlives lace: `lace run` stops its servers when it ends quietly, when it
times out, and on SIGTERM, even a server that ignores the end of its stdin; and `lace mcp
list` shows what a person configured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import McpServer
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.lace_forks import lace_popen, run_lace
from tests.mcp_servers.harness import NOTES_SERVER, alive, pids_in
from tests.processes import SHORT_THEN_LONGER_TIMEOUTS, lace_env, trust_folder


def config(folder: Path, pid_file: Path) -> None:
    (folder / "lace.toml").write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES_SERVER}"]\n'
        f'env = {{ NOTES_PID_FILE = "{pid_file}", NOTES_STUBBORN = "1" }}\n'
        '[tools.policy]\n"mcp__notes__*" = "allow"\n')


def calling(tool: str, arguments: dict[str, Any]) -> Any:
    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return ScriptedReply(text=f"result: {messages[-1]['content']}")
        return ScriptedReply(text=None, tool_calls=[(tool, arguments)])

    return script


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[Path]:
    """The pid file; whatever it names is killed after the test, pass or fail."""
    pid_file = tmp_path / "pids"
    yield pid_file
    for pid in pids_in(pid_file):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_lace(folder: Path, fake: FakeOpenAI, *argv: str) -> subprocess.Popen[str]:
    trust_folder(folder, folder / "home")
    env = lace_env(folder / "home", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
    return lace_popen([sys.executable, "-m", "lace", "run", "go", "--model",
                             "openai/fake", *argv], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_server(pid_file: Path, process: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 60
    while not pids_in(pid_file):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no server started: {process.communicate()}")
        time.sleep(0.05)
    (pid,) = pids_in(pid_file)
    return pid


def test_a_quiet_run_stops_its_server(tmp_path: Path, leftovers: Path) -> None:
    config(tmp_path, leftovers)
    with (tmp_path / "lace.toml").open("a") as file:
        file.write('[mcp_servers.missing]\ncommand = "/nonexistent/server"\n')
    with FakeOpenAI(calling("mcp__notes__pid", {})) as fake:
        process = start_lace(tmp_path, fake)
        out, err = process.communicate(timeout=120)
    (pid,) = pids_in(leftovers)
    assert (process.returncode, out) == (0, f"result: {pid}\n"), err
    assert not alive(pid)
    assert ("! MCP server missing failed to start: command not found: /nonexistent/server; its "
            "tools are left out, and it is tried again in 60 s\n") in err


@pytest.mark.parametrize("ending", ["timeout", "sigterm"])
def test_a_run_cut_short_stops_its_server(tmp_path: Path, leftovers: Path, ending: str) -> None:
    config(tmp_path, leftovers)
    with FakeOpenAI(calling("mcp__notes__slow", {"seconds": 600})) as fake:
        if ending == "timeout":
            # the server must start before the timeout: a longer one if a loaded machine was
            # too slow for the first (a run that timed out first started nothing to stop)
            for timeout in SHORT_THEN_LONGER_TIMEOUTS:
                process = start_lace(tmp_path, fake, "--timeout", timeout)
                process.wait(timeout=120)
                if pids_in(leftovers):
                    break
        else:
            process = start_lace(tmp_path, fake)
        pid = wait_for_server(leftovers, process)
        if ending == "sigterm":
            deadline = time.monotonic() + 60
            while not fake.exchanges:  # the model asked for the slow call: it is under way
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=120)
    assert process.returncode == (3 if ending == "timeout" else 128 + signal.SIGTERM), err
    assert not alive(pid)
    assert "resume with lace run --continue" in err


def test_mcp_list_shows_each_server_and_its_tools(tmp_path: Path, leftovers: Path) -> None:
    config(tmp_path, leftovers)
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "missing": {"command": "/nonexistent/server"},
        "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}))
    trust_folder(tmp_path, tmp_path / "home")
    done = run_lace(["mcp", "list"], env=lace_env(tmp_path / "home"), cwd=tmp_path, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert lines[0] == "missing  (/nonexistent/server)  failed to start: command not found: " \
                       "/nonexistent/server"
    assert lines[1] == f"notes  ({sys.executable} {NOTES_SERVER})  9 tool(s)"
    assert "  mcp__notes__echo  [allow]  Return the text unchanged." in lines
    assert done.stderr.splitlines() == [
        f"lace: warning: MCP server 'old' in {tmp_path / '.mcp.json'} left out: type sse is "
        "not supported (streamable HTTP is: type http)"]
    assert all(not alive(pid) for pid in pids_in(leftovers)) and pids_in(leftovers)


def test_mcp_list_with_nothing_configured_and_a_bad_entry(tmp_path: Path) -> None:
    env = lace_env(tmp_path / "home")
    done = run_lace(["mcp", "list"], env=env, cwd=tmp_path, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("No MCP servers configured")
    home_config = tmp_path / "home" / "config.toml"  # the person's own file
    home_config.parent.mkdir(mode=0o700, exist_ok=True)
    home_config.write_text('[mcp_servers.both]\ncommand = "x"\nurl = "http://a"\n')
    done = run_lace(["mcp", "list"], env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"lace: error: Bad setting mcp_servers.both in {home_config}: Value "
                           "error, give either command (a server lace starts) or url (one it "
                           "reaches over streamable HTTP)\n")


async def test_the_app_warns_of_a_server_that_failed_and_quitting_stops_the_others(
        db_path: Path, tmp_path: Path, models: Any) -> None:
    import asyncio

    from lace.config import Settings
    from lace.tui.factory import create_app
    from tests.mcp_servers.harness import notes_stdio
    from tests.piloted_app import SIZE
    from tests.scripted import reply

    pid_file = tmp_path / "app-pids"
    settings = Settings(mcp_servers={
        "missing": McpServer(command="/nonexistent/server"),
        "notes": notes_stdio(NOTES_PID_FILE=str(pid_file), NOTES_STUBBORN="1")})
    models.on("root", lambda messages: reply("hello"))
    app = create_app(db=str(db_path), model="scripted/root", settings=settings,
                     workspace=tmp_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*"hi", "enter")
            for _ in range(600):
                said = [notification.message for notification in app._notifications]
                if said and pids_in(pid_file):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("no warning, or the notes server never started")
            assert said == ["MCP server missing failed to start: command not found: "
                            "/nonexistent/server; its tools are left out, and it is tried "
                            "again in 60 s"]
            (pid,) = pids_in(pid_file)
            assert alive(pid)
            await pilot.press("ctrl+c")
            await pilot.pause()
        assert not alive(pid)
    finally:
        app.runtime.close()
        for pid in pids_in(pid_file):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
