"""A hostile provider on 127.0.0.1, speaking Anthropic's Messages API and OpenAI's chat
completions: every answer is a message whose text does not end (as one JSON body, or on
a stream of small text deltas) until the client hangs up or `offered` bytes
are sent (so a client that reads it all still ends); streamed, on either API, as small text
deltas."""

from __future__ import annotations

import json
from collections.abc import Iterator

from aiohttp import web

from lace.llm.fake_server import Handler, ThreadedServer

MB = 1 << 20
MESSAGE_TEXT = b', "content": [{"type": "text", "text": "'
MESSAGE_END = b'"}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}'
COMPLETION_TEXT = (b', "choices": [{"index": 0, "finish_reason": "stop", "message": '
                   b'{"role": "assistant", "content": "')
COMPLETION_END = b'"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'


class EndlessProvider(ThreadedServer):
    """`with EndlessProvider() as server:`, then call `anthropic/<model>` with
    ANTHROPIC_API_BASE (or an OpenAI-compatible provider with its base URL) set to
    `server.base_url`; `requests` counts the calls, `sent` the bytes written in all,
    `hung_up` the answers whose client closed the connection before their end."""

    def __init__(self, *, offered: int = 256 * MB) -> None:
        super().__init__("endless-provider")
        self.offered = offered
        self.requests = 0
        self.sent = 0
        self.hung_up = 0

    def routes(self) -> list[tuple[str, Handler]]:
        return [("/v1/messages", self._messages), ("/chat/completions", self._completions)]

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream"):
            return await self._send(request, _deltas(body["model"]), b"", streamed=True)
        head = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                "stop_sequence": None}
        return await self._send(request, _text(head, MESSAGE_TEXT), MESSAGE_END)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream"):
            return await self._send(request, _chunks(body["model"]), b"", streamed=True)
        head = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                "model": body["model"]}
        return await self._send(request, _text(head, COMPLETION_TEXT), COMPLETION_END)

    async def _send(self, request: web.Request, pieces: Iterator[bytes], end: bytes, *,
                    streamed: bool = False) -> web.StreamResponse:
        self.requests += 1
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if streamed else "application/json"})
        await response.prepare(request)
        try:
            for piece in pieces:
                await response.write(piece)
                self.sent += len(piece)
                if self.sent >= self.offered:
                    break
        except ConnectionError:  # the client hung up: what a limit should do
            self.hung_up += 1
            return response
        await response.write(end)
        await response.write_eof()
        return response


def _text(head: dict[str, object], opening: bytes) -> Iterator[bytes]:
    """A JSON object (`head`'s keys, then `opening` of a string) whose string goes on in
    pieces of a megabyte."""
    yield json.dumps(head)[:-1].encode() + opening
    while True:
        yield b"x" * MB


def _deltas(model: str) -> Iterator[bytes]:
    """A message stream whose text deltas go on, 256 events a write, each under 120 bytes
    and none twice in a row (litellm stops a stream that repeats itself)."""
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}}
    yield _event("message_start", start)
    yield _event("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
    number = 0
    while True:
        events = []
        for _ in range(256):
            number += 1
            events.append(_event("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": f"w{number} "}}))
        yield b"".join(events)


def _chunks(model: str) -> Iterator[bytes]:
    """A chat completion stream whose text deltas go on, 256 chunks a write."""
    number = 0
    while True:
        chunks = []
        for _ in range(256):
            number += 1
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                     "model": model, "choices": [{"index": 0, "delta": {
                         "content": f"w{number} "}, "finish_reason": None}]}
            chunks.append(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode())
        yield b"".join(chunks)


def _event(kind: str, data: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
