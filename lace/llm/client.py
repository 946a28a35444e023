"""The clients lace calls models with: `default_client()` calls `openai/...` chat models directly
(`OpenAIClient`), lace's own local models in this process (`LocalClient`) and every other model
through litellm (`LiteLLMClient`: one `acompletion` call, streamed when watched); all sort
errors by kind."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lace.core.providers import LOCAL_PROVIDERS
from lace.core.text import valid_text
from lace.llm.answer_limit import capped_chunks, too_large
from lace.llm.caching import cache_marked
from lace.llm.calls import (
    ProviderClient,
    counted_tokens,
    model_error,
    outgoing,
    passed_on,
    refused,
)
from lace.llm.checks import keyless
from lace.llm.litellm_setup import litellm, litellm_imported
from lace.llm.openai_client import OpenAIClient, served_directly
from lace.llm.openai_sdk import sdk
from lace.llm.prices import price_table
from lace.llm.pricing import call_cost
from lace.llm.scripted import LocalClient
from lace.llm.types import DeltaCallback, ModelError, ModelReply

NO_KEY = "no-key"
"""The key litellm is given for a local server when the environment has none: the openai SDK
beneath it refuses to call without one, and such a server ignores it."""


def classify(error: Exception, model: str = "") -> ModelError:
    """Transient (rate limits, timeouts, 5xx) or permanent (keys, bad requests, unknown models,
    a refused connection, an answer past the read limit), from the name of litellm's
    exception."""
    return too_large(error) or refused(error, model.split("/", 1)[0],
                                       "the provider's endpoint") or model_error(
        type(error).__name__, str(error))


class LiteLLMClient(ProviderClient):
    """Calls models through `litellm.acompletion`, with prompt-cache marks for the providers
    that want them (`cache_marks=False` leaves them out: benchmarks compare the two)."""

    def __init__(self, cache_marks: bool = True) -> None:
        super().__init__()
        self.cache_marks = cache_marks

    @staticmethod
    def warm_up() -> None:
        """Import litellm (about 2 s, once; call it from a thread to keep a UI responsive)."""
        litellm()


    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """One model call; raises ModelError."""
        self.check_allowed(model)
        if not litellm_imported():  # seconds of import, off the loop: signals still work
            await asyncio.to_thread(self.warm_up)
        module = litellm()
        sent, sent_tools = cache_marked(model, outgoing(messages), tools) if self.cache_marks \
            else (outgoing(messages), tools)
        # max_retries=0: lace's own backoff is the one retry policy, and every attempt is an
        # `llm_calls` row (the OpenAI SDK would otherwise retry 5xx and 429 out of sight).
        arguments: dict[str, Any] = {"model": model, "messages": sent, "max_retries": 0}
        if tools:
            arguments["tools"] = sent_tools
        if keyless(model.split("/", 1)[0]):
            arguments["api_key"] = NO_KEY
        try:
            if on_delta is None:
                response = await module.acompletion(**arguments)
            else:
                response = await self._streamed(module, arguments, on_delta)
        except ModelError:  # sorted already: lace's delta callback failed (passed_on), too long
            raise
        except Exception as error:
            raise classify(error, model) from error
        message = response.choices[0].message
        tokens, _ = counted_tokens(getattr(response, "usage", None), arguments["messages"],
                                   tools, message)
        cost = None if self.is_unpriced(model) else call_cost(model, tokens)
        return self.reply(model, message, tokens, cost)

    @staticmethod
    async def _streamed(module: Any, arguments: dict[str, Any],
                        on_delta: DeltaCallback) -> Any:
        """The streamed answer, its text passed on as it comes; refused past
        `MAX_STREAMED_CHUNKS` chunks (litellm keeps each)."""
        stream = await module.acompletion(**arguments, stream=True,
                                          stream_options={"include_usage": True})
        chunks: list[Any] = []
        async with contextlib.aclosing(stream):
            async for chunk in capped_chunks(stream):
                chunks.append(chunk)
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    await passed_on(on_delta, valid_text(delta))
        return module.stream_chunk_builder(chunks, messages=arguments["messages"])


class RoutingClient:
    """The client lace uses: `openai/...` chat models called directly (no litellm import, a
    fraction of its CPU per call), `demo/...` and `scripted/...` in this process, every other
    model through litellm."""

    def __init__(self) -> None:
        self.direct, self.local, self.litellm = OpenAIClient(), LocalClient(), LiteLLMClient()

    @staticmethod
    def warm_up(litellm_too: bool = True) -> None:
        """Load the price table and the openai SDK and, unless told not to, import litellm
        (seconds, once; call it from a thread to keep a UI responsive). A worker leaves litellm
        until a model needs it: its import is seconds of a core another process could use."""
        price_table()
        sdk()
        if litellm_too:
            LiteLLMClient.warm_up()

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """One model call through the client that serves its model; raises ModelError."""
        client: LiteLLMClient | OpenAIClient | LocalClient = (
            self.direct if served_directly(model)
            else self.local if is_local(model) else self.litellm)
        return await client.complete(model, messages, tools, on_delta=on_delta)


def is_local(model: str) -> bool:
    """Whether `model` is one of lace's own (`demo/...`, `scripted/...`)."""
    return model.split("/", 1)[0] in LOCAL_PROVIDERS


def needs_litellm(model: str) -> bool:
    """Whether calls to `model` go through litellm (not an `openai/...` chat model nor a local
    one, which lace calls itself)."""
    return not served_directly(model) and not is_local(model)


def default_client() -> RoutingClient:
    """The ModelClient lace uses everywhere."""
    return RoutingClient()
