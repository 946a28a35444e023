"""`openai/...` models called with the openai SDK directly, as litellm would call them, without
litellm's per-call cost (milliseconds of CPU), and with litellm's import (seconds; litellm
prices the answers of the models it has a price for) overlapping the first call. The request,
the reply, the usage, the price and the sorting of errors are litellm's; `served_directly`
leaves to litellm the models it would call differently (the Responses API)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from lace.core.text import MAX_REPLY_CHARACTERS, valid_text
from lace.llm.answer_limit import capped_chunks, too_large
from lace.llm.calls import (
    ProviderClient,
    counted_tokens,
    model_error,
    outgoing,
    passed_on,
    refused,
)
from lace.llm.checks import LOOPBACK_HOSTS
from lace.llm.litellm_setup import litellm
from lace.llm.openai_sdk import Settings, new_client, sdk_ready
from lace.llm.prices import model_entry, price_table
from lace.llm.pricing import call_cost_off_loop, import_in_background, may_be_priced
from lace.llm.types import DeltaCallback, ModelError, ModelReply, session_tree

if TYPE_CHECKING:
    from openai import AsyncOpenAI, RequestOptions

OPENAI_URL = "https://api.openai.com/v1"
COMPLETIONS = "/chat/completions"
AS_CREATE_DOES: RequestOptions = {"security": {"bearer_auth": True}}
"""The request options `chat.completions.create` sends (the API key as a bearer token)."""
MISSING_KEY = ("Missing credentials. Please pass an `api_key`, or set the `OPENAI_API_KEY` "
               "environment variable.")
_GPT_VERSION = re.compile(r"^gpt-(\d+)(?:\.(\d+))?(?=[.-]|$)")


def base_url() -> str:
    """The endpoint litellm would call for `openai/...`."""
    return os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or OPENAI_URL


def on_openai(url: str) -> bool:
    """Whether `url` is OpenAI's own endpoint (which needs a key; a local server does not)."""
    host = urlsplit(url.strip()).hostname or ""
    return host == "api.openai.com" or host.endswith(".api.openai.com")


def served_directly(model: str) -> bool:
    """Whether `OpenAIClient` calls this model exactly as litellm would: an `openai/` chat model
    that litellm does not move to the Responses API (a `responses` model in its price table, or
    gpt-5.4 and later on OpenAI's own endpoint, which refuses tools on chat completions)."""
    provider, _, name = model.partition("/")
    if provider != "openai" or name.startswith("responses/"):
        return False
    if (model_entry(name) or {}).get("mode") == "responses":
        return False
    version = _GPT_VERSION.match(name.split("/")[-1])
    newer = version is not None and (int(version[1]), int(version[2] or 0)) >= (5, 4)
    return not (newer and on_openai(base_url()))


def system_as_user(name: str) -> bool:
    """litellm sends an o-series model that its price table does not mark as supporting system
    messages (o3, o4-mini, ...) its system messages as user messages."""
    entry = price_table().get(name) or {}
    return (len(name) > 1 and name[0] == "o" and name[1].isdigit()
            and entry.get("litellm_provider") == "openai"
            and not (model_entry(name) or {}).get("supports_system_messages"))


def session_key(url: str) -> str | None:
    """The `prompt_cache_key` of this call on `url`: one per session tree (every agent of a
    session shares its prompt prefix), on OpenAI's own endpoint, which takes one (another
    server may refuse a field it does not know); None elsewhere or outside a session."""
    tree = session_tree.get()
    if tree is None or not on_openai(url):
        return None
    return "lace-" + hashlib.sha256(tree.encode()).hexdigest()[:24]


