"""`lace acp`: lace as an ACP agent on stdin and stdout, for editors (Zed, JetBrains, Neovim).
stdout carries the protocol alone (anything else printed goes to stderr), and a message longer
than MAX_MESSAGE_BYTES is dropped as it streams by, never held whole. What lace writes goes one
message at a time, each once the last drained; an editor that has taken nothing for
`stall_timeout_s` is gone, and lace ends its side as when the editor closes stdin."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import selectors
import signal
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from lace.cli.board import board_of
from lace.cli.invocation import runtime_settings
from lace.cli.loop import once_on, run_async
from lace.cli.run import model_client, usable_model
from lace.core.errors import LaceError
from lace.runtime.acp_stdio import DrainedLines, json_object
from lace.runtime.public import DaemonThreads

if TYPE_CHECKING:
    from acp.interfaces import Agent

log = logging.getLogger("lace.acp")
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The longest JSON-RPC message lace reads from an editor (as from an MCP server): a prompt
with a few files embedded fits; a longer line is dropped, with a line on stderr."""


def acp_command(args: argparse.Namespace) -> int:
    """Check the settings and the model first (one line on stderr when bad), then serve ACP on
    stdio until the editor closes stdin (or SIGINT, SIGTERM)."""
    for descriptor, name, event in ((0, "stdin", selectors.EVENT_READ),
                                    (1, "stdout", selectors.EVENT_WRITE)):
        if not _watchable(descriptor, event):
            raise LaceError(f"lace acp speaks ACP on pipes, as an editor starts it; its {name} "
                            "is a file here")
    settings = runtime_settings(args)
    model = usable_model(args.model or settings.model)
    board = board_of(args, create=True)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="lace acp: %(levelname)s %(name)s: %(message)s")
    protocol_out = _take_stdout()
    stall_s = settings.limits.stall_timeout_s
    return run_async(lambda: _serve(args, board, model, protocol_out, stall_s))


def _watchable(descriptor: int, event: int) -> bool:
    """Whether the event loop can watch `descriptor` (a pipe, a socket or a terminal; not a
    file or /dev/null, on which it fails, and the process hung with a traceback)."""
    if not stat.S_ISFIFO(mode := os.fstat(descriptor).st_mode) and not stat.S_ISSOCK(mode) \
            and not stat.S_ISCHR(mode):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(descriptor, event)
        except (OSError, ValueError):
            return False
    return True


def _take_stdout() -> int:
    """A file descriptor of its own for the protocol; fd 1 and `sys.stdout` then lead to
    stderr, so a stray print (a library's, a tool's) cannot corrupt the protocol."""
    sys.stdout.flush()
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol_out


async def _serve(args: argparse.Namespace, board: Any, model: str, protocol_out: int,
                 stall_s: float) -> int:
    """Serve until the editor closes stdin (0), a signal comes (0), or the editor is gone: it
    left lace's messages unread (1, a line on stderr says why)."""
    from acp import run_agent

    from lace.cli.acp_agent import LaceAgent

    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())  # a stuck tool thread cannot hold the exit
    main = asyncio.current_task()
    assert main is not None
    signalled = threading.Event()  # at once: the loop waits while a registration retries
    stop = once_on((signal.SIGINT, signal.SIGTERM), main.cancel, came=signalled)
    gone: list[str] = []

    def editor_gone(why: str) -> None:
        if not gone:
            gone.append(why)
            log.warning("%s; lace ends its side (the session is on the board: session/load, "
                        "or `lace run --continue`, goes on with it)", why)
            stop()

    agent = LaceAgent(board=board, client=model_client(), model=model, flags=args,
                      editor_gone=editor_gone, stopping=signalled.is_set)
    transport = await editor_stdio(protocol_out, stall_s, editor_gone)
    print(f"lace acp (pid {os.getpid()}): serving ACP on stdio, database {board.url}",
          file=sys.stderr)
    try:
        # LaceAgent has the methods lace supports; the SDK answers the others "Method not
        # found" (its Agent protocol lists every method of the spec, unstable ones too)
        await run_agent(cast("Agent", agent), transport)
    except asyncio.CancelledError:  # SIGINT or SIGTERM, or the editor gone: stop cleanly
        pass
    finally:
        await agent.close()
        board.close()
    return 1 if gone else 0


@dataclass
class EditorStdio:
    """The editor's pipes as the ACP SDK's message transport: each line of stdin `lines` holds
    (BoundedLines), and lace's messages written through `out`; `gone` is called once the
    editor has left one unread for `stall_timeout_s`, or closed the pipe (nothing more is
    written to it)."""

    lines: asyncio.StreamReader
    out: DrainedLines
    gone: Callable[[str], object]

    async def send(self, message: dict[str, Any]) -> None:
        try:
            written = await self.out.write(message)
        except ConnectionError:  # nothing lace writes can reach the editor again
            self.out.stopped = True
            self.gone("the editor closed lace's stdout")
            return
        if not written and self.out.stalled:
            self.gone(f"the editor has not read what lace wrote to it for {self.out.stall_s:g} "
                      "s ([limits] stall_timeout_s)")

    async def receive(self) -> dict[str, Any] | None:
        """The editor's next message; None once stdin ends. A line that is not a JSON object
        (or too deeply nested to parse) is skipped with a line on stderr."""
        while line := await self.lines.readline():
            if not line.strip():
                continue
            if (message := json_object(line)) is not None:
                return message
            log.warning("skipped a message from the editor that is not a JSON-RPC object")
        return None

    async def close(self) -> None:
        """What an editor that stalled left unread is dropped (it is gone)."""
        if self.out.stalled:
            self.out.into.transport.abort()


@dataclass
class BoundedLines(asyncio.Protocol):
    """Reads stdin and hands `reader` each complete line of at most `limit` bytes; a longer
    line is dropped as it streams by (a line on stderr says so)."""

    reader: asyncio.StreamReader
    limit: int = MAX_MESSAGE_BYTES
    pending: bytearray = field(default_factory=bytearray)
    dropping: int = 0
    """Bytes of the line being dropped so far (0: none is)."""

    def data_received(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._keep(data[start:end + 1])
            if self.dropping:
                log.warning("dropped a message of %s bytes from the editor: lace reads at "
                            "most %s bytes of one message", f"{self.dropping:,}",
                            f"{self.limit:,}")
            else:
                self.reader.feed_data(bytes(self.pending))
            self.pending, self.dropping = bytearray(), 0
            start = end + 1
        self._keep(data[start:])

    def _keep(self, part: bytes) -> None:
        if self.dropping:
            self.dropping += len(part)
        elif len(self.pending) + len(part) > self.limit:
            self.dropping = len(self.pending) + len(part)
            self.pending = bytearray()
        else:
            self.pending += part

    def eof_received(self) -> bool:
        self.reader.feed_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reader.feed_eof()


async def editor_stdio(protocol_out: int, stall_s: float,
                       gone: Callable[[str], object]) -> EditorStdio:
    """stdin as bounded lines, and the protocol's own descriptor as a writer."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES + 1)
    await loop.connect_read_pipe(lambda: BoundedLines(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(protocol_out, "wb"))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return EditorStdio(reader, DrainedLines(writer, stall_s), gone)
