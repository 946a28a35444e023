"""Text from models and tools: a lone surrogate is replaced where it enters lace, so a thread never
wedges, and control characters are escaped on every line a person reads (`lace run`, its progress
lines, `lace tasks`, `threads`, `show`, `approvals`, `stop`)."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.cli.progress import progress_printer
from lace.core.records import NewAgent
from lace.core.text import printable, printable_json, valid_text
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import ApprovalRequested, EventAppended, ThreadSpawned, TurnFailed
from lace.store import Store
from tests.conftest import new_session, query
from tests.conftest import run_cli as lace
from tests.scripted import ScriptedModels, reply, tools_called

CaptureFixture = pytest.CaptureFixture[str]
HOSTILE = "a\x1b[2Kb\x1b]52;c;ZXZpbA==\x07c\u202ed\x9be\rf\ud800g"
"""Erase the line, set the clipboard (OSC 52), reverse the text, an 8-bit CSI, a carriage return
and a lone surrogate."""
CONTROLS = HOSTILE.replace("\ud800", "")
"""The same without the surrogate, which a text column cannot hold."""
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff]")


@pytest.fixture(autouse=True)
def test_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_TEST_PROVIDERS", "1")


def assert_printable(text: str) -> None:
    assert RAW_CONTROL.search(text) is None, repr(text)


# where text enters lace: the model's reply

def surrogate_script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Lone surrogates in the text, raw in one call's arguments and JSON-escaped in another's."""
    users = [m for m in messages if m["role"] == "user"]
    answered = any(m["role"] == "tool" for m in messages)
    if len(users) == 1 and not answered:
        return ScriptedReply(text="thinking \ud800", tool_calls=[
            ("task_create", '{"tasks": [{"title": "raw \ud800", "prompt": "p"}]}'),
            ("task_create", {"tasks": [{"title": "escaped \udfff", "prompt": "p"}]})])
    if len(users) == 1:
        return ScriptedReply(text="first answer \udc80")
    return ScriptedReply(text="second answer")


@pytest.fixture
def surrogate_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(surrogate_script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        yield fake


async def test_a_lone_surrogate_from_the_model_never_wedges_the_thread(
        runtime: Runtime, surrogate_server: FakeOpenAI, db_path: Path) -> None:
    root = await runtime.start_session("hi", "openai/fake")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    await runtime.send(root.id, "and now?")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert query(db_path, "SELECT error FROM llm_calls") == [(None,)] * 3
    assert query(db_path, "SELECT status FROM agent_metadata") == [("idle",)]
    assert sorted(query(db_path, "SELECT title FROM tasks")) == [("escaped \ufffd",),
                                                                 ("raw \ufffd",)]
    contents = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                              "WHERE type = 'agent_message'")
    assert contents == [("thinking \ufffd",), ("first answer \ufffd",), ("second answer",)]
    (arguments, _), = query(db_path, "SELECT json_extract(data, '$.arguments'), id FROM events "
                                     "WHERE type = 'tool_call' ORDER BY id LIMIT 1")
    assert "raw \ufffd" in arguments
    resent = json.dumps(surrogate_server.requests[-1]["messages"], ensure_ascii=False)
    assert "\ufffd" in resent and "second answer" not in resent


async def test_a_thread_stored_with_a_surrogate_by_an_earlier_lace_goes_on(
        runtime: Runtime, surrogate_server: FakeOpenAI, store: Store,
        db_path: Path) -> None:
    surrogate_server.script = lambda model, messages: ScriptedReply(text="going on")
    with store.transaction() as tx:  # what lace wrote before text was checked where it enters
        session = tx.threads.create_session(provider="openai", model="fake")
        tx.events.append(session.id, "agent_message", {
            "message": {"role": "assistant", "content": "old \ud800 answer"}})
    await runtime.send(session.id, "hi")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 30)
    assert query(db_path, "SELECT error FROM llm_calls") == [(None,)]
    assert query(db_path, "SELECT status FROM agent_metadata") == [("idle",)]
    sent = surrogate_server.requests[-1]["messages"]
    assert {"role": "assistant", "content": "old \ufffd answer"} in sent


def listing_script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not results:
        return ScriptedReply(tool_calls=[("file_list", {})])
    return ScriptedReply(text=f"listed: {results[0]}")


