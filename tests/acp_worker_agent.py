"""A scripted ACP agent (the SDK's agent side) lace starts as an `acp:NAME` worker, on the real
stdio transport: `python tests/acp_worker_agent.py MODE [ARG]`.

MODE: `answer` (a tool call, then its prompt's task id in its answer), `refuse` (stop reason
refusal), `hang` (never answers: writes its pid to ARG.pid and its prompt to ARG.prompted
when prompted, ARG when it hears session/cancel; only a signal ends it), `ask` (asks
permission for a call of kind ARG and says what it was told), `flood` (ARG tool calls, then
an answer), `files` (reads notes.txt and ARG through lace's fs methods, writes out.txt), `big`
(one message of ARG characters, a JSON-RPC line that long, then an answer), `endless` (writes
to its stdout for ever, never a newline), `deaf` (asks lace for big.txt of its folder ARG times
at once, then never reads its stdin again: its event loop blocked until a signal ends it),
`deaf-many` (the same with ARG small requests of a method lace does not have), `reads` (asks
for big.txt ARG times at once, reading every answer, and says how many characters came)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from acp import (
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)


class Scripted:
    def __init__(self, mode: str, argument: str) -> None:
        self.mode, self.argument = mode, argument
        self.conn: Any = None
        self.cwd = "."

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=1, agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        self.cwd = cwd
        return NewSessionResponse(session_id="s1")

    async def cancel(self, session_id: str, **_: Any) -> None:
        if self.mode == "hang":
            Path(self.argument).write_text("cancelled\n")

    async def say(self, text: str) -> None:
        await self.conn.session_update(session_id="s1", update=update_agent_message_text(text))

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        asked = "".join(getattr(block, "text", "") for block in prompt)
        task = re.search(r"assigned task '([^']+)'", asked)
        if self.mode == "refuse":
            return PromptResponse(stop_reason="refusal")
        if self.mode == "hang":
            Path(self.argument).with_suffix(".pid").write_text(str(os.getpid()))
            Path(self.argument).with_suffix(".prompted").write_text(asked)
            await asyncio.Event().wait()
        if self.mode == "ask":
            answer = await self.conn.request_permission(
                session_id="s1", options=[
                    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="no", name="Reject", kind="reject_once")],
                tool_call=ToolCallUpdate(tool_call_id="c1", title="something", kind=self.argument,
                                         raw_input={"command": "rm -rf /"}))
            await self.say(f"told {getattr(answer.outcome, 'option_id', 'cancelled')}")
            return PromptResponse(stop_reason="end_turn")
        if self.mode == "flood":
            for number in range(int(self.argument)):
                await self.conn.session_update(session_id="s1", update=start_tool_call(
                    f"t{number}", f"step {number}", kind="think", status="in_progress"))
            await self.say("flooded")
            return PromptResponse(stop_reason="end_turn")
        if self.mode == "big":
            await self.say("x" * int(self.argument))
            await self.say(" and done")
            return PromptResponse(stop_reason="end_turn")
        if self.mode == "endless":  # past the SDK's own (non-blocking) writer, for ever
            os.set_blocking(1, True)
            while True:
                os.write(1, b"x" * 2**20)
        if self.mode in ("deaf", "deaf-many"):  # written whole, past the SDK's own writer
            os.set_blocking(1, True)
            big = {"sessionId": "s1", "path": str(Path(self.cwd) / "big.txt")}
            for number in range(int(self.argument)):
                os.write(1, json.dumps({
                    "jsonrpc": "2.0", "id": f"r{number}",
                    **({"method": "fs/read_text_file", "params": big} if self.mode == "deaf"
                       else {"method": "no/such_method", "params": {}})}).encode() + b"\n")
            time.sleep(3600)
        if self.mode == "reads":
            path = str(Path(self.cwd) / "big.txt")
            read = await asyncio.gather(*(self.conn.read_text_file(session_id="s1", path=path)
                                          for _ in range(int(self.argument))))
            await self.say(f"read {sum(len(answer.content) for answer in read):,} characters")
            return PromptResponse(stop_reason="end_turn")
        if self.mode == "files":
            for path in (str(Path(self.cwd) / "notes.txt"), self.argument):
                try:
                    read = await self.conn.read_text_file(session_id="s1", path=path)
                    await self.say(f"[read {read.content.strip()}]")
                except Exception as error:
                    await self.say(f"[refused {error}]")
            await self.conn.write_text_file(session_id="s1", path=str(Path(self.cwd) / "out.txt"),
                                            content="from the worker\n")
            return PromptResponse(stop_reason="end_turn")
        await self.conn.session_update(session_id="s1", update=start_tool_call(
            "t1", "look around", kind="read", status="in_progress", raw_input={"path": "."}))
        await self.conn.session_update(session_id="s1", update=update_tool_call(
            "t1", status="completed", content=[tool_content(text_block("looked"))]))
        await self.say(f"worked {task.group(1) if task else 'no task'}")
        return PromptResponse(stop_reason="end_turn")


async def main() -> None:
    mode, argument = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    print(f"scripted ACP agent: {mode}", file=sys.stderr, flush=True)
    await run_agent(Scripted(mode, argument))  # type: ignore[arg-type]
    if mode == "hang":  # stubborn: the end of its stdin does not end it, only a signal
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main())
