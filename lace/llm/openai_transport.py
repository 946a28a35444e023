"""The HTTP transport of lace's `AsyncOpenAI` clients: the SDK's aiohttp backend
(`openai[aiohttp]`) with a pool sized for a fan-out, whose answers are read with a limit
(`limited_http`: a whole answer, or one line of a stream, whose chunks the client does not
keep). Not httpx's own pool: it looks at every connection for every request, so its CPU grows
with the square of the calls in flight (300 calls at once took 35 s of a 2 s latency through
it, 4 s through aiohttp). Imported with the SDK, never before."""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport

from lace.llm.limited_http import limited


def limited_transport(connections: int) -> httpx.AsyncBaseTransport:
    """A transport that opens and keeps up to `connections` connections (lace's `max_running`
    caps the calls in flight, not this pool)."""
    return _Limited(AiohttpTransport(limits=httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections)))


class _Limited(httpx.AsyncBaseTransport):
    """Answers read with a limit: a whole answer, or one line of a server-sent event stream
    (a long stream is many lines; `OpenAIClient` keeps a bounded part of it)."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return limited(await self.transport.handle_async_request(request), request, by_line=True)

    async def aclose(self) -> None:
        await self.transport.aclose()
