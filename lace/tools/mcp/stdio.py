"""The stdio transport to an MCP server, as the SDK's `stdio_client` runs it (its own process
group; at the end stdin closed, 2 s of grace, then the group signalled) but reading the server's
stdout with a limit: the SDK holds a whole line however long, and a 100 MB result took 615 MB of
lace's memory. A message past `MAX_MESSAGE_BYTES` is dropped as it streams by, but for its
first and last bytes; the request it answered gets the start of its text and a note, or an
error."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from lace.tools.mcp.connection import MAX_MESSAGE_BYTES, MESSAGE_TOO_BIG
from lace.tools.shell import OUTPUT_CAP

if TYPE_CHECKING:  # the SDK is imported when a server starts, not with lace's tools
    import mcp_types as types
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.message import SessionMessage

GRACE_S = 2.0
"""How long a server has to end by itself once its stdin is closed (as the SDK waits)."""
PREVIEW_CHARACTERS = OUTPUT_CAP // 2
"""How much of the text of a result past the limit the model is shown (as much as the head of
any capped result)."""
_HEAD = 8 * PREVIEW_CHARACTERS
"""Bytes kept of the start of a message past the limit: the preview, however JSON escapes it."""
_TAIL = 4096
"""Bytes kept of its end, to find which request it answered."""
_TEXT_START = re.compile(rb'"text"\s*:\s*"')
_STRING_BODY = re.compile(rb'(?:[^"\\]|\\.)*', re.DOTALL)


@dataclass
class _Cut:
    """A line past the limit while it streams by: its size, its first and last bytes."""

    size: int = 0
    head: bytearray = field(default_factory=bytearray)
    tail: bytes = b""

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        if len(self.head) < _HEAD:
            self.head += piece[:_HEAD - len(self.head)]
        self.tail = (self.tail + piece)[-_TAIL:]


@dataclass
class _Lines:
    """Complete lines out of a byte stream; a line past `limit` comes out as a `_Cut`."""

    limit: int
    pending: bytearray = field(default_factory=bytearray)
    cut: _Cut | None = None

    def feed(self, piece: bytes) -> list[bytes | _Cut]:
        lines: list[bytes | _Cut] = []
        start = 0
        while (end := piece.find(b"\n", start)) >= 0:
            lines.append(self._take(piece[start:end]))
            start = end + 1
        self._keep(piece[start:])
        return lines

    def _keep(self, part: bytes) -> None:
        if self.cut is not None:
            self.cut.add(part)
        elif len(self.pending) + len(part) > self.limit:
            self.cut = _Cut()
            self.cut.add(bytes(self.pending))
            self.cut.add(part)
            self.pending = bytearray()
        else:
            self.pending += part

    def _take(self, end: bytes) -> bytes | _Cut:
        self._keep(end)
        line: bytes | _Cut = self.cut if self.cut is not None else bytes(self.pending)
        self.pending, self.cut = bytearray(), None
        return line


def answered_request(cut: _Cut, pending: dict[types.RequestId, str]) -> types.RequestId | None:
    """Which of the pending requests the cut message answers: the one whose id stands as a key
    at either end of it (servers write it first or last); None for a message that names none
    (a notification, a request of the server's), which is dropped."""
    ends = bytes(cut.head[:_TAIL]).decode(errors="replace") + "\n" + \
        cut.tail.decode(errors="replace")
    named = [request_id for request_id in pending if re.search(
        r'"id"\s*:\s*' + re.escape(json.dumps(request_id)) + r"\s*[,}]", ends)]
    return named[0] if len(named) == 1 else None


def text_preview(head: bytes) -> str:
    """The start of the first text in a message's first bytes (a JSON string cut anywhere,
    even inside an escape or a character), at most `PREVIEW_CHARACTERS`; "" if none."""
    start = _TEXT_START.search(head)
    if start is None:
        return ""
    body = _STRING_BODY.match(head, start.end())
    assert body is not None  # the pattern matches the empty string
    for trim in range(12):  # a `\\uXXXX` escape or a UTF-8 character cut at the end
        try:
            text = json.loads(b'"' + body.group()[:len(body.group()) - trim] + b'"')
        except ValueError:
            continue
        return str(text)[:PREVIEW_CHARACTERS]
    return ""


def too_big(request_id: types.RequestId, method: str | None, cut: _Cut,
            limit: int) -> SessionMessage:
    """What lace answers a request with in place of the server's answer past the limit: for a
    tool call, a result holding the start of its text and a note of the cut; else an error."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    note = (f"the server's answer was {cut.size:,} bytes, past the {limit // (1 << 20)} MB "
            "lace reads of one message from an MCP server")
    if method != "tools/call":
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                                 error=types.ErrorData(code=MESSAGE_TOO_BIG,
                                                                       message=note)))
    preview = text_preview(bytes(cut.head))
    text = f"{preview}\n… [cut: {note}; the first {len(preview):,} characters of its text " \
           "are above] …" if preview else f"[left out: {note}]"
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={
        "content": [{"type": "text", "text": text}], "isError": False}))


def parsed(line: bytes) -> SessionMessage | Exception:
    """One line as a message, or the error the session reports for it."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:
        return error


@contextlib.asynccontextmanager
async def capped_stdio(server: StdioServerParameters, errlog: Any,
                       limit: int = MAX_MESSAGE_BYTES) -> AsyncIterator[Any]:
    """Start the server and yield the (read, write) streams the SDK's `Client` takes."""
    import mcp_types as types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        [server.command, *server.args], env=get_default_environment() | (server.env or {}),
        stderr=errlog, cwd=server.cwd, start_new_session=True)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    pending: dict[types.RequestId, str] = {}

    async def read() -> None:
        assert process.stdout is not None
        async with to_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for line in _lines_of(process.stdout, limit):
                    if isinstance(line, _Cut):
                        request_id = answered_request(line, pending)
                        if request_id is None:
                            continue
                        message: SessionMessage | Exception = too_big(
                            request_id, pending.get(request_id), line, limit)
                    else:
                        message = parsed(line)
                    if isinstance(message, SessionMessage) and isinstance(
                            message.message, types.JSONRPCResponse | types.JSONRPCError):
                        pending.pop(message.message.id, None)  # type: ignore[arg-type]
                    await to_session.send(message)

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for outgoing in from_session:
                    _track(pending, outgoing.message)
                    data = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the end instead of waiting forever

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream):
                    await stream.aclose()
            group.cancel_scope.cancel()


def _track(pending: dict[types.RequestId, str], message: Any) -> None:
    """Note a request sent; forget one the session cancelled (it may never be answered)."""
    import mcp_types as types

    if isinstance(message, types.JSONRPCRequest):
        pending[message.id] = message.method
    elif isinstance(message, types.JSONRPCNotification) and \
            message.method == "notifications/cancelled" and isinstance(message.params, dict):
        pending.pop(message.params.get("requestId"), None)  # type: ignore[arg-type]


async def _lines_of(stdout: ByteReceiveStream, limit: int) -> AsyncIterator[bytes | _Cut]:
    lines = _Lines(limit)
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError,
                             anyio.BrokenResourceError, OSError):
        while True:
            for line in lines.feed(await stdout.receive()):
                yield line


async def _stop(process: Process) -> None:
    """Close the server's stdin, give it `GRACE_S` to end, then end its process group."""
    from mcp.os.posix.utilities import terminate_posix_process_tree

    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if process.returncode is None:
        await terminate_posix_process_tree(process, GRACE_S)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
