"""An editor that stops reading `lace acp`'s stdout while the root streams long replies: lace
holds what it has not yet written within a bound (the text coalesced, not one message per
chunk), its agents' turns and writes go on, and once the editor has taken nothing for
`stall_timeout_s` lace ends its side (the turn's reply is on the board, no traceback); one
that leaves 16 MB of updates unread, or closes lace's stdout, is gone at once. An editor that
only pauses and then reads again gets the whole reply."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.processes import lace_env

pytestmark = pytest.mark.slow
WORDS = 90_000
REPLY = " ".join(f"w{number:07d}" for number in range(WORDS))
"""810,000 characters streamed in 90,000 chunks (lace keeps 1,000,000 characters of a reply)."""
LAST = "That is all."
STALL_S = 90
"""Longer than the root's turn takes (each model call must end within it too), with room for a
loaded machine: beside other suites the turn's three calls took over 60 s."""


def long_replies(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Two long replies, each with a call of task_list, then a short one."""
    if sum(message["role"] == "assistant" for message in messages) < 2:
        return ScriptedReply(REPLY, tool_calls=[("task_list", {})])
    return ScriptedReply(LAST)


class RawEditor:
    """`python -m lace acp` on real pipes, spoken to in JSON lines by hand. Its stdout is a
    pipe the test holds and reads only in `answer`: between calls nothing reads it, as from
    an editor that hung."""

    def __init__(self, process: asyncio.subprocess.Process, stdout: BinaryIO) -> None:
        self.process, self.stdout = process, stdout
        self.next_id = 0
        self.peak_kb = 0

    async def ask(self, method: str, params: dict[str, Any]) -> int:
        assert self.process.stdin is not None
        self.next_id += 1
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id,
                                             "method": method, "params": params}).encode()
                                 + b"\n")
        await self.process.stdin.drain()
        return self.next_id

    async def answer(self, request_id: int, seen: list[dict[str, Any]],
                     timeout: float = 120) -> dict[str, Any]:
        """Read lace's messages (kept in `seen`) until the answer to `request_id`."""
        async with asyncio.timeout(timeout):
            while True:
                line = await asyncio.to_thread(self.stdout.readline)
                assert line, "lace acp closed its stdout"
                message = json.loads(line)
                seen.append(message)
                if message.get("id") == request_id:
                    return message

    def rss_kb(self, field: str = "VmHWM") -> int:
        """lace's resident memory (the kernel's high-water mark by default), in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        (line,) = [line for line in status.splitlines() if line.startswith(f"{field}:")]
        return int(line.split()[1])

    async def ended(self, timeout: float) -> int | None:
        """Wait until lace ends (its peak memory watched meanwhile); its exit status, or None
        when it is still running at the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            with contextlib.suppress(FileNotFoundError, ValueError):  # ended: no memory left
                self.peak_kb = max(self.peak_kb, self.rss_kb())
            try:
                return await asyncio.wait_for(self.process.wait(), 0.2)
            except TimeoutError:
                continue
        return None


@contextlib.asynccontextmanager
async def started(home: Path, server: FakeOpenAI, stall_s: float) -> AsyncIterator[RawEditor]:
    """`lace acp` with `[limits] stall_timeout_s` set, its stderr in stderr.log beside `home`;
    killed at the end if it still runs."""
    home.mkdir()
    config = home.parent / "config.toml"
    config.write_text(f"[limits]\nstall_timeout_s = {stall_s}\n")
    read_end, write_end = os.pipe()
    with (home.parent / "stderr.log").open("wb") as stderr, os.fdopen(read_end, "rb") as out:
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "lace", "acp", "--model", "openai/fake",
                stdin=asyncio.subprocess.PIPE, stdout=write_end, stderr=stderr,
                env=lace_env(home, LACE_CONFIG=str(config), OPENAI_BASE_URL=server.base_url,
                             OPENAI_API_KEY="not-a-key"))
        finally:
            os.close(write_end)
        try:
            yield RawEditor(process, out)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            assert process.stdin is not None
            process.stdin.close()  # the process's transport ends with its last pipe
            with contextlib.suppress(ConnectionError):
                await process.stdin.wait_closed()


async def opened(editor: RawEditor, work: Path) -> str:
    """initialize and session/new, answered; the session's id."""
    seen: list[dict[str, Any]] = []
    await editor.answer(await editor.ask("initialize", {"protocolVersion": 1}), seen)
    answer = await editor.answer(await editor.ask("session/new", {"cwd": str(work),
                                                                  "mcpServers": []}), seen)
    return str(answer["result"]["sessionId"])


def replies(db: Path) -> list[str]:
    with sqlite3.connect(db, timeout=10) as connection:
        return [row[0] for row in connection.execute(
            "SELECT json_extract(data, '$.message.content') FROM events "
            "WHERE type = 'agent_message' ORDER BY id")]


