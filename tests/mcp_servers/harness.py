"""Starting the tests' MCP servers: the notes server over stdio or on a free port of 127.0.0.1,
and a runtime configured with them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lace.config import Limits, McpServer, Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.processes import free_port

NOTES_SERVER = Path(__file__).with_name("notes_server.py")
QUICK = {"retry_base_s": 0.001, "retry_max_s": 0.005, "model_retries": 2}


def notes_stdio(**env: str) -> McpServer:
    """The notes server, started by lace over stdio."""
    return McpServer(command=sys.executable, args=[str(NOTES_SERVER)], env=env)


def runtime_with(store: Store, servers: dict[str, McpServer],
                 policy: dict[str, Any] | None = None, *, tools: ToolSettings | None = None,
                 **limits: Any) -> Runtime:
    """A runtime whose settings name these servers (and this tool policy)."""
    settings = Settings(limits=Limits(**{**QUICK, **limits}),
                        tools=tools or ToolSettings(policy=policy or {}), mcp_servers=servers)
    return open_runtime(store, settings, default_client(), check_model=check_model)


@contextlib.contextmanager
def notes_over_http(*, json_response: bool = False, **env: str) -> Iterator[str]:
    """The notes server on a free port of 127.0.0.1 (answering in JSON bodies, not server-sent
    events, with `json_response`); yields its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(NOTES_SERVER), "--http", str(port),
                                *(["--json"] if json_response else [])],
                               env={**os.environ, **env}, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the notes server did not listen (exit {process.poll()})")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


Script = Callable[[list[dict[str, Any]]], Any]
