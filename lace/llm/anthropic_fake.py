"""A small Anthropic Messages server on 127.0.0.1 for tests and benchmarks. It answers from a
script (JSON or SSE stream, text and `tool_use` blocks) and keeps a prompt cache as Anthropic
describes it: the prefix up to each `cache_control` mark is written to the cache, and a later
request reads the longest cached prefix that ends at or up to 20 blocks before one of its marks.
So its `cache_read_input_tokens` / `cache_creation_input_tokens` follow from the marks a client
sends, and a test of caching can fail."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from lace.llm.fake_server import Handler, ThreadedServer
from lace.llm.types import ScriptedReply

Script = Callable[[str, list[dict[str, Any]]], ScriptedReply]
MAX_MARKS = 4
LOOKBACK_BLOCKS = 20


@dataclass
class AnthropicExchange:
    """One request: its body, the key it carried, and the usage answered (None if refused)."""

    body: dict[str, Any]
    api_key: str | None
    usage: dict[str, Any] | None = None


@dataclass
class _Block:
    prefix_hash: str
    tokens_through: int
    marked: bool


@dataclass
class PromptCache:
    """The prefixes written so far (by hash) and the smallest prefix worth caching."""

    min_tokens: int = 1024
    written: set[str] = field(default_factory=set)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """Input, cache-read and cache-write tokens of a request, writing its marked prefixes."""
        blocks = prompt_blocks(body)
        total = blocks[-1].tokens_through if blocks else 0
        marks = [index for index, block in enumerate(blocks) if block.marked]
        read_at = -1
        for mark in marks:
            for index in range(mark, max(-1, mark - LOOKBACK_BLOCKS), -1):
                if blocks[index].prefix_hash in self.written:
                    read_at = max(read_at, index)
                    break
        read = blocks[read_at].tokens_through if read_at >= 0 else 0
        cached_through = read
        for mark in marks:
            if blocks[mark].tokens_through >= self.min_tokens:
                self.written.add(blocks[mark].prefix_hash)
                cached_through = max(cached_through, blocks[mark].tokens_through)
        return {"input_tokens": total - cached_through, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": cached_through - read}


def block_tokens(block: Any) -> int:
    """A block's tokens: one per four characters of its JSON (without its mark)."""
    if isinstance(block, dict):
        block = {key: value for key, value in block.items() if key != "cache_control"}
    return max(1, len(json.dumps(block, sort_keys=True)) // 4)


def prompt_blocks(body: dict[str, Any]) -> list[_Block]:
    """The request's blocks in Anthropic's cache order (tools, system, messages), each with the
    hash of the prefix it ends and the tokens up to it."""
    items: list[tuple[Any, bool]] = [(tool, "cache_control" in tool)
                                     for tool in body.get("tools") or []]
    system = body.get("system") or []
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        items.append((block, "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for part in parts:
            items.append(({"role": message.get("role"), **part}, "cache_control" in part))
    blocks: list[_Block] = []
    digest, tokens = hashlib.sha256(), 0
    for item, marked in items:
        tokens += block_tokens(item)
        unmarked = {k: v for k, v in item.items() if k != "cache_control"} \
            if isinstance(item, dict) else item
        digest.update(json.dumps(unmarked, sort_keys=True).encode())
        blocks.append(_Block(digest.copy().hexdigest(), tokens, marked))
    return blocks


def plain_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's conversation as OpenAI-style messages (system, user, assistant with
    `tool_calls`, tool), so that the scripts written for the OpenAI fakes read it too."""
    system = body.get("system") or []
    texts = [system] if isinstance(system, str) else [block.get("text", "") for block in system]
    plain: list[dict[str, Any]] = [{"role": "system", "content": "\n".join(texts)}]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            plain.append({"role": message["role"], "content": content})
            continue
        text = "".join(part.get("text", "") for part in content if part.get("type") == "text")
        calls = [{"id": part["id"], "type": "function", "function": {
            "name": part["name"], "arguments": json.dumps(part.get("input") or {})}}
            for part in content if part.get("type") == "tool_use"]
        for part in content:
            if part.get("type") == "tool_result":
                result = part.get("content")
                plain.append({"role": "tool", "tool_call_id": part.get("tool_use_id"),
                              "content": result if isinstance(result, str) else "".join(
                                  piece.get("text", "") for piece in result or [])})
        if text or calls:
            plain.append({"role": message["role"], "content": text or None,
                          **({"tool_calls": calls} if calls else {})})
    return plain


class FakeAnthropic(ThreadedServer):
    """`with FakeAnthropic(script) as server:` then call `anthropic/<model>` with
    ANTHROPIC_API_BASE set to `server.base_url`. `exchanges` records every request and the
    usage it got; `usage_patch` replaces fields of every usage answered (a hostile provider)."""

    def __init__(self, script: Script, *, min_cacheable_tokens: int = 1024) -> None:
        super().__init__("anthropic-fake")
        self.script = script
        self.cache = PromptCache(min_cacheable_tokens)
        self.exchanges: list[AnthropicExchange] = []
        self.usage_patch: dict[str, Any] = {}

    def routes(self) -> list[tuple[str, Handler]]:
        return [("/v1/messages", self._messages)]

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        exchange = AnthropicExchange(body, request.headers.get("x-api-key"))
        self.exchanges.append(exchange)
        if not exchange.api_key:
            return _error(401, "authentication_error", "x-api-key header is required")
        marks = sum(block.marked for block in prompt_blocks(body))
        if marks > MAX_MARKS:
            return _error(400, "invalid_request_error", "A maximum of 4 blocks with "
                          f"cache_control may be provided. Found {marks}.")
        reply = self.script(body["model"], plain_messages(body))
        usage: dict[str, Any] = {**self.cache.usage(body),
                                 "output_tokens": reply.completion_tokens, **self.usage_patch}
        exchange.usage = usage
        content = self._content(reply)
        stop = "tool_use" if any(part["type"] == "tool_use" for part in content) else "end_turn"
        message = {"id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant",
                   "model": body["model"], "stop_sequence": None}
        if not body.get("stream"):
            return web.json_response({**message, "content": content, "stop_reason": stop,
                                      "usage": usage})
        return await self._stream(request, message, content, stop, usage)

    def _content(self, reply: ScriptedReply) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] \
            if reply.text else []
        for name, arguments in reply.tool_calls:
            content.append({"type": "tool_use", "id": f"toolu_{next(self._ids)}", "name": name,
                            "input": json.loads(arguments) if isinstance(arguments, str)
                            else arguments})
        return content

    @staticmethod
    async def _stream(request: web.Request, message: dict[str, Any],
                      content: list[dict[str, Any]], stop: str,
                      usage: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(kind: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}"
                                 "\n\n".encode())

        start_usage = {**usage, "output_tokens": 1}
        await send("message_start", {"message": {**message, "content": [], "stop_reason": None,
                                                  "usage": start_usage}})
        for index, part in enumerate(content):
            if part["type"] == "text":
                await send("content_block_start", {"index": index, "content_block": {
                    "type": "text", "text": ""}})
                words = part["text"].split(" ")
                for number, word in enumerate(words):
                    await send("content_block_delta", {"index": index, "delta": {
                        "type": "text_delta",
                        "text": word if number == len(words) - 1 else word + " "}})
            else:
                await send("content_block_start", {"index": index, "content_block": {
                    **part, "input": {}}})
                arguments = json.dumps(part["input"])
                for start in range(0, len(arguments), 16):
                    await send("content_block_delta", {"index": index, "delta": {
                        "type": "input_json_delta", "partial_json": arguments[start:start + 16]}})
            await send("content_block_stop", {"index": index})
        await send("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage.get("output_tokens")}})
        await send("message_stop", {})
        await response.write_eof()
        return response


def _error(status: int, kind: str, text: str) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": text}},
                             status=status)
