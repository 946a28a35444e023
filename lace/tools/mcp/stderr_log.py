"""A stdio MCP server's stderr, kept in `$LACE_HOME/mcp-logs/<name>.log` (never lace's own
stderr, which the app draws on) and rotated so one server's log never takes more than `LOG_CAP`
on disk: a server wrote 300 MB there before. A thread copies the pipe into the log."""

from __future__ import annotations

import codecs
import logging
import os
import re
import threading
from io import TextIOWrapper
from logging.handlers import RotatingFileHandler
from pathlib import Path

from lace.paths import lace_home, open_private, private_folder

LOG_CAP = 10 * 1024 * 1024
"""The most one server's log takes on disk: `<name>.log` and `<name>.log.1`, half each (the
newest lines always kept)."""
_PIECE = 64 * 1024
_handlers: dict[Path, logging.Handler] = {}
_lock = threading.Lock()


class _PrivateRotatingFile(RotatingFileHandler):
    """Rotates at half the cap (less what one piece may add once decoded), keeping one older
    file; new files are its owner's only, and a failed write is dropped quietly."""

    def _open(self) -> TextIOWrapper:
        return open_private(Path(self.baseFilename))  # type: ignore[return-value]

    def handleError(self, record: logging.LogRecord) -> None:
        """A full disk loses log lines, never prints a traceback over the app."""


def _handler(name: str, folder: str) -> logging.Handler | None:
    """The log of the server named `name` (one per file, shared by the server's restarts), or
    None when it cannot be written."""
    path = lace_home() / folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log"
    with _lock:
        if path not in _handlers:
            try:
                private_folder(path.parent)
                handler = _PrivateRotatingFile(path, maxBytes=LOG_CAP // 2 - 4 * _PIECE,
                                               backupCount=1,
                                               encoding="utf-8")
            except OSError:
                return None
            handler.terminator = ""
            _handlers[path] = handler
        return _handlers[path]


class StderrLog:
    """A pipe to hand a server as its stderr (`writer`) and the thread that copies it into the
    server's log; once the server is started, `started` drops lace's copy of the pipe's end,
    so the thread ends when the server does."""

    def __init__(self, name: str, folder: str = "mcp-logs") -> None:
        read_end, write_end = os.pipe()
        self.writer = os.fdopen(write_end, "w")
        self._handler = _handler(name, folder)
        self._thread = threading.Thread(target=self._copy, args=(read_end,), daemon=True,
                                        name=f"lace-mcp-stderr-{name}")
        self._thread.start()

    def started(self) -> None:
        """The server has its own copy of the pipe (or never will): close lace's."""
        if not self.writer.closed:
            self.writer.close()

    def _copy(self, read_end: int) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with open(read_end, "rb", buffering=0) as pipe:
            while piece := pipe.read(_PIECE):
                self._write(decoder.decode(piece))
        self._write(decoder.decode(b"", final=True))

    def _write(self, text: str) -> None:
        if text and self._handler is not None:
            self._handler.handle(logging.makeLogRecord({"msg": text, "levelno": logging.INFO}))
