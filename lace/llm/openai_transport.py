"""The HTTP transport of lace's `AsyncOpenAI` clients: httpx's own, with a pool of this size,
whose answers are read with a limit (`MAX_ANSWER_BYTES`). Imported with the SDK, never before
(httpx's import is a tenth of a second)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from lace.llm.openai_sdk import MAX_ANSWER_BYTES, AnswerTooLargeError


def limited_transport(kept_alive: int) -> httpx.AsyncBaseTransport:
    """A transport with no cap on connections (lace's `max_running` caps the calls in flight)
    that keeps `kept_alive` idle ones."""
    return _Limited(httpx.AsyncHTTPTransport(limits=httpx.Limits(
        max_connections=None, max_keepalive_connections=kept_alive)))


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
