"""A small OpenAI-compatible chat server on 127.0.0.1 for tests and benchmarks. It answers from a
script after a fixed latency (JSON or SSE stream) and misbehaves on request: an HTTP error
status or a stream dropped midway. It runs on its own thread and loop, and stamps each request's
arrival and the end of its reply with `time.monotonic()` (on Linux the same clock in every
process, so a benchmark can line the stamps up with its own)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lace.llm.fake_server import Handler, ThreadedServer
from lace.llm.types import ScriptedReply

Script = Callable[[str, list[dict[str, Any]]], ScriptedReply]
FAULTS = ("429", "500", "503", "drop_stream")


@dataclass
class Exchange:
    """One request: its body, the reply the script gave (None for a fault status), and when
    (`time.monotonic()`) it arrived and its reply was sent whole (None until then)."""

    body: dict[str, Any]
    arrived: float
    authorization: str | None = None
    """The request's Authorization header (the key the caller sent)."""
    reply: ScriptedReply | None = None
    sent: float | None = None
    status: int = 200


class FakeOpenAI(ThreadedServer):
    """`with FakeOpenAI(script) as server:` then call `openai/<model>` at `server.base_url`.
    Append to `faults` to make the next requests fail, one fault per request. `exchanges`
    records every request with its timestamps; `backlog` is the listening socket's queue of
    connections not yet accepted (raise it when hundreds of clients connect at once)."""

    def __init__(self, script: Script, latency_s: float = 0.0, *, backlog: int = 128) -> None:
        super().__init__("openai-fake", backlog=backlog)
        self.script, self.latency_s = script, latency_s
        self.faults: list[str] = []  # of FAULTS
        self.echo_key = False  # errors repeat the caller's key, as careless providers do
        self.requests: list[dict[str, Any]] = []
        self.exchanges: list[Exchange] = []

    def routes(self) -> list[tuple[str, Handler]]:
        return [("/v1/chat/completions", self._chat)]

    def url_of(self, port: int) -> str:
        return f"http://127.0.0.1:{port}/v1"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await request.json()
        self.requests.append(body)
        exchange = Exchange(body, arrived, request.headers.get("Authorization"))
        self.exchanges.append(exchange)
        fault = self.faults.pop(0) if self.faults else None
        if fault and fault.isdigit():
            key = f" for {request.headers.get('Authorization')}" if self.echo_key else ""
            exchange.status = int(fault)
            return await self._send(request, exchange, web.json_response(
                {"error": {"message": f"fake error {fault}{key}", "type": "server_error"}},
                status=int(fault)))
        await asyncio.sleep(self.latency_s)
        reply = exchange.reply = self.script(body["model"], body["messages"])
        calls = [{"id": f"call_{next(self._ids)}", "type": "function",
                  "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                               else json.dumps(arguments)}}
                 for name, arguments in reply.tool_calls]
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                 "total_tokens": _total(reply), **({} if reply.cache_read_tokens is None else {
                     "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens}}),
                 **({} if reply.reasoning_tokens is None else {
                     "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens}})}
        finish = "tool_calls" if calls else "stop"
        head = {"id": f"chatcmpl-{next(self._ids)}", "created": int(time.time()),
                "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text, **({"tool_calls": calls}
                                                                      if calls else {})}
            return await self._send(request, exchange, web.json_response(
                {**head, "object": "chat.completion", "usage": usage,
                 "choices": [{"index": 0, "message": message, "finish_reason": finish}]}))
        response = await self._stream(request, head, reply.text or "", calls, usage, finish,
                                      drop=fault == "drop_stream")
        exchange.sent = time.monotonic()
        return response

    @staticmethod
    async def _send(request: web.Request, exchange: Exchange,
                    response: web.StreamResponse) -> web.StreamResponse:
        """Write the whole response now (not after the handler returns), to stamp its end."""
        await response.prepare(request)
        await response.write_eof()
        exchange.sent = time.monotonic()
        return response

    @staticmethod
    async def _stream(request: web.Request, head: dict[str, Any], text: str,
                      calls: list[dict[str, Any]], usage: dict[str, int], finish: str, *,
                      drop: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            chunk = {**head, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        words = text.split(" ")
        for number, word in enumerate(words):
            await send({"role": "assistant",
                        "content": word if number == len(words) - 1 else word + " "})
            if drop:  # the connection dies mid-answer
                assert request.transport is not None
                request.transport.abort()
                return response
        for index, call in enumerate(calls):
            await send({"tool_calls": [{"index": index, **call}]})
        await send({}, finish)
        usage_chunk = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        await response.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _total(reply: ScriptedReply) -> Any:
    """`total_tokens` of a reply's usage, or None when a test gives counts that do not add up
    (a hostile provider's)."""
    try:
        return reply.prompt_tokens + reply.completion_tokens
    except TypeError:
        return None
