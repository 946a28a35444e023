"""`lace web` as the browser tests drive it: the server on a free loopback port, Debian's
Chromium through Playwright, and the app's screen read back from its terminal stream."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pyte
import pytest

from tests.lace_forks import lace_popen
from tests.processes import free_port

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]
START_S = 60.0


@dataclass(frozen=True)
class Served:
    """A running `lace web`: its address, the token it printed (empty if none), its process."""

    url: str
    token: str
    process: subprocess.Popen[bytes]

    @property
    def login(self) -> str:
        """The address with the token, as lace web prints it for the person to open."""
        return f"{self.url}/?token={self.token}"


@contextmanager
def lace_web(tmp_path: Path, *flags: str, env: dict[str, str]) -> Iterator[Served]:
    """`lace web` on a free port of 127.0.0.1 until the block ends."""
    port = free_port()
    log = (tmp_path / "web.log").open("w+")
    server = lace_popen(
        [sys.executable, "-m", "lace", "--db", str(tmp_path / "lace.db"), "web",
         "--port", str(port), *flags], cwd=tmp_path, env={**os.environ, **env},
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"lace web exited with {server.returncode}: "
                            f"{(tmp_path / 'web.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"lace web did not listen within {START_S} s")
                time.sleep(0.2)
        printed = re.search(r"\?token=([A-Za-z0-9_-]+)", (tmp_path / "web.log").read_text())
        yield Served(f"http://127.0.0.1:{port}", printed.group(1) if printed else "", server)
    finally:
        server.terminate()
        server.wait(30)
        log.close()


class TerminalScreen:
    """What the page's terminal shows, rebuilt from the bytes the app sent it (pyte emulates
    the terminal the page draws on a canvas, whose text is not in the page's DOM)."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(80, 24)
        self.stream = pyte.ByteStream(self.screen)
        self.received: list[bytes] = []
        self.sent: list[str] = []

    def watch(self, websocket: Any) -> None:
        """Follow the app's websocket: its size, what it draws, what the page sends."""
        query = parse_qs(urlsplit(websocket.url).query)
        self.screen.resize(int(query["height"][0]), int(query["width"][0]))
        websocket.on("framereceived", self._received)
        websocket.on("framesent", self._sent)

    def _received(self, payload: bytes | str) -> None:
        if isinstance(payload, bytes):
            self.received.append(payload)
            self.stream.feed(payload)

    def _sent(self, payload: bytes | str) -> None:
        if isinstance(payload, str):
            self.sent.append(payload)
            message = json.loads(payload)
            if message[0] == "resize":
                self.screen.resize(message[1]["height"], message[1]["width"])

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)


def wait_for_text(page: Any, terminal: TerminalScreen, text: str, seconds: float) -> None:
    """Let the page run until the terminal shows `text`; fail (with the screen) if it does not
    within `seconds`."""
    deadline = time.monotonic() + seconds
    while text not in terminal.text():
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} not on the page's screen after {seconds} s:\n"
                        f"{terminal.text()}")
        page.wait_for_timeout(250)


async def app_handshake(url: str, headers: dict[str, str], query: str = "") -> int:
    """Open the app's websocket at `url` with `headers`: the handshake's status (101: an app
    was started for it)."""
    async with aiohttp.ClientSession() as client:
        try:
            async with client.ws_connect(f"{url}/ws?width=80&height=24{query}",
                                         headers=headers) as websocket:
                await websocket.close()
                return 101
        except aiohttp.WSServerHandshakeError as error:
            return error.status