async def test_a_file_name_that_is_not_utf8_never_wedges_the_thread(
        store: Store, db_path: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lace.config import Limits, Settings
    from lace.llm.checks import check_model
    from lace.llm.client import default_client

    workspace = tmp_path / "work"
    workspace.mkdir()
    with open(bytes(workspace) + b"/bad\xff.txt", "w") as file:  # listed as 'bad\udcff.txt'
        file.write("x")
    with FakeOpenAI(listing_script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        runtime = open_runtime(store, Settings(limits=Limits(model_retries=0)), default_client(),
                               check_model=check_model, workspace=workspace)
        try:
            root = await runtime.start_session("list", "openai/fake")
            await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
        finally:
            await runtime.stop()
            runtime.close()
    assert query(db_path, "SELECT error FROM llm_calls") == [(None,), (None,)]
    assert query(db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                          "type = 'tool_result'") == [("bad\ufffd.txt",)]


def test_a_task_added_with_bytes_that_are_not_utf8_is_kept(capsys: CaptureFixture,
                                                            db_path: Path) -> None:
    title = b"plan \xff here".decode("utf-8", "surrogateescape")  # as Python decodes argv
    code, _, err = lace(capsys, "task", "add", title, "--db", str(db_path))
    assert code == 0, err
    assert query(db_path, "SELECT title FROM threads") == [("plan \ufffd here",)]
    assert query(db_path, "SELECT title FROM tasks") == [("plan \ufffd here",)]


def test_a_prompt_with_bytes_that_are_not_utf8_starts_a_session(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    models.on("root", lambda messages: reply(f"heard: {messages[-1]['content']}"))
    prompt = b"go \xff now".decode("utf-8", "surrogateescape")
    code, out, err = lace(capsys, "run", prompt, "--model", "scripted/root", "--db", str(db_path))
    assert code == 0, err
    assert out == "heard: go \ufffd now\n"


def test_valid_text_replaces_lone_surrogates_and_joins_split_pairs() -> None:
    assert valid_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert valid_text("\ud83d\ude00") == "😀"
    assert valid_text("plain ✓") == "plain ✓"


def test_show_prints_a_surrogate_stored_by_an_earlier_lace(capsys: CaptureFixture,
                                                            store: Store, db_path: Path) -> None:
    session = new_session(store)
    with store.transaction() as tx:  # what lace wrote before text was checked at the seam
        tx.events.append(session.id, "agent_message",
                         {"message": {"role": "assistant", "content": "old \ud800 text"}})
    code, out, err = lace(capsys, "show", session.id, "--db", str(db_path))
    assert code == 0 and err == "" and "old \\ud800 text" in out
    code, out, err = lace(capsys, "show", session.id, "--json", "--db", str(db_path))
    assert code == 0 and err == ""
    assert json.loads(out)["events"][-1]["data"]["message"]["content"] == "old \ud800 text"


# where text leaves lace: every line a person reads

def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    shown = printable(HOSTILE)
    assert shown == ("a\\x1b[2Kb\\x1b]52;c;ZXZpbA==\\x07c\\u202ed\\x9be\\x0df\\ud800g")
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable("one\nline", one_line=True) == "one\\x0aline"
    assert printable("emoji 👨‍👩‍👧 and ✓") == "emoji 👨‍👩‍👧 and ✓"
    assert json.loads(printable_json(json.dumps(HOSTILE, ensure_ascii=False))) == HOSTILE


def hostile_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    done = tools_called(messages)
    if not done:
        return reply(None, ("task_create", {"tasks": [
            {"title": f"title {HOSTILE}", "prompt": f"prompt {HOSTILE}"}]}))
    if done == ["task_create"]:
        return reply(None, ("task_view", {"task_id": f"nope {HOSTILE}"}))
    return reply(f"answer {HOSTILE}")


def test_lace_run_and_the_board_commands_escape_control_characters(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    models.on("root", hostile_worker)
    code, out, err = lace(capsys, "run", "go", "--model", "scripted/root", "--db", str(db_path))
    assert code == 0
    assert_printable(out)
    assert_printable(err)
    assert "answer a\\x1b[2Kb\\x1b]52;c;ZXZpbA==\\x07c\\u202ed\\x9be\\x0df\ufffdg" in out
    assert "→ task_view(" in err and "✗ task_view: " in err
    (root,), = query(db_path, "SELECT id FROM threads")
    for argv in (["tasks"], ["tasks", "--json"], ["threads"], ["threads", "--json"],
                 ["show", root], ["show", root, "--json"], ["run", "--continue", root, "--json",
                                                         "--model", "scripted/root"]):
        code, out, err = lace(capsys, *argv, "--db", str(db_path))
        assert code == 0, err
        assert_printable(out)
        assert_printable(err)
    code, out, _ = lace(capsys, "tasks", "--db", str(db_path))
    assert "title a\\x1b[2Kb" in out


def test_names_stored_with_a_newline_stay_on_their_line(capsys: CaptureFixture, store: Store,
                                                        db_path: Path) -> None:
    session = new_session(store, title=f"session {CONTROLS}\nINJECTED")
    with store.transaction() as tx:
        child = tx.threads.create_child(session.id)
        tx.agents.create(NewAgent(thread_id=child.id, name="x\nINJECTED", provider="openai",
                                  model="x\nINJECTED", parent_thread_id=session.id))
        tx.approvals.request(child.id, "bash", {"command": f"echo {CONTROLS}\nINJECTED"})
    for argv in (["threads"], ["tasks"], ["approvals"], ["show", child.id],
                 ["stop", child.id], ["stop", child.id]):
        code, out, err = lace(capsys, *argv, "--db", str(db_path))
        assert code == 0, err
        assert_printable(out)
        assert not any(line.startswith("INJECTED") for line in out.splitlines()), out
    code, out, _ = lace(capsys, "threads", "--db", str(db_path))
    assert len(out.splitlines()) == 2 and "x\\x0aINJECTED" in out


def test_progress_lines_escape_control_characters() -> None:
    printed = io.StringIO()
    show = progress_printer(printed)
    thread = "lace_20990101_aaaaaa"
    show(EventAppended(thread, 1, "tool_call", {"call_id": "c", "tool_name": f"t{HOSTILE}",
                                                "arguments": json.dumps({"x": HOSTILE})}))
    show(EventAppended(thread, 2, "tool_result", {
        "call_id": "c", "tool_name": f"t{HOSTILE}", "is_error": True,
        "message": {"role": "tool", "content": f"bad {HOSTILE}"}}))
    show(ThreadSpawned(f"{thread}.1", thread, f"openai/{HOSTILE}", "task_1"))
    show(TurnFailed(thread, f"boom {HOSTILE}\nsecond line"))
    show(ApprovalRequested(1, thread, "bash", {"command": HOSTILE}))
    lines = printed.getvalue().splitlines()
    assert len(lines) == 5
    for line in lines:
        assert_printable(line)