def request(name: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
            cache_key: str | None = None) -> dict[str, Any]:
    """The body litellm sends for `openai/<name>`: the `outgoing` conversation without keys set
    to None (`"content": None` beside tool calls), system messages as user ones where
    `system_as_user`, and the tools as they are; with the `prompt_cache_key`, when given."""
    demoted = system_as_user(name)
    sent = [{"content": message["content"], "role": "user"}
            if demoted and message.get("role") == "system"
            else {key: value for key, value in message.items() if value is not None}
            for message in outgoing(messages)]
    return {"model": name, "messages": sent, **({"tools": tools} if tools else {}),
            **({"prompt_cache_key": cache_key} if cache_key else {})}


class OpenAIClient(ProviderClient):
    """Calls `openai/<name>` through the SDK's `AsyncOpenAI`, one per event loop and endpoint
    (`_client`), streamed when `on_delta` is given."""

    _shared: ClassVar[tuple[tuple[Any, ...], AsyncOpenAI, asyncio.Task[None]] | None] = None

    def check_allowed(self, model: str) -> None:
        """The shared guards, and with remote calls disabled the endpoint this client calls
        must be on this machine too (not only the one a variable litellm ignores names)."""
        super().check_allowed(model)
        if not self.allow_remote_calls and urlsplit(base_url()).hostname not in LOOPBACK_HOSTS:
            raise ModelError(f"remote model calls are disabled here ({model})", transient=False)

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """One model call; raises ModelError."""
        self.check_allowed(model)
        name = model.split("/", 1)[1]
        priced = not self.is_unpriced(model) and may_be_priced(model)
        if priced:
            import_in_background()  # litellm prices the answer; its import overlaps the call
        arguments = request(name, messages, tools, cache_key=session_key(base_url()))
        sent = arguments["messages"]
        try:
            client = await self._client()
            from openai import AsyncStream
            from openai.types.chat import ChatCompletion, ChatCompletionChunk

            # `post` with the body as it is: what `chat.completions.create` sends, without its
            # walk of every message and tool schema against the SDK's types (half its CPU)
            if on_delta is None:
                answer = await client.post(COMPLETIONS, body=arguments, cast_to=ChatCompletion,
                                           options=AS_CREATE_DOES)
                message, usage = _message(answer.choices[0].message), answer.usage
            else:
                stream = await client.post(
                    COMPLETIONS, body={**arguments, "stream": True,
                                       "stream_options": {"include_usage": True}},
                    cast_to=ChatCompletion, options=AS_CREATE_DOES, stream=True,
                    stream_cls=AsyncStream[ChatCompletionChunk])
        except ModelError:
            raise
        except Exception as error:
            raise too_large(error) or refused(error, "openai", base_url()) or openai_error(
                error, status=getattr(error, "status_code", None) or 500) from error
        lengths: dict[str | int, int] = {}
        if on_delta is not None:
            message, usage, lengths = await self._streamed(stream, name, sent, on_delta)
        tokens, _ = counted_tokens(usage, sent, tools, message)
        cost = await call_cost_off_loop(model, tokens) if priced else None
        return self.reply(model, message, tokens, cost, lengths)

    async def _client(self) -> AsyncOpenAI:
        """The shared client, made on first use inside the running loop (its connections
        belong to that loop), and again when the loop or the endpoint settings change."""
        loop = asyncio.get_running_loop()
        settings = Settings(base_url(), os.environ.get("OPENAI_API_KEY") or None,
                            os.environ.get("OPENAI_ORGANIZATION") or None,
                            float(os.environ.get("REQUEST_TIMEOUT") or 600))
        shared = OpenAIClient._shared
        if shared is None or shared[0] != (loop, settings):
            if not settings.api_key and on_openai(settings.base_url):  # elsewhere: a local server
                raise model_error("InternalServerError", MISSING_KEY)  # as litellm says it
            await sdk_ready()
            shared = OpenAIClient._shared
            if shared is None or shared[0] != (loop, settings):
                client = new_client(settings)
                if shared is not None and not shared[2].get_loop().is_closed():
                    shared[2].get_loop().call_soon_threadsafe(shared[2].cancel)  # closes it
                OpenAIClient._shared = shared = ((loop, settings), client,
                                                 loop.create_task(_closed_at_the_end(client)))
        return shared[1]

    @staticmethod
    async def _streamed(stream: Any, name: str, sent: list[dict[str, Any]],
                        on_delta: DeltaCallback) -> tuple[Any, Any, dict[str | int, int]]:
        """The streamed answer put together as litellm's `stream_chunk_builder` does: text
        deltas passed on as they come, tool-call fragments joined by index, the usage chunk.
        At most `MAX_REPLY_CHARACTERS` of text and arguments are kept (and passed on), with
        their whole lengths; a stream past `MAX_STREAMED_CHUNKS` is refused (one that does not
        end went on for good, its calls' fragments piling up), and the loop runs between
        chunks (one read ahead held it: other agents and the app waited)."""
        text: list[str] = []
        kept = _Kept()
        calls: dict[int, dict[str, str]] = {}
        usage, answered_as = None, name
        try:
            async with stream:  # closed however the reading ends: a refused one hangs up
                async for chunk in capped_chunks(stream):
                    usage, answered_as = chunk.usage or usage, chunk.model or answered_as
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    if delta.content:
                        piece = kept.take(delta.content, "content")
                        if piece:
                            text.append(piece)
                            await passed_on(on_delta, valid_text(piece))
                    for call in delta.tool_calls or []:
                        joined = calls.setdefault(call.index,
                                                  {"id": "", "name": "", "arguments": ""})
                        joined["id"] = call.id or joined["id"]
                        function = call.function
                        if function is not None:
                            joined["name"] = function.name or joined["name"]
                            joined["arguments"] += kept.take(function.arguments or "", call.index)
        except ModelError:
            raise
        except Exception as error:
            raise too_large(error) or openai_error(
                error, status=getattr(error, "status_code", None), mid_stream=True) from error
        message = SimpleNamespace(content="".join(text) or None, tool_calls=[
            SimpleNamespace(id=call["id"], function=SimpleNamespace(
                name=call["name"], arguments=call["arguments"])) for call in calls.values()])
        if usage is None:  # the server ignored include_usage: litellm estimates the tokens
            counter = litellm().token_counter
            output = "".join(text) + "".join(call["arguments"] for call in calls.values())
            usage = {"prompt_tokens": counter(model=answered_as, messages=sent),
                     "completion_tokens": counter(model=answered_as, text=output,
                                                  count_response_tokens=True)}
        positions: dict[str | int, int] = {index: number for number, index in enumerate(calls)}
        return message, usage, {positions.get(key, key): length
                                for key, length in kept.lengths.items()}


