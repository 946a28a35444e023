"""The HTTP transport of lace's `AsyncOpenAI` clients: the SDK's aiohttp backend
(`openai[aiohttp]`) with a pool sized for a fan-out, whose answers are read with a limit
(`MAX_ANSWER_BYTES`). Not httpx's own pool: it looks at every connection for every request, so
its CPU grows with the square of the calls in flight (300 calls at once took 35 s of a 2 s
latency through it, 4 s through aiohttp). Imported with the SDK, never before."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from httpx_aiohttp import AiohttpTransport

from lace.llm.openai_sdk import MAX_ANSWER_BYTES, AnswerTooLargeError


def limited_transport(connections: int) -> httpx.AsyncBaseTransport:
    """A transport that opens and keeps up to `connections` connections (lace's `max_running`
    caps the calls in flight, not this pool)."""
    return _Limited(AiohttpTransport(limits=httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections)))


class _Limited(httpx.AsyncBaseTransport):
    """Answers read with a limit: `MAX_ANSWER_BYTES` of a whole answer, or of one line of a
    server-sent event stream (a long stream is many lines)."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.transport.handle_async_request(request)
        lines = response.headers.get("content-type", "").startswith("text/event-stream")
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_LimitedStream(response.stream, lines=lines),
                              extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self.transport.aclose()


class _LimitedStream(httpx.AsyncByteStream):
    """The bytes of an answer, refused past the limit."""

    def __init__(self, stream: httpx.AsyncByteStream, *, lines: bool) -> None:
        self.stream, self.lines = stream, lines

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for piece in self.stream:
            end = piece.rfind(b"\n") if self.lines else -1
            size = len(piece) - end - 1 if end >= 0 else size + len(piece)
            if size > MAX_ANSWER_BYTES:
                raise AnswerTooLargeError
            yield piece

    async def aclose(self) -> None:
        await self.stream.aclose()
