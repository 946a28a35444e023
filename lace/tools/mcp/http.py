"""The streamable HTTP transport to an MCP server, with the server's headers on every request and
every message read with the stdio transport's limit: the SDK bounds a server-sent event but
reads a JSON body whole (a 100 MB result over HTTP took 1.1 GB of lace's memory)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from lace.tools.mcp.connection import MAX_MESSAGE_BYTES


class MessageTooBigError(httpx2.StreamError):
    """A JSON body past the limit; the SDK answers its request with an error naming this."""


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that stops with `MessageTooBigError` past `limit` bytes."""

    def __init__(self, body: Any, limit: int) -> None:
        self.body, self.limit = body, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for piece in self.body:
            size += len(piece)
            if size > self.limit:
                raise MessageTooBigError(
                    f"the server's answer was more than {self.limit // (1 << 20)} MB, the most "
                    "lace reads of one message from an MCP server")
            yield piece

    async def aclose(self) -> None:
        await self.body.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Sends as httpx does; caps the body of every answer but an event stream (whose events
    the SDK bounds itself)."""

    def __init__(self, limit: int) -> None:
        self.inner, self.limit = httpx2.AsyncHTTPTransport(), limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _CappedBody(response.stream, self.limit)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


HTTP_TIMEOUT_S, EVENT_STREAM_READ_TIMEOUT_S = 30.0, 300.0
"""The MCP SDK's own timeouts for a request and for a quiet event stream (kept here: the SDK
holds them in a private module)."""


@contextlib.asynccontextmanager
async def capped_http(url: str, headers: dict[str, str],
                      limit: int = MAX_MESSAGE_BYTES) -> AsyncIterator[Any]:
    """Yield the (read, write) streams the SDK's `Client` takes, with the SDK's timeouts."""
    from mcp.client.streamable_http import streamable_http_client

    client = httpx2.AsyncClient(
        transport=_CappedTransport(limit), headers=headers or None,
        timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=EVENT_STREAM_READ_TIMEOUT_S))
    async with client, streamable_http_client(url, http_client=client,
                                              max_sse_event_size=limit) as streams:
        yield streams
