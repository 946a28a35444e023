"""An HTTP answer read with a limit, as httpx transports hand it over: past `MAX_ANSWER_BYTES`
its stream raises `AnswerTooLargeError` while it is read, so no more than the limit (and one
piece) is ever held."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from lace.llm.answer_limit import MAX_ANSWER_BYTES, AnswerTooLargeError


def limited(response: httpx.Response, request: httpx.Request, *,
            by_line: bool) -> httpx.Response:
    """`response` whose body is refused past the limit: all of it, or with `by_line` each line
    of a server-sent event stream (whose length adds up only where what is read is not kept)."""
    lines = by_line and response.headers.get("content-type", "").startswith("text/event-stream")
    assert isinstance(response.stream, httpx.AsyncByteStream)
    return httpx.Response(response.status_code, headers=response.headers,
                          stream=_LimitedStream(response.stream, lines=lines),
                          extensions=response.extensions, request=request)


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
