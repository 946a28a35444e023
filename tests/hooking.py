"""Helpers for the hooks tests: real POSIX sh hook scripts written to a folder, a runtime with
hooks configured over a scripted model served on 127.0.0.1, and the JSON lines hooks logged."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lace.config import Limits, McpServer, Settings, ToolSettings, WorkspaceSettings
from lace.core.records import Thread
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import RuntimeEvent, Warned
from lace.store import Store


def script(folder: Path, name: str, body: str) -> Path:
    """An executable POSIX sh script `name` in `folder`."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def logger(folder: Path, log: Path, first: str = "") -> Path:
    """A hook that appends its stdin (one JSON object) as a line of `log`, in one write, after
    running `first`."""
    return script(folder, f"log{len(first)}.sh",
                  f'{first}\nline=$(cat)\nprintf \'%s\\n\' "$line" >> "{log}"\n')


def logged(log: Path) -> list[dict[str, Any]]:
    """What the logging hook was given, one object per run."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def hook(command: Path | str, matcher: str | None = None, timeout: float | None = None,
         ) -> dict[str, Any]:
    """One `[[hooks.EVENT]]` table."""
    entry: dict[str, Any] = {"command": str(command)}
    if timeout is not None:
        entry["timeout"] = timeout
    table: dict[str, Any] = {"hooks": [entry]}
    if matcher is not None:
        table["matcher"] = matcher
    return table


def hooked_runtime(store: Store, workspace: Path, hooks: dict[str, list[dict[str, Any]]],
                   policy: dict[str, str] | None = None, *,
                   mcp_servers: dict[str, McpServer] | None = None,
                   python_tools: Sequence[Callable[..., Any]] = (),
                   workspace_settings: WorkspaceSettings | None = None, **limits: Any,
                   ) -> tuple[Runtime, list[RuntimeEvent]]:
    """A runtime with these hooks (and MCP servers, Python tools) whose agents work in
    `workspace`, and the events it publishes."""
    workspace.mkdir(exist_ok=True)
    settings = Settings(hooks=hooks, tools=ToolSettings(policy=policy or {}),
                        mcp_servers=mcp_servers or {},
                        workspace=workspace_settings or WorkspaceSettings(),
                        limits=Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=1,
                                      **limits))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                           workspace=workspace, python_tools=python_tools)
    events: list[RuntimeEvent] = []
    runtime.subscribe(events.append)
    return runtime, events


async def session_run_to_the_end(runtime: Runtime, prompt: str, model: str) -> Thread:
    """A session of `prompt` on `model` run until quiet (60 s at most); the runtime is stopped
    and closed after it, whatever happened."""
    try:
        root = await runtime.start_session(prompt, model)
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    finally:
        await runtime.stop()
        runtime.close()
    return root


def warnings(events: list[RuntimeEvent]) -> list[str]:
    """What the runtime told the person (hook errors, `systemMessage`)."""
    return [event.text for event in events if isinstance(event, Warned)]


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The tool results a model was sent."""
    return [message["content"] for message in messages if message["role"] == "tool"]


Script = Callable[[str, list[dict[str, Any]]], Any]