async def test_an_editor_that_stops_reading_leaves_lace_bounded_and_ends_its_side(
        tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with FakeOpenAI(long_replies) as server:
        async with started(home, server, STALL_S) as editor:
            session_id = await opened(editor, work)
            settled_kb = editor.rss_kb("VmRSS")
            await editor.ask("session/prompt", {"sessionId": session_id, "prompt": [
                {"type": "text", "text": "Tell me everything."}]})
            # from here on the editor reads nothing lace writes
            status = await editor.ended(timeout=STALL_S + 90)
    stderr = (tmp_path / "stderr.log").read_text()
    grown_mb = (editor.peak_kb - settled_kb) / 1024
    print(f"lace acp: {settled_kb / 1024:.0f} MB once the session was open, peak "
          f"{editor.peak_kb / 1024:.0f} MB (+{grown_mb:.0f} MB) with {2 * WORDS:,} chunks unread")
    assert status == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert (f"the editor has not read what lace wrote to it for {STALL_S} s "
            "([limits] stall_timeout_s)") in stderr, stderr[-3000:]
    assert replies(home / "lace.db") == [REPLY, REPLY, LAST]  # the turn went on: all kept
    assert grown_mb < 100, stderr[-3000:]  # unbounded, it took +235 MB and ran on


async def test_an_editor_that_pauses_then_reads_gets_the_whole_reply(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with FakeOpenAI(long_replies) as server:
        async with started(home, server, 60) as editor:
            session_id = await opened(editor, work)
            asked = await editor.ask("session/prompt", {"sessionId": session_id, "prompt": [
                {"type": "text", "text": "Tell me everything."}]})

            def answered() -> bool:  # the whole reply is on the board: the turn went on
                return replies(home / "lace.db") == [REPLY, REPLY, LAST]

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while not answered() and loop.time() < deadline:
                await asyncio.sleep(0.2)
            assert answered()
            seen: list[dict[str, Any]] = []
            answer = await editor.answer(asked, seen)
            assert editor.process.stdin is not None
            editor.process.stdin.close()
            status = await editor.ended(timeout=60)
    assert answer["result"]["stopReason"] == "end_turn"
    shown = [message["params"]["update"] for message in seen
             if message.get("method") == "session/update"]
    text = "".join(update["content"]["text"] for update in shown
                   if update["sessionUpdate"] == "agent_message_chunk")
    assert text == REPLY + "\n\n" + REPLY + "\n\n" + LAST  # each reply a paragraph
    assert [update["status"] for update in shown if update["sessionUpdate"] ==
            "tool_call_update"] == ["completed", "completed"]
    assert len(shown) < WORDS / 10  # coalesced while the editor was not reading
    assert status == 0


def huge_calls(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Twenty replies of five calls, each with 190,000 characters of arguments (refused, but
    the editor is shown each call as sent; lace keeps 1,000,000 characters of a reply's
    arguments), then a short one."""
    if sum(message["role"] == "assistant" for message in messages) < 20:
        return ScriptedReply(None, tool_calls=[("task_list", {"filter": "x" * 190_000})] * 5)
    return ScriptedReply(LAST)


async def test_an_editor_leaving_16_mb_unread_is_gone_before_the_stall_timeout(
        tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with FakeOpenAI(huge_calls) as server:
        async with started(home, server, 600) as editor:
            session_id = await opened(editor, work)
            await editor.ask("session/prompt", {"sessionId": session_id, "prompt": [
                {"type": "text", "text": "List the tasks."}]})
            status = await editor.ended(timeout=120)  # far less than stall_timeout_s
    stderr = (tmp_path / "stderr.log").read_text()
    print(f"lace acp: peak {editor.peak_kb / 1024:.0f} MB")
    assert status == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "the editor has left over 16 MB of updates unread; lace ends its side" in stderr
    with sqlite3.connect(home / "lace.db", timeout=10) as connection:  # cut off: resumable
        assert connection.execute("SELECT status FROM agent_metadata WHERE thread_id = ?",
                                  (session_id,)).fetchall() == [("interrupted",)]


async def test_an_editor_that_closes_lace_acps_stdout_is_gone(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with FakeOpenAI(long_replies) as server:
        async with started(home, server, 600) as editor:
            session_id = await opened(editor, work)
            editor.stdout.close()  # its stdin stays open
            await editor.ask("session/prompt", {"sessionId": session_id, "prompt": [
                {"type": "text", "text": "Tell me everything."}]})
            status = await editor.ended(timeout=60)
    stderr = (tmp_path / "stderr.log").read_text()
    assert status == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "the editor closed lace's stdout; lace ends its side" in stderr, stderr[-3000:]
