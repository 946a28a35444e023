"""A hostile Anthropic Messages endpoint on 127.0.0.1: every answer is a message whose text
does not end, as one JSON body or as a stream of small text deltas, until the client hangs up
or `offered` bytes are sent (so a client that reads it all still ends)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from aiohttp import web

from lace.llm.fake_server import Handler, ThreadedServer

MB = 1 << 20


class EndlessAnthropic(ThreadedServer):
    """`with EndlessAnthropic(streamed=...) as server:`, then call `anthropic/<model>` with
    ANTHROPIC_API_BASE set to `server.base_url`; `requests` counts the calls, `sent` the bytes
    written in all."""

    def __init__(self, *, offered: int = 256 * MB) -> None:
        super().__init__("endless-anthropic")
        self.offered = offered
        self.requests = 0
        self.sent = 0

    def routes(self) -> list[tuple[str, Handler]]:
        return [("/v1/messages", self._messages)]

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests += 1
        streamed = bool(body.get("stream"))
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if streamed else "application/json"})
        await response.prepare(request)
        pieces = _deltas(body["model"]) if streamed else _text(body["model"])
        try:
            for piece in pieces:
                await response.write(piece)
                self.sent += len(piece)
                if self.sent >= self.offered:
                    break
        except ConnectionError:  # the client hung up: what a limit should do
            return response
        await response.write(b'"}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, '
                             b'"output_tokens": 1}}' if not streamed else b"")
        await response.write_eof()
        return response


def _text(model: str) -> Iterator[bytes]:
    """A message whose text goes on in pieces of a megabyte."""
    head = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                       "stop_sequence": None})
    yield head[:-1].encode() + b', "content": [{"type": "text", "text": "'
    while True:
        yield b"x" * MB


def _deltas(model: str) -> Iterator[bytes]:
    """A message stream whose text deltas (each a few words, none twice in a row: litellm
    stops a stream that repeats itself) go on, 256 events a write."""
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
                "delta": {"type": "text_delta", "text": f"word {number} "}}))
        yield b"".join(events)


def _event(kind: str, data: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
