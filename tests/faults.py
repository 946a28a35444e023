"""Faults a PostgreSQL server inflicts on lace, injected for real: every lace backend
terminated (what a restart, a failover or a pooler does to a session), the server restarted,
and a proxy that cuts the connection just after it forwards a COMMIT (its outcome unknown to
lace); and the scripted fan-out they strike."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa

from lace.llm.types import ScriptedReply
from tests.postgres import PostgresServer

HELPERS = 30


def fan_out(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root creates HELPERS tasks for `new:openai/worker` agents and sums up once all are
    done; each helper notes, then completes its task, each step again until it is done (as a
    model does after a tool call that a takeover ended as `Interrupted`)."""
    said = [str(message.get("content") or "") for message in messages]
    if model == "worker":
        task_id = re.findall(r"assigned task '([^']+)'", "\n".join(said))[-1]
        results = [str(message.get("content") or "") for message in messages
                   if message["role"] == "tool"]
        if not any(result.startswith("Added note") for result in results):
            return ScriptedReply(tool_calls=[("task_add_note", {"task_id": task_id,
                                                                "note": "on it"})])
        if not any("completed" in result.lower() for result in results):
            return ScriptedReply(tool_calls=[("task_complete", {"task_id": task_id,
                                                                "message": "done"})])
        return ScriptedReply("Done.")
    created = sum(text.count("Created task") for text in said)
    if created < HELPERS:  # task_create takes up to 20 tasks a call: two calls of 15
        # a notice per task (no batch), so that each task's one completion row can be counted
        return ScriptedReply(tool_calls=[("task_create", {"notify_each": True, "tasks": [
            {"title": f"Part {n}", "prompt": f"Do part {n}.", "assigned_to": "new:openai/worker"}
            for n in range(created + 1, created + HELPERS // 2 + 1)]})])
    completed = sum(text.count("has been completed by") for text in said)  # a batch: all
    return ScriptedReply(f"All {HELPERS} tasks are done." if completed >= HELPERS
                         else f"{completed} of {HELPERS} done.")


def terminate_backends(url: str) -> int:
    """End every other session on the database of `url` (lace's), as a restart would; how
    many there were."""
    with psycopg.connect(url, autocommit=True) as admin:
        return len(admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid()").fetchall())


@contextmanager
def terminating_every(url: str, period_s: float) -> Iterator[list[int]]:
    """Terminate lace's backends as the block starts and every `period_s` seconds while it
    runs; yields the counts terminated each time (filled as it goes)."""
    counts: list[int] = []
    done = threading.Event()

    def strike() -> None:
        counts.append(terminate_backends(url))
        while not done.wait(period_s):
            counts.append(terminate_backends(url))

    thread = threading.Thread(target=strike, daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        done.set()
        thread.join()


def restart(server: PostgresServer, down_s: float) -> None:
    """Stop the server (fast: every session ended), keep it down `down_s` seconds (the outage
    lace must ride out), then start it again."""
    server.stop_fast()
    time.sleep(down_s)
    server.start_again()


class Proxy:
    """A TCP proxy on 127.0.0.1 to the server at `port`; each connection through it handed to
    `_connected` with its server side."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database_url: str) -> str:
        """`database_url` through this proxy."""
        return sa.make_url(database_url).set(port=self.port).render_as_string(
            hide_password=False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._connected(client, socket.create_connection(self.target))

    def _connected(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError


class CommitCutter(Proxy):
    """A TCP proxy to the server that, when `armed`, passes one COMMIT on and then closes both
    sides instead of passing the server's answer back: the transaction committed, but lace
    cannot know. With `after`, only the COMMIT of a connection that sent `after` (a statement's
    text) is cut: one chosen transaction of a whole process."""

    def __init__(self, port: int, after: bytes = b"") -> None:
        super().__init__(port)
        self.armed = threading.Event()
        self.after = after
        self.cut = 0
        self.start()

    def _connected(self, client: socket.socket, server: socket.socket) -> None:
        committing = threading.Event()
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(source, sink, committing, client),
                             daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, committing: threading.Event,
              client: socket.socket) -> None:
        sent_after = not self.after
        try:
            while data := source.recv(65536):
                if source is not client and committing.is_set():
                    self.cut += 1  # the answer to COMMIT: swallowed, and the line cut
                    return
                sent_after = sent_after or (source is client and self.after in data)
                if source is client and sent_after and self.armed.is_set() \
                        and b"COMMIT\x00" in data:
                    self.armed.clear()
                    committing.set()  # before the server can answer
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for side in (source, sink):
                with contextlib.suppress(OSError):
                    side.shutdown(socket.SHUT_RDWR)
                side.close()

    def close(self) -> None:
        self.listener.close()


class OutageAt(Proxy):
    """A TCP proxy to the server that goes away, as a server does at the start of an outage,
    the moment a client sends `statement` (a statement's text): every connection through it cut
    (that statement never reaches the server) and every new one refused, for good."""

    def __init__(self, port: int, statement: bytes) -> None:
        super().__init__(port)
        self.statement = statement
        self.down = threading.Event()
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        self.start()

    def _connected(self, client: socket.socket, server: socket.socket) -> None:
        with self._guard:
            self._sockets += [client, server]
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(source, sink, client),
                             daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if source is client and self.statement in data:
                    self.close()
                    return
                sink.sendall(data)

    def close(self) -> None:
        """Go away: refuse new connections and cut every one made."""
        self.down.set()
        self.listener.close()
        with self._guard:
            for side in self._sockets:
                with contextlib.suppress(OSError):
                    side.shutdown(socket.SHUT_RDWR)
                side.close()
