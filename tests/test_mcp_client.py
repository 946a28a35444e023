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

from lace.config import load_settings
from lace.llm.types import ScriptedReply
from lace.runtime.supervisor import Supervisor
from lace.store import Store
from tests.conftest import query
from tests.mcp_servers.harness import alive, notes_over_http, notes_stdio, runtime_with
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


async def run_session(runtime: Supervisor, prompt: str = "go") -> str:
    root = await runtime.start_session(prompt, "scripted/root")
    try:
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    finally:
        await runtime.stop()
        runtime.close()
    return root.id


async def test_an_agent_calls_a_stdio_server_and_its_tools_are_in_the_first_request(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = runtime_with(store, {"notes": notes_stdio()})
    seen: list[list[str]] = []
    script = calls_in_turn(("mcp__notes__echo", {"text": "hello <b>[red]x"}))

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        definitions = asyncio.get_event_loop()  # noqa: F841 (keeps the loop explicit)
        seen.append([m["role"] for m in messages])
        return script(messages)

    models.on("root", root)
    await run_session(runtime)
    assert query(db_path, RESULTS) == [
        ("mcp__notes__echo", "notes", 0, "hello <b>[red]x")]
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE type = 'agent_message' ORDER BY id DESC LIMIT 1")
    assert answer == "hello <b>[red]x"
