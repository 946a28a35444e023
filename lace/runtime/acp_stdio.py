"""An `acp:NAME` agent's stdio as the ACP SDK's message transport, bounded both ways: lace
reads no line of the agent's past MAX_MESSAGE_BYTES, and an agent that does not read its stdin
leaves lace holding at most one file's answer (it made lace keep every answer it had asked for,
159 MB for ten 8 MB files) until `stall_timeout_s` ends it. `lace acp` writes to its editor
through the same DrainedLines."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

MAX_MESSAGE_BYTES = 16 * 2**20
"""The longest JSON-RPC line an ACP agent may send (a file's content fits); past it the turn
fails, as memory must stay bounded."""
MAX_OPEN_REQUESTS = 64
"""The agent's requests lace holds unanswered at once; past them lace reads nothing more from
the agent until one is answered (each holds a task and, once answered, its answer)."""


def json_object(line: bytes) -> dict[str, Any] | None:
    """A line's JSON-RPC message; None when it is not a JSON object (or is nested too deeply
    to parse)."""
    with contextlib.suppress(ValueError, RecursionError):
        message = json.loads(line)
        if isinstance(message, dict):
            return message
    return None


class DrainedLines:
    """Writes JSON-RPC messages to a peer's pipe one line at a time, each once the last has
    drained into the pipe, so lace holds at most one line beyond the pipe's own buffer. A peer
    that has not taken a line within `stall_s` has stalled: nothing more is written to it."""

    def __init__(self, into: asyncio.StreamWriter, stall_s: float) -> None:
        self.into, self.stall_s = into, stall_s
        self.stalled = False
        self.stopped = False
        """Nothing more is written (the peer stalled, or its user stopped writing to it)."""
        self._writing = asyncio.Lock()

    async def write(self, message: dict[str, Any]) -> bool:
        """Write `message` and wait until it drained; False when it was not written (the peer
        stalled, now or before, or writing has stopped)."""
        line = json.dumps(message).encode() + b"\n"
        async with self._writing:
            if self.stopped:
                return False
            self.into.write(line)
            del line  # the pipe's buffer has its copy
            try:
                async with asyncio.timeout(self.stall_s):
                    await self.into.drain()
            except TimeoutError:
                self.stalled = self.stopped = True
                return False
        return True


class AgentStdio:
    """One JSON line per message each way. What the agent sends: once a line passes
    MAX_MESSAGE_BYTES (its newline counted), nothing more of it is read or kept; a line that is
    not JSON (or too deeply nested to parse) is skipped, as the SDK's own transport does. What
    lace sends: one message at a time, each written only once the last has drained into the
    pipe; an agent that has not taken a message within `stall_s` has failed. A failure calls
    `end` (which ends the agent), and `failure` says why, after the agent's name."""

    def __init__(self, out: asyncio.StreamReader, into: asyncio.StreamWriter,
                 end: Callable[[], object], stall_s: float) -> None:
        self.out, self.into, self.end, self.stall_s = out, into, end, stall_s
        self.failure: str | None = None
        self.lines = DrainedLines(into, stall_s)
        self._reading_a_file = asyncio.Lock()
        self._unanswered = 0
        self._answered = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        answer = "method" not in message  # to one of the agent's requests
        try:
            if not await self.lines.write(message) and self.lines.stalled:
                self._fail(f"did not read what lace wrote to its stdin within "
                           f"{self.stall_s:g} s ([limits] stall_timeout_s); lace ended it")
        except ConnectionError:
            if not answer:
                raise  # a request of lace's fails; an answer is for no one now
        finally:
            if answer:
                self._unanswered -= 1
                self._answered.set()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            if not await self._room_for_a_request():
                return None
            line = await self._line()
            if not line or self.failure is not None:
                return None  # the agent's stdout ended, or nothing more of it is heard
            if line.strip() and (message := json_object(line)) is not None:
                if message.get("method") is not None and "id" in message:
                    self._unanswered += 1  # the SDK answers every request once
                return message

    async def close(self) -> None:
        """Nothing to do: the pipes end with the process."""

    async def one_file_at_a_time(self) -> None:
        """Wait until no other file's answer is held (being read, or not yet taken by the
        agent); this request's answer is then the one until its handler's task ends, which
        is once the answer has been written."""
        await self._reading_a_file.acquire()
        if self.failure is not None:  # its answer would go nowhere
            self._reading_a_file.release()
            from acp import RequestError

            raise RequestError.internal_error({"details": "the agent is ended"})
        task = asyncio.current_task()
        assert task is not None  # a coroutine's
        task.add_done_callback(lambda _task: self._reading_a_file.release())

    async def _room_for_a_request(self) -> bool:
        """Wait until fewer than MAX_OPEN_REQUESTS of the agent's requests are unanswered;
        False once the agent has failed."""
        while self._unanswered >= MAX_OPEN_REQUESTS and self.failure is None:
            self._answered.clear()
            await self._answered.wait()
        return self.failure is None

    def _fail(self, why: str) -> None:
        if self.failure is None:
            self.failure = why
            self.lines.stopped = True  # nothing more for the agent
            self.end()
        self._answered.set()

    async def _line(self) -> bytes:
        kept: list[bytes] = []
        size = 0
        while True:
            try:
                chunk, ended = await self.out.readuntil(b"\n"), True
            except asyncio.LimitOverrunError as error:  # no end of line in the buffer yet
                chunk, ended = await self.out.readexactly(error.consumed), False
            except asyncio.IncompleteReadError as error:  # the last line, with no end
                chunk, ended = error.partial, True
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES:
                self._fail(f"sent a message over {MAX_MESSAGE_BYTES // 2**20} MB (lace reads "
                           "no longer one)")
                return b""
            kept.append(chunk)
            if ended:
                return b"".join(kept)
