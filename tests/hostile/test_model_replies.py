"""A hostile or broken model: a reply of a hundred megabytes, a reply and a tool call past
what lace keeps of one reply, and a big tool call that must not be stored twice. The scripted
OpenAI-compatible server sends them over HTTP to a real `lace run`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lace.core.text import CUT_ARGUMENTS, MAX_REPLY_CHARACTERS
from lace.llm.answer_limit import MAX_ANSWER_BYTES
from lace.llm.openai_client import OpenAIClient
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from tests.conftest import query
from tests.hostile.measured import Measured, measured_lace
from tests.processes import lace_env
from tests.root_turn import first_root_answer
from tests.scripted import ScriptedModels, reply

MB = 1 << 20
Script = Callable[[str, list[dict[str, Any]]], ScriptedReply]


def run_against(tmp_path: Path, script: Script, *argv: str,
                requests: list[dict[str, Any]] | None = None) -> Measured:
    """`lace run` (or `*argv`) in the workspace `tmp_path/work` against the scripted server."""
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    with FakeOpenAI(script) as fake:
        env = lace_env(tmp_path / "home", OPENAI_BASE_URL=fake.base_url,
                       OPENAI_API_KEY="not-a-key")
        ran = measured_lace(list(argv or ["run", "go", "--model", "openai/fake", "--yes"]), env,
                            workspace)
        if requests is not None:
            requests.extend(fake.requests)
    return ran


def write_then_say(content: str, then: str) -> Script:
    """A model that writes `big.txt` with `content` once, then answers `then`."""

    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] in ("user", "system"):
            return ScriptedReply(text=None, tool_calls=[
                ("file_write", {"path": "big.txt", "content": content})])
        return ScriptedReply(text=then)

    return script


def test_a_100_mb_reply_is_refused_at_the_read_limit_in_bounded_memory(tmp_path: Path) -> None:
    ran = run_against(tmp_path, lambda model, messages: ScriptedReply(text="x" * (100 * MB)))
    print(f"peak {ran.peak_mb:.0f} MB")
    assert ran.returncode == 1, ran.err
    assert f"the answer is more than {MAX_ANSWER_BYTES // MB} MB" in ran.err
    db = tmp_path / "home" / "lace.db"
    ((error,),) = query(db, "SELECT error FROM llm_calls")
    assert "AnswerTooLarge" in error
    assert query(db, "SELECT max(length(data)) FROM events")[0][0] < 10_000
    assert ran.peak_mb < 250


def test_a_reply_and_a_call_past_the_cap_are_stored_cut_with_a_note(tmp_path: Path) -> None:
    content, answer = "y" * (3 * MB), "z" * (3 * MB)
    ran = run_against(tmp_path, write_then_say(content, answer))
    assert ran.returncode == 0, ran.err
    assert not (tmp_path / "work" / "big.txt").exists()
    db = tmp_path / "home" / "lace.db"
    ((arguments, result),) = query(
        db, "SELECT c.data ->> '$.arguments', r.data ->> '$.message.content' FROM events c "
            "JOIN events r ON r.data ->> '$.call_id' = c.data ->> '$.call_id' "
            "WHERE c.type = 'tool_call' AND r.type = 'tool_result'")
    assert len(arguments) < 1000 and result == (
        "Invalid arguments for file_write: the arguments were 3,145,762 characters, past the "
        f"{MAX_REPLY_CHARACTERS:,} lace keeps of one reply, and were cut. Send less in one call "
        "(a big file in parts).")
    text = query(db, "SELECT data ->> '$.message.content' FROM events WHERE type = "
                     "'agent_message' ORDER BY id DESC LIMIT 1")[0][0]
    assert text == "z" * MAX_REPLY_CHARACTERS + (
        f"\n\n[lace cut this reply here: {3 * MB - MAX_REPLY_CHARACTERS:,} more characters; "
        f"it keeps at most {MAX_REPLY_CHARACTERS:,} of one reply]")
    assert ran.out == text + "\n"


def test_a_streamed_reply_past_the_cap_is_cut_with_a_note(
        monkeypatch: Any, tmp_path: Path) -> None:
    words = " ".join(["w" * (MB // 2)] * 6)
    shown: list[str] = []
    with FakeOpenAI(lambda model, messages: ScriptedReply(text=words)) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-key")
        reply = asyncio.run(OpenAIClient().complete(
            "openai/fake", [{"role": "user", "content": "go"}], [], on_delta=shown.append))
    assert reply.content is not None and reply.content.startswith(words[:MAX_REPLY_CHARACTERS])
    cut = len(words) - MAX_REPLY_CHARACTERS
    assert reply.content.endswith(f"[lace cut this reply here: {cut:,} more characters; it "
                                  f"keeps at most {MAX_REPLY_CHARACTERS:,} of one reply]")


def test_a_streamed_call_past_what_the_text_left_is_cut(
        monkeypatch: Any, tmp_path: Path) -> None:
    text, arguments = "t" * 600_000, json.dumps({"title": "a" * 600_000})
    with FakeOpenAI(lambda model, messages: ScriptedReply(
            text=text, tool_calls=[("task_create", arguments)])) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-key")
        reply = asyncio.run(OpenAIClient().complete(
            "openai/fake", [{"role": "user", "content": "go"}], [], on_delta=lambda _: None))
    assert reply.content == text
    assert json.loads(reply.tool_calls[0].arguments) == {CUT_ARGUMENTS: (
        f"the arguments were {len(arguments):,} characters, past the "
        f"{MAX_REPLY_CHARACTERS:,} lace keeps of one reply, and were cut. Send less in one call "
        "(a big file in parts).")}


def test_a_big_tool_call_is_stored_once_and_replayed_whole(tmp_path: Path) -> None:
    content = "q" * 900_000
    ran = run_against(tmp_path, write_then_say(content, "written"))
    assert (ran.returncode, ran.out) == (0, "written\n"), ran.err
    assert (tmp_path / "work" / "big.txt").read_text() == content
    db = tmp_path / "home" / "lace.db"
    (stored,), = query(db, "SELECT sum(length(data)) FROM events WHERE type IN "
                           "('agent_message', 'tool_call')")
    assert len(content) < stored < len(content) + 10_000
    ((session,),) = query(db, "SELECT id FROM threads WHERE parent_id IS NULL")
    requests: list[dict[str, Any]] = []
    again = run_against(tmp_path, write_then_say(content, "again"),
                        "run", "--continue", session, "once more", "--yes", requests=requests)
    assert again.returncode == 0, again.err
    calls = [call for message in requests[0]["messages"]
             for call in message.get("tool_calls") or []]
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "big.txt",
                                                             "content": content}


async def test_a_reply_through_litellm_is_kept_within_the_same_cap(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    """litellm's path (every provider but `openai/`) keeps a reply within the same budget."""
    models.on("root", lambda messages: reply("z" * (2 * MB)))
    session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert answer == "z" * MAX_REPLY_CHARACTERS + (
        f"\n\n[lace cut this reply here: {2 * MB - MAX_REPLY_CHARACTERS:,} more characters; "
        f"it keeps at most {MAX_REPLY_CHARACTERS:,} of one reply]")
    assert query(db_path, "SELECT max(length(data)) FROM events WHERE thread_id = ?",
                 session.id)[0][0] < MAX_REPLY_CHARACTERS + 500