class _Kept:
    """What is kept of a streamed reply as it comes: at most `MAX_REPLY_CHARACTERS` of its
    text and arguments in all, and the whole length of each (the text, a call by index)."""

    def __init__(self) -> None:
        self.room = MAX_REPLY_CHARACTERS
        self.lengths: dict[str | int, int] = {}

    def take(self, piece: str, key: str | int) -> str:
        """The part of `piece` kept."""
        self.lengths[key] = self.lengths.get(key, 0) + len(piece)
        kept = piece[:self.room]
        self.room -= len(kept)
        return kept


def _message(message: Any) -> SimpleNamespace:
    """An answer's message (`content`, `tool_calls` with their `function`) as `reply` reads
    it: the SDK builds it without checking, so a call may lack its function."""
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        calls.append(SimpleNamespace(id=getattr(call, "id", None), function=SimpleNamespace(
            name=getattr(function, "name", None), arguments=getattr(function, "arguments", None))))
    return SimpleNamespace(content=getattr(message, "content", None), tool_calls=calls)


def _detail(usage: Any, part: str, key: str) -> Any:
    """A count inside the usage's details (`prompt_tokens_details.cached_tokens`, ...), from
    the SDK's usage object or a dict."""
    details = usage.get(part) if isinstance(usage, dict) else getattr(usage, part, None)
    return details.get(key) if isinstance(details, dict) else getattr(details, key, None)


