"""An aiohttp server on 127.0.0.1, in a thread of its own, for the scripted providers
(`FakeOpenAI`, `FakeAnthropic`): `with Server(...) as server:` then call `server.base_url`."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Self

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ThreadedServer:
    """Serves `routes()` (POST) on a free port of 127.0.0.1 while the `with` block lasts; its
    address is `base_url` (`url_of` the port). `backlog` is the listening socket's queue."""

    def __init__(self, name: str, *, backlog: int = 128) -> None:
        self.base_url = ""
        self.backlog = backlog
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=name)
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)

    def routes(self) -> list[tuple[str, Handler]]:
        raise NotImplementedError

    def url_of(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        for path, handler in self.routes():
            app.router.add_post(path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=self.backlog)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = self.url_of(port)
