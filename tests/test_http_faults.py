"""Model faults over real HTTP: litellm calls a small OpenAI-compatible server on 127.0.0.1 that
fails on purpose. Transient faults (5xx, 429, a stream dropped midway) are retried by lace with
backoff, each attempt an `llm_calls` row; when retries run out the task is blocked with a note
and its creator is told."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from tests.conftest import query
from tests.scripted import ScriptedModels, reply

ANSWER = "the whole answer, every word of it"



def worker_script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Answers plainly; a worker with a task completes it first."""
    task = next((m["content"].split("'")[1] for m in messages if m["role"] == "user"
                 and "You have been assigned task" in str(m["content"])), None)
    done = any(m["role"] == "tool" for m in messages)
    if task and not done:
        return ScriptedReply(tool_calls=[("task_complete", {"task_id": task, "message": "ok"})])
    return ScriptedReply(text=ANSWER)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(worker_script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        yield fake


async def test_server_errors_are_retried(runtime: Runtime, server: FakeOpenAI,
                                         db_path: Path) -> None:
    server.faults += ["503", "429"]
    root = await runtime.start_session("hi", "openai/fake")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    errors = [error for (error,) in query(db_path, "SELECT error FROM llm_calls ORDER BY id")]
    assert [error.split(":")[0] if error else None for error in errors] == [
        "ServiceUnavailableError", "RateLimitError", None]
    assert len(server.requests) == 3
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                          "WHERE type = 'agent_message'") == [(ANSWER,)]


async def test_a_dropped_stream_is_retried_not_kept_half(runtime: Runtime,
                                                        server: FakeOpenAI,
                                                        db_path: Path) -> None:
    server.faults.append("drop_stream")
    root = await runtime.start_session("hi", "openai/fake")
    runtime.watch(root.id)
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert all(request.get("stream") for request in server.requests)
    assert len(server.requests) == 2
    (error,), (ok,) = query(db_path, "SELECT error FROM llm_calls ORDER BY id")
    assert error.startswith("MidStreamFallbackError") and ok is None
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                          "WHERE type = 'agent_message'") == [(ANSWER,)]


async def test_errors_past_the_retries_block_the_task_and_tell_its_creator(
        runtime: Runtime, server: FakeOpenAI, models: ScriptedModels,
        db_path: Path) -> None:
    server.faults += ["500"] * 10
    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": "Over HTTP", "prompt": "p", "assigned_to": "new:openai/fake"}]}))
        if not any(m["role"] == "tool" for m in messages) else reply("noted"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert len(server.requests) == 3  # the first call and two retries (model_retries = 2)
    assert query(db_path, "SELECT status FROM agent_metadata ORDER BY thread_id") == [
        ("idle",), ("error",)]
    (status,), = query(db_path, "SELECT status FROM tasks")
    (note,), = query(db_path, "SELECT content FROM task_notes")
    assert status == "blocked" and "InternalServerError" in note
    told = query(db_path, f"SELECT kind, text FROM inbox WHERE thread_id = '{root.id}' "
                          "AND sender != 'human'")
    assert [kind for kind, _ in told] == ["status"] and "blocked" in told[0][1]


async def test_a_key_echoed_in_an_error_reaches_neither_the_database_nor_the_logs(
        runtime: Runtime, server: FakeOpenAI, db_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.echo_key = True
    server.faults += ["500"] * 3
    caplog.set_level(logging.DEBUG)
    root = await runtime.start_session("hi", "openai/fake")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    await runtime.stop()
    errors = [error for (error,) in query(db_path, "SELECT error FROM llm_calls")]
    assert len(errors) == 3 and all("[redacted]" in error for error in errors)
    for path in db_path.parent.glob("lace.db*"):
        assert secret.encode() not in path.read_bytes()
    assert secret not in caplog.text
