"""The stdin `lace mcp serve` reads its client's messages from: the MCP SDK's own waits for
the line it is reading even when the server stops, so a SIGINT or SIGTERM that came while
the client held its stdin open (a supervisor's `kill`, systemd) never ended the process."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterator

import anyio
import anyio.to_thread

STDIN = 0
ABOVE_STANDARD = 3
"""The lowest descriptor the copy of stdin may take: never one of stdin, stdout, stderr."""


class StoppableLines(anyio.AsyncFile[str]):
    """Lines read in a thread that a stop leaves behind (the read itself cannot be cut:
    the thread ends with the process)."""

    async def readline(self) -> str:
        return await anyio.to_thread.run_sync(self.wrapped.readline, abandon_on_cancel=True)


@contextlib.contextmanager
def claimed_stdin() -> Iterator[StoppableLines]:
    """The client's messages, from a copy of descriptor 0, which points at the null device
    meanwhile (as the SDK does: what this process starts reads nothing of them); put back
    after. The copy is never closed: a thread left reading may still use it. Descriptor 0
    must be stdin (`lace mcp serve` refuses to serve over a closed one)."""
    wire = fcntl.fcntl(STDIN, fcntl.F_DUPFD_CLOEXEC, ABOVE_STANDARD)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, STDIN)
    os.close(null)
    try:
        lines = io.TextIOWrapper(os.fdopen(wire, "rb", closefd=False), encoding="utf-8",
                                 errors="replace")
        yield StoppableLines(lines)
    finally:
        os.dup2(wire, STDIN)
