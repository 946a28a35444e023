"""`lace mcp serve --http` reached by another local user: no token, a wrong one, the token in the
wrong place, many requests at once; none acts on the board. The person's client, with the token,
does."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.lace_forks import lace_popen, run_lace
from tests.processes import free_port, lace_env

OWN_TOKEN = "the-persons-own-mcp-token-0123456789"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "intruder", "version": "1"}}}
CREATE = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "task_create", "arguments": {"tasks": [
        {"title": "Spend", "prompt": "Spend the owner's keys.",
         "assigned_to": "new:demo/worker"}]}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class Serving:
    """A running `lace mcp serve --http`: its endpoint, the token it printed, its home."""

    url: str
    token: str
    home: Path
    process: subprocess.Popen[bytes]


@contextmanager
def mcp_http(home: Path, **env: str) -> Iterator[Serving]:
    """`lace mcp serve --http` on a free loopback port until the block ends."""
    port = free_port()
    log = home.parent / f"mcp-{port}.log"
    with log.open("wb") as stderr:
        process = lace_popen(
            [sys.executable, "-m", "lace", "mcp", "serve", "--http", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=stderr, env=lace_env(home, **env))
    try:
        deadline = time.monotonic() + 60
        while "lace mcp serve (pid" not in log.read_text():  # printed once it listens
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "never listened"
            time.sleep(0.05)
        printed = re.search(r"Bearer ([A-Za-z0-9_-]{16,})", log.read_text())
        yield Serving(f"http://127.0.0.1:{port}/mcp", printed.group(1) if printed else "", home,
                      process)
    finally:
        process.terminate()
        process.wait(30)


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> int:
    return httpx.post(url, json=body, headers={**ACCEPT, **headers}).status_code


def board_rows(home: Path) -> list[Any]:
    with sqlite3.connect(home / "lace.db") as connection:
        return [connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
                for table in ("threads", "tasks", "inbox", "events")]


async def flood(url: str, count: int, headers: dict[str, str]) -> list[int]:
    async with httpx.AsyncClient() as client:
        answers = await asyncio.gather(*(client.post(url, json=body, headers={
            **ACCEPT, **headers}) for body in [INITIALIZE, CREATE] * (count // 2)))
    return [answer.status_code for answer in answers]


@pytest.mark.slow
def test_a_request_without_the_bearer_token_is_refused_and_acts_on_nothing(
        tmp_path: Path) -> None:
    with mcp_http(tmp_path / "home") as serving:
        url, token = serving.url, serving.token
        assert len(token) >= 32, "no token printed at start"
        before = board_rows(serving.home)
        refused = [
            post(url, INITIALIZE, {}),
            post(url, CREATE, {}),
            post(url, INITIALIZE, {"Authorization": f"Bearer wrong-{token}"}),
            post(url, INITIALIZE, {"Authorization": f"Bearer {token[:-1]}"}),
            post(url, INITIALIZE, {"Authorization": "Bearer"}),
            post(url, INITIALIZE, {"Authorization": token}),  # no scheme
            post(url, INITIALIZE, {"Authorization": f"Basic {token}"}),
            post(f"{url}?token={token}", INITIALIZE, {}),  # the wrong place
            post(url, INITIALIZE, {"Cookie": f"token={token}"}),
            post(url, INITIALIZE, {"X-Api-Key": token}),
        ]
        many = asyncio.run(flood(url, 40, {}))
        after = board_rows(serving.home)
        allowed = post(url, INITIALIZE, {"Authorization": f"Bearer {token}"})
        assert serving.process.poll() is None
    assert refused == [401] * len(refused)
    assert many == [401] * 40
    assert after == before
    assert allowed == 200


@pytest.mark.slow
async def test_the_persons_client_with_the_token_acts_on_the_board(tmp_path: Path) -> None:
    with mcp_http(tmp_path / "home") as serving:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {serving.token}"})
        async with http, Client(streamable_http_client(serving.url, http_client=http)) as client:
            result = await client.call_tool("task_create", {"tasks": [
                {"title": "Review", "prompt": "Review it.", "assigned_to": "human"}]})
    assert not result.is_error and "(assigned to human)" in str(result.content[0])


@pytest.mark.slow
def test_the_token_is_kept_private_and_reused_and_the_environment_sets_it(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    with mcp_http(home) as first:
        pass
    folder, file = home / "tokens", home / "tokens" / "mcp"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert file.read_text().strip() == first.token
    with mcp_http(home) as second:
        assert second.token == first.token
    with mcp_http(home, LACE_MCP_TOKEN=OWN_TOKEN) as own:
        assert own.token == ""  # the person's own token is not printed back
        assert post(own.url, INITIALIZE, {"Authorization": f"Bearer {first.token}"}) == 401
        assert post(own.url, INITIALIZE, {"Authorization": f"Bearer {OWN_TOKEN}"}) == 200
    logs = "".join(path.read_text() for path in tmp_path.glob("mcp-*.log"))
    assert logs.count(first.token) == 2 and OWN_TOKEN not in logs  # once per start


@pytest.mark.slow
def test_a_bad_token_in_the_environment_is_one_line(tmp_path: Path) -> None:
    run = run_lace(["mcp", "serve", "--http", f"127.0.0.1:{free_port()}"],
                   env=lace_env(tmp_path / "home", LACE_MCP_TOKEN="short"), timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("lace: error: LACE_MCP_TOKEN") and run.stderr.count("\n") == 1
