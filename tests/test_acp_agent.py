"""`lace acp` driven by a scripted ACP client (the SDK's client side) over its real stdio: a
prompt that fans out to `new:` helpers, permissions rejected and allowed, a cancel mid-turn,
and `session/load` continuing the same root."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.acp_peers import Editor, lace_acp, prompt

KEY = "sk-fake-key-for-the-fake-server"
NOTICE = "[LACE TASK SYSTEM]"
pytestmark = pytest.mark.slow


def said(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(message.get("content") or "") for message in messages)


def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Completes its task with a result naming it."""
    task_id = said(messages).split("assigned task '", 1)[1].split("'", 1)[0]
    answered = sum(message["role"] == "assistant" for message in messages)
    if answered == 0:
        return ScriptedReply(tool_calls=[("task_complete", {"task_id": task_id,
                                                            "message": f"done {task_id}"})])
    return ScriptedReply("finished")


def fan_out(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root creates two tasks for `new:` helpers, then sums up once both completed."""
    if model == "worker":
        return worker(messages)
    last = messages[-1]
    if last["role"] == "user" and not str(last.get("content")).startswith(NOTICE):
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [
            {"title": title, "prompt": f"Do {title}", "assigned_to": "new:openai/worker"}
            for title in ("Alpha", "Beta")]})])
    done = said(messages).count("has been completed by")
    return ScriptedReply("All done: both parts." if done == 2 else "waiting")


def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY}


def rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db, timeout=10) as connection:
        return connection.execute(sql, params).fetchall()


async def test_a_prompt_fans_out_to_helpers_each_shown_as_a_tool_call_and_the_plan(
        tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor()
    with FakeOpenAI(fan_out) as server:
        async with lace_acp(editor, home, "--model", "openai/root", **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            answer = await prompt(conn, session.session_id, "Do alpha and beta.")
        later = Editor()
        async with lace_acp(later, home, "--model", "openai/root", **env(server)) as (conn, _):
            await conn.load_session(cwd=str(work), session_id=session.session_id,
                                    mcp_servers=[])
    assert answer.stop_reason == "end_turn"
    assert editor.text() == "waiting\n\nAll done: both parts."  # two replies, two paragraphs
    assert later.text() == editor.text()  # and so when the session is loaded again
    root = session.session_id
    helpers = {f"helper:{root}.1", f"helper:{root}.2"}
    started = {update.tool_call_id: update for update in editor.of_kind("tool_call")}
    assert helpers <= set(started)
    assert {started[helper].title for helper in helpers} == {
        f"helper {root}.1 (openai/worker): Alpha", f"helper {root}.2 (openai/worker): Beta"}
    ended = {update.tool_call_id: update.status for update in editor.of_kind("tool_call_update")}
    assert {helper: ended.get(helper) for helper in helpers} == dict.fromkeys(helpers,
                                                                                "completed")
    (create,) = [update for update in started.values() if update.title == "task_create"]
    assert ended[create.tool_call_id] == "completed"
    last_plan = editor.of_kind("plan")[-1]
    assert [(entry.content, entry.status) for entry in last_plan.entries] == [
        ("Alpha", "completed"), ("Beta", "completed")]
    db = home / "lace.db"  # the session is on the board like any other
    assert rows(db, "SELECT id, parent_id FROM threads ORDER BY id") == [
        (root, None), (f"{root}.1", root), (f"{root}.2", root)]
    assert rows(db, "SELECT status FROM tasks") == [("completed",), ("completed",)]


def bash_then_answer(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root runs one bash command writing made.txt, then says what it got back."""
    if messages[-1]["role"] != "tool":
        return ScriptedReply(tool_calls=[("bash", {"command": "echo made > made.txt"})])
    return ScriptedReply(f"bash said: {messages[-1]['content'][:80]}")


@pytest.mark.parametrize("option", ["reject_once", "allow_once"])
async def test_a_permission_rejected_does_not_run_and_one_allowed_does(
        tmp_path: Path, option: str) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor(choose=lambda _call: option)
    with FakeOpenAI(bash_then_answer) as server:
        async with lace_acp(editor, home, "--model", "openai/root", **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            answer = await prompt(conn, session.session_id, "Make the file.")
    assert answer.stop_reason == "end_turn"
    ((call, options),) = editor.asked
    assert {o.option_id for o in options} >= {"allow_once", "allow_always", "reject_once"}
    assert call.raw_input["command"] == "echo made > made.txt"
    (started,) = editor.of_kind("tool_call")
    assert call.tool_call_id == started.tool_call_id  # the call the editor was shown
    (result,) = [u for u in editor.of_kind("tool_call_update")
                 if u.tool_call_id == started.tool_call_id]
    if option == "reject_once":
        assert not (work / "made.txt").exists()
        assert result.status == "failed"
        assert "bash said: Denied by the person" in editor.text()
    else:
        assert (work / "made.txt").read_text() == "made\n"
        assert result.status == "completed"


def bash_twice(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    calls = sum(message["role"] == "tool" for message in messages)
    if calls < 2:
        return ScriptedReply(tool_calls=[("bash", {"command": f"echo {calls} >> made.txt"})])
    return ScriptedReply("twice")


async def test_allow_always_holds_for_the_session_only(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor(choose=lambda _call: "allow_always")
    with FakeOpenAI(bash_twice) as server:
        async with lace_acp(editor, home, "--model", "openai/root", **env(server)) as (conn, _):
            first = await conn.new_session(cwd=str(work), mcp_servers=[])
            await prompt(conn, first.session_id, "Twice.")
            assert len(editor.asked) == 1  # the second call ran without asking
            second = await conn.new_session(cwd=str(work), mcp_servers=[])
            await prompt(conn, second.session_id, "Twice again.")
    assert len(editor.asked) == 2  # another session asks again
    assert (work / "made.txt").read_text() == "0\n1\n0\n1\n"


SLEEP = "61.2345"
"""How long the helper's bash sleeps: a number no other process on the machine uses."""


def sleeping() -> bool:
    """Whether a `sleep SLEEP` process is alive."""
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if status.read_bytes().split(b"\0")[:2] == [b"sleep", SLEEP.encode()]:
                return True
        except OSError:
            continue
    return False


def slow_helper(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root hands a task to a helper that runs a long bash command."""
    if model == "sleeper":
        return ScriptedReply(tool_calls=[("bash", {"command": f"sleep {SLEEP}"})])
    if "Just answer" in said(messages):
        return ScriptedReply("ok")
    if messages[-1]["role"] == "user":
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [
            {"title": "Sleep", "prompt": "Sleep a minute", "assigned_to":
             "new:openai/sleeper"}]})])
    return ScriptedReply("waiting")


async def test_cancel_mid_turn_answers_cancelled_within_seconds_and_stops_the_helpers(
        tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor()
    with FakeOpenAI(slow_helper) as server:
        async with lace_acp(editor, home, "--yes", "--model", "openai/root",
                            **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            root = session.session_id
            running = asyncio.create_task(prompt(conn, root, "Sleep, please."))
            await editor.until(lambda: any(u.tool_call_id == f"helper:{root}.1"
                                           for u in editor.of_kind("tool_call")))
            db = home / "lace.db"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not rows(
                    db, "SELECT 1 FROM events WHERE thread_id = ? AND type = 'tool_call'",
                    f"{root}.1"):
                await asyncio.sleep(0.1)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not sleeping():
                await asyncio.sleep(0.1)
            assert sleeping()
            asked = time.monotonic()
            await conn.cancel(session_id=root)
            answer = await asyncio.wait_for(running, 10)
            took = time.monotonic() - asked
            assert answer.stop_reason == "cancelled"
            assert took < 5
            ended = [u.status for u in editor.of_kind("tool_call_update")
                     if u.tool_call_id == f"helper:{root}.1"]
            assert ended == ["failed"]
            deadline = time.monotonic() + 10  # the helper's bash is killed with its turn
            while time.monotonic() < deadline and sleeping():
                await asyncio.sleep(0.1)
            assert not sleeping()
            assert rows(db, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                        f"{root}.1") == [("stopped",)]
            again = await prompt(conn, root, "Just answer.")  # the session goes on
    assert again.stop_reason == "end_turn"
    assert editor.text().endswith("ok")


def echo(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    asked = [str(m["content"]) for m in messages if m["role"] == "user"
             and not str(m["content"]).startswith(NOTICE)]
    return ScriptedReply(f"heard {len(asked)}: {asked[-1].split(chr(10))[0]}")


async def test_session_load_replays_the_conversation_and_continues_the_same_root(
        tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with FakeOpenAI(echo) as server:
        async with lace_acp(Editor(), home, "--model", "openai/root",
                            **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            await prompt(conn, session.session_id, "first")
        later = Editor()
        async with lace_acp(later, home, "--model", "openai/root", **env(server)) as (conn, _):
            await conn.load_session(cwd=str(work), session_id=session.session_id,
                                    mcp_servers=[])
            replayed = [(u.session_update, u.content.text) for u in later.updates]
            assert replayed == [("user_message_chunk", "first"),
                                ("agent_message_chunk", "heard 1: first")]
            answer = await prompt(conn, session.session_id, "second")
            with pytest.raises(Exception, match="Resource not found"):
                await conn.load_session(cwd=str(work), session_id="lace_20260101_nosuch",
                                        mcp_servers=[])
    assert answer.stop_reason == "end_turn"
    assert later.text().endswith("heard 2: second")
    assert rows(home / "lace.db", "SELECT count(*) FROM threads") == [(1,)]


def files(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root reads notes.txt, writes out.txt, tries a file outside the workspace, then
    repeats what the three calls returned."""
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    steps = [("file_read", {"path": "notes.txt"}),
             ("file_write", {"path": "out.txt", "content": "written\n"}),
             ("file_read", {"path": "../outside.txt"})]
    if len(results) < len(steps):
        return ScriptedReply(tool_calls=[steps[len(results)]])
    return ScriptedReply(" | ".join(results))


@pytest.mark.parametrize("fs", [True, False])
async def test_file_tools_use_the_editors_buffers_only_when_it_offers_them(
        tmp_path: Path, fs: bool) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("saved on disk\n")
    (tmp_path / "outside.txt").write_text("not for lace\n")
    editor = Editor(fs=fs, buffers={str(work / "notes.txt"): "unsaved in the editor\n"})
    with FakeOpenAI(files) as server:
        async with lace_acp(editor, home, "--yes", "--model", "openai/root",
                            **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            await prompt(conn, session.session_id, "Files.")
    said_back = editor.text()
    assert "not for lace" not in said_back
    assert "'../outside.txt' leaves the workspace" in said_back
    if fs:
        assert editor.fs_calls == [("read", str(work / "notes.txt")),
                                   ("write", str(work / "out.txt"))]
        assert "unsaved in the editor" in said_back
        assert editor.buffers[str(work / "out.txt")] == "written\n"
        assert not (work / "out.txt").exists()  # the editor saves it, not lace
    else:
        assert editor.fs_calls == []
        assert "saved on disk" in said_back
        assert (work / "out.txt").read_text() == "written\n"


NOTES_SERVER = str(Path(__file__).parent / "mcp_servers" / "notes_server.py")


def uses_notes(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root calls the editor's MCP server: a read-only tool, then one that writes."""
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    steps = [("mcp__notes__echo", {"text": "hi from the editor's server"}),
             ("mcp__notes__add_note", {"text": "kept"})]
    if len(results) < len(steps):
        return ScriptedReply(tool_calls=[steps[len(results)]])
    return ScriptedReply("done")


async def test_the_editors_mcp_servers_are_used_under_lace_policy(tmp_path: Path) -> None:
    from acp.schema import McpServerStdio

    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor(choose=lambda _call: "reject_once")
    server = McpServerStdio(name="notes", command=sys.executable, args=[NOTES_SERVER], env=[])
    with FakeOpenAI(uses_notes) as fake:
        async with lace_acp(editor, home, "--model", "openai/root", **env(fake)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[server])
            answer = await prompt(conn, session.session_id, "Use the notes.")
    assert answer.stop_reason == "end_turn"
    started = {u.tool_call_id: u.title for u in editor.of_kind("tool_call")}
    ended = {u.tool_call_id: u for u in editor.of_kind("tool_call_update")}
    by_title = {title: ended[call_id] for call_id, title in started.items()}
    echoed = by_title["mcp__notes__echo"]
    assert echoed.status == "completed"  # read-only: allowed without asking
    assert "hi from the editor's server" in echoed.content[0].content.text
    ((asked, _options),) = editor.asked  # the writing tool asks, as lace's own would
    assert asked.title == "mcp__notes__add_note"
    assert by_title["mcp__notes__add_note"].status == "failed"


def answers(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root answers each prompt in four words."""
    return ScriptedReply(f"answer {sum(message['role'] == 'user' for message in messages)} "
                         "in full")


async def test_a_reply_whose_stream_broke_off_is_sent_again_as_a_paragraph_of_its_own(
        tmp_path: Path) -> None:
    """The stream drops after the first word and the call is made again: the word already
    sent stays, marked, and the answer made again is not glued to it ('answer answer 2 in
    full'); the next prompt's answer is a message of its own again."""
    from lace.cli.acp_updates import BROKE_OFF

    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    editor = Editor()
    with FakeOpenAI(answers) as server:
        async with lace_acp(editor, home, "--model", "openai/root", **env(server)) as (conn, _):
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            server.faults.append("drop_stream")
            first = await prompt(conn, session.session_id, "One.")
            shown = editor.text()
            second = await prompt(conn, session.session_id, "Two.")
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert shown == f"answer {BROKE_OFF}\n\nanswer 1 in full"
    assert editor.text() == shown + "answer 2 in full"
