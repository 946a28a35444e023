"""A hostile or broken PostgreSQL server: it refuses every session with "starting up" (a fault
lace retries without end), and its message carries terminal escapes and 20 KB of text.
lace keeps trying, says so on stderr with the message cut short and escaped and no password,
and a worker waiting for it stops cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lace.store.db import Database
from lace.store.engines import engine_for, reconnect
from lace.store.retry import GaveUpError, run_transaction
from tests.processes import lace_env
from tests.workers import wait_for

PASSWORD = "s3cret-pw"
HOSTILE = "\x1b]0;owned\x07\x1b[2J the database system is starting up " + "x" * 20_000
SSL_OR_GSS = (80877103, 80877104)


class StartingUpForever:
    """A server on 127.0.0.1 that answers every session's start with FATAL 57P03 (the
    database system is starting up) and the message HOSTILE."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sessions = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with client, contextlib.suppress(OSError):
                self._refuse(client)

    def _refuse(self, client: socket.socket) -> None:
        while True:
            length, code = struct.unpack("!ii", _read(client, 8))
            _read(client, length - 8)
            if code not in SSL_OR_GSS:
                break
            client.sendall(b"N")  # no encryption: go on in the clear
        fields = b"".join(kind + text.encode() + b"\0" for kind, text in (
            (b"S", "FATAL"), (b"V", "FATAL"), (b"C", "57P03"), (b"M", HOSTILE))) + b"\0"
        client.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
        self.sessions += 1

    def url(self) -> str:
        return f"postgresql+psycopg://lace:{PASSWORD}@127.0.0.1:{self.port}/lace"

    def close(self) -> None:
        self.listener.close()


def _read(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def server() -> StartingUpForever:
    hostile = StartingUpForever()
    yield hostile
    hostile.close()


def test_its_message_is_named_short_and_escaped_while_lace_keeps_trying(
        server: StartingUpForever, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(reconnect, "UNREACHABLE_WARN_S", 0.2)
    kind = engine_for(server.url())
    database = Database(url=server.url(), kind=kind, engine=kind.create_engine())
    started = time.monotonic()

    def after_a_while() -> bool:
        return time.monotonic() - started > 1.0

    try:
        with caplog.at_level(logging.WARNING, "lace.store"), pytest.raises(GaveUpError):
            run_transaction(database, lambda connection: None, write=False,
                            stopping=after_a_while)
    finally:
        database.close()
    assert server.sessions >= 3  # it kept trying
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings and all("still trying" in warning for warning in warnings)
    for warning in warnings:
        assert "\x1b" not in warning and "\x07" not in warning and "\\x1b" in warning
        assert len(warning) < 500 and PASSWORD not in warning


def test_a_worker_waiting_for_it_stays_up_and_stops_cleanly(
        tmp_path: Path, server: StartingUpForever) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        # a new interpreter: the worker's start against a server that never answers, whole
        worker = subprocess.Popen([sys.executable, "-m", "lace", "worker", "--db", server.url()],
                                  env=lace_env(tmp_path / "home"), stdout=subprocess.DEVNULL,
                                  stderr=stderr)
    try:
        wait_for(lambda: server.sessions >= 3, "the worker to try three times", timeout=60)
        assert worker.poll() is None  # still trying, not ended with an error
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    said = log.read_text()
    assert "Traceback" not in said and PASSWORD not in said and "\x1b" not in said