async def _closed_at_the_end(client: AsyncOpenAI) -> None:
    """Wait until cancelled, then close `client`: `asyncio.run` cancels the tasks left when
    its main coroutine ends and waits for them, so the connections close with the loop still
    running."""
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        await client.close()


_CONTEXT_WINDOW_TEXTS = (
    "exceed context limit", "this model's maximum context length is",
    "string too long. expected a string with maximum length", "model's maximum context limit",
    "is longer than the model's context length", "input tokens exceed the configured limit",
    "`inputs` tokens + `max_new_tokens` must be", "exceeds the available context size",
    "exceeds the maximum number of tokens allowed")
_KIND_OF_STATUS = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                   408: "Timeout", 422: "BadRequestError", 429: "RateLimitError",
                   500: "InternalServerError", 502: "BadGatewayError",
                   503: "ServiceUnavailableError", 504: "Timeout"}
_CLIENT_ERROR_KINDS = ("BadRequestError", "ContextWindowExceededError", "AuthenticationError",
                       "NotFoundError", "Timeout", "ContentPolicyViolationError")
"""Kinds litellm raises as they are when a stream breaks (any other becomes a mid-stream one)."""


def error_kind(text: str, status: int | None) -> str:
    """litellm's name for an error of its openai provider (`_map_openai_exception`): what the
    text says first (a rate limit, a context overflow, an invalid request, ...), then the HTTP
    status; no status is a connection error."""
    lower = text.lower()
    if ((re.search(r"\b429\b", text) and status in (None, 429))
            or re.search(r"rate[\s_\-]*limit", lower) or "service tier capacity exceeded" in lower):
        return "RateLimitError"
    if _context_window_exceeded(lower):
        return "ContextWindowExceededError"
    if "invalid_request_error" in text and "model_not_found" in text:
        return "NotFoundError"
    if "A timeout occurred" in text:
        return "Timeout"
    if (("invalid_request_error" in text and "content_policy_violation" in text)
            or ("Invalid prompt" in text and "violating our usage policy" in text)
            or "request was rejected as a result of the safety system" in lower):
        return "ContentPolicyViolationError"
    if ("invalid_encrypted_content" in text or "could not be verified" in text
            or ("invalid_request_error" in text and "Incorrect API key provided" not in text)):
        return "BadRequestError"
    if ("Web server is returning an unknown error" in text
            or "The server had an error processing your request." in text):
        return "InternalServerError"
    if "Request too large" in text:
        return "RateLimitError"
    if status is None:
        return "APIConnectionError"
    return _KIND_OF_STATUS.get(status, "APIError")


def _context_window_exceeded(lower: str) -> bool:
    """litellm's test of an error text for a context overflow."""
    if "string_above_max_length" in lower or ("invalid 'user'" in lower
                                              and "string too long" in lower):
        return False
    return (any(part in lower for part in _CONTEXT_WINDOW_TEXTS)
            or ("current length is" in lower and "while limit is" in lower)
            or ("maximum input length is" in lower and "tokens" in lower))


def openai_error(error: Exception, *, status: int | None,
                 mid_stream: bool = False) -> ModelError:
    """The ModelError litellm's decisions give a failed request. Before the answer starts an
    error without a status counts as a 500 (litellm wraps it so); once a stream has started,
    anything but a client error is a broken stream, worth retrying."""
    text = str(error)
    kind = error_kind(text, status)
    if mid_stream and kind not in _CLIENT_ERROR_KINDS and not (
            status is not None and 400 <= status < 500 and status != 429):
        kind = "MidStreamFallbackError"
    body = getattr(error, "body", None)
    detail = body.get("message") if isinstance(body, dict) else None
    return model_error(kind, str(detail) if detail else text)
