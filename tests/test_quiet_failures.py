"""Failures that used to be quiet, driven as a person meets them: `lace mcp list` with a
`lace.toml` or an `.mcp.json` that waits for trust, Ctrl+C on `lace mcp serve --http`, and a
task released from the command line while no lace process runs the board (issue 33, item 12), and
Ctrl+C while lace starts."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.config_files import repository
from tests.conftest import query, run_cli
from tests.lace_forks import lace_popen, run_lace
from tests.processes import free_port, lace_env, trust_folder

CaptureFixture = pytest.CaptureFixture[str]
TOKEN = "quiet-failures-test-token-0123456789"


def untrusted_mcp_json(folder: Path, marker: Path) -> None:
    """An `.mcp.json` whose one server would leave `marker` behind if it were ever started."""
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "notes": {"command": "touch", "args": [str(marker)]},
        "broken": {"command": 42}}}))


def test_mcp_list_shows_servers_waiting_for_trust_as_pending(tmp_path: Path) -> None:
    folder, marker = tmp_path / "project", tmp_path / "started"
    folder.mkdir()
    untrusted_mcp_json(folder, marker)
    env = lace_env(tmp_path / "home")
    shown = run_lace(["mcp", "list"], env=env, cwd=folder, timeout=60)
    listed = run_lace(["mcp", "list", "--json"], env=env, cwd=folder, timeout=60)
    assert (shown.returncode, listed.returncode) == (0, 0), shown.stderr + listed.stderr
    trust = f"lace trust {folder}"
    assert shown.stdout.splitlines() == [
        f"notes  (touch {marker})  pending: not started until you trust it ({trust})",
        f"broken  ((unusable entry))  pending: not started until you trust it ({trust})"]
    assert [(server["name"], server["status"], server["started"], server["trust_with"])
            for server in json.loads(listed.stdout)] == [
        ("notes", "pending", False, trust), ("broken", "pending", False, trust)]
    assert f"review and trust with: {trust}" in listed.stderr
    assert not marker.exists()  # listed, never started


def test_mcp_list_in_a_repository_with_an_untrusted_lace_toml_lists_its_servers_as_pending(
        tmp_path: Path) -> None:
    marker = tmp_path / "started"
    _, deep = repository(tmp_path, f'[mcp_servers.notes]\ncommand = "touch"\n'
                                   f'args = ["{marker}"]\n')
    shown = run_lace(["mcp", "list"], env=lace_env(tmp_path / "home"), cwd=deep, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (f"notes  (touch {marker})  pending: not started until you trust it "
                            f"(lace trust {deep})\n")  # not "No MCP servers configured"
    assert not marker.exists()
    trusted = run_lace(["trust", "--yes"], env=lace_env(tmp_path / "home"), cwd=deep,
                       timeout=60)  # the command it names trusts the repository's lace.toml
    assert trusted.returncode == 0, trusted.stderr
    started = run_lace(["mcp", "list", "--json"], env=lace_env(tmp_path / "home"), cwd=deep,
                       timeout=60)
    assert [server["status"] for server in json.loads(started.stdout)] == ["failed"]
    assert marker.exists()  # trusted, it is started as a run would start it


def test_a_trusted_mcp_json_is_no_longer_pending(tmp_path: Path) -> None:
    folder, marker = tmp_path / "project", tmp_path / "started"
    folder.mkdir()
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "missing": {"command": "/nonexistent/server"}}}))
    trust_folder(folder, tmp_path / "home")
    done = run_lace(["mcp", "list", "--json"], env=lace_env(tmp_path / "home"), cwd=folder,
                    timeout=60)
    assert done.returncode == 1  # started as a run would, and failed
    assert [(server["name"], server["status"]) for server in json.loads(done.stdout)] == [
        ("missing", "failed")]
    assert not marker.exists()


def wait_until_listening(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "never listened"
            time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_mcp_serve_http_ends_cleanly_on_ctrl_c(tmp_path: Path, signum: int) -> None:
    port = free_port()
    process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve", "--http",
                                f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env=lace_env(tmp_path / "home", LACE_MCP_TOKEN=TOKEN))
    try:
        wait_until_listening(process, port)
        answered = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={
            "Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}"},
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}},
            timeout=60)  # a loaded machine: the server imports its model SDKs meanwhile
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert answered.status_code == 200
    assert (process.returncode, out) == (0, ""), err
    assert "Traceback" not in err and "Error" not in err, err
    assert len(err.splitlines()) == 1 and err.startswith("lace mcp serve (pid "), err


def test_releasing_a_task_with_no_process_running_says_how_to_run_it(
        capsys: CaptureFixture, db_path: Path) -> None:
    db = str(db_path)
    code, out, err = run_cli(capsys, "task", "add", "Gather the facts", "--assign", "human",
                             "--db", db, "--json")
    assert code == 0 and "no lace process runs this board" not in err
    blocker = json.loads(out)["tasks"][0]["id"]
    session = json.loads(out)["session"]
    code, out, err = run_cli(capsys, "task", "add", "Write it up", "--assign",
                             "new:demo/worker", "--blocked-by", blocker, "--db", db)
    assert code == 0 and "waits for" in out and "no lace process" not in err  # nothing to run
    code, out, err = run_cli(capsys, "task", "complete", blocker, "Here they are.", "--db", db)
    (helper,), = query(db_path, "SELECT thread_id FROM agent_metadata WHERE parent_thread_id "
                                "IS NOT NULL")
    assert code == 0 and out.startswith(f"Completed task {blocker}")
    assert err == (f"lace: no lace process runs this board, so {helper} waits for one; start "
                   f"one with: lace run --continue {session} (or lace worker --session "
                   f"{session}, which stays)\n")
    code, out, err = run_cli(capsys, "run", "--continue", session, "--db", db)
    assert code == 0, err  # the person's board: its root owes no answer
    assert query(db_path, "SELECT status FROM tasks WHERE title = 'Write it up'") == [
        ("completed",)]


@pytest.mark.parametrize(("module", "argv"), [
    ("lace.cli.commands", ["sessions"]),  # the command line is being parsed
    ("lace.cli.sessions", ["sessions"]),  # its command's module is being imported
    ("lace.cli.run", ["run", "Say hi."]),
], ids=["parsing", "sessions", "run"])
def test_ctrl_c_while_lace_starts_says_so_in_one_line(tmp_path: Path, module: str,
                                                        argv: list[str]) -> None:
    """It was a traceback and death by SIGINT while the command line was parsed, and a silent
    130 while the command's module was imported."""
    home = tmp_path / "home"
    ended = run_lace([module, *argv], env=lace_env(home), module="tests.interrupted_start",
                     timeout=60)
    assert (ended.returncode, ended.stdout, ended.stderr) == (130, "", "lace: interrupted\n")
    assert not home.exists()
