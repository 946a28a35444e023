"""The litellm client: one `acompletion` call, streamed when watched, errors sorted by kind."""

from __future__ import annotations

import inspect
import json
import logging
import re
from typing import Any

from lace.core.providers import LOCAL_PROVIDERS
from lace.core.text import MAX_NESTING, json_nesting, valid_strings, valid_text
from lace.llm.checks import TEST_PROVIDERS, are_test_providers_enabled, on_this_machine
from lace.llm.litellm_setup import litellm
from lace.llm.types import DeltaCallback, ModelError, ModelReply, ToolCallRequest

log = logging.getLogger("lace.llm")
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key|token)-[A-Za-z0-9_\-]{8,}"
                      r"|\b(?=[A-Za-z_\-]*\d)(?=[0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}")
_TRANSIENT = ("RateLimitError", "Timeout", "APIConnectionError", "ServiceUnavailableError",
              "InternalServerError", "BadGatewayError", "MidStreamFallbackError")


OMITTED_ARGUMENTS = json.dumps({"omitted": f"nested deeper than {MAX_NESTING} levels; "
                                           "refused by lace"})


def outgoing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of the conversation that a provider accepts: no lone surrogate (a thread stored by
    an earlier lace may hold one), and no tool-call arguments too deep for the JSON decoding
    some providers' adapters do (lace refused such a call; the event keeps what was sent)."""
    copy: list[dict[str, Any]] = valid_strings(messages)
    for message in copy:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            if json_nesting(str(function.get("arguments") or "")) > MAX_NESTING:
                function["arguments"] = OMITTED_ARGUMENTS
    return copy


def redact(text: str) -> str:
    """Hide anything that looks like a key in a provider's error text."""
    return _KEYLIKE.sub("[redacted]", text)


def classify(error: Exception) -> ModelError:
    """Transient (rate limits, timeouts, 5xx) or permanent (keys, bad requests, unknown models)."""
    name = type(error).__name__
    message = valid_text(redact(str(error)))
    missing_key = "credentials" in message.lower() or "api key" in message.lower()
    transient = name in _TRANSIENT and not missing_key
    first_line = message.strip().splitlines()[0] if message.strip() else name
    return ModelError(f"{name}: {first_line[:300]}", transient=transient,
                      context_overflow=name == "ContextWindowExceededError")


class LiteLLMClient:
    """Calls models through `litellm.acompletion`; the only code that talks to providers."""

    allow_remote_calls = True
    """Tests set this False, so no test can ever reach a real provider (only 127.0.0.1)."""

    def __init__(self) -> None:
        self._unpriced: set[str] = set()

    @staticmethod
    def warm_up() -> None:
        """Import litellm and register lace's local providers (about 2 s, once; call it from a
        thread to keep a UI responsive)."""
        from lace.llm.scripted import register_local_providers

        register_local_providers()

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """One model call; raises ModelError."""
        provider = model.split("/", 1)[0]
        if provider in TEST_PROVIDERS and not are_test_providers_enabled():
            raise ModelError(f"{model}: the {provider} provider exists only in lace's tests",
                             transient=False)
        if not self.allow_remote_calls and not (provider in LOCAL_PROVIDERS
                                                or on_this_machine(provider)):
            raise ModelError(f"remote model calls are disabled here ({model})", transient=False)
        self.warm_up()
        module = litellm()
        # max_retries=0: lace's own backoff is the one retry policy, and every attempt is an
        # `llm_calls` row (the OpenAI SDK would otherwise retry 5xx and 429 out of sight).
        arguments: dict[str, Any] = {"model": model, "messages": outgoing(messages),
                                     "max_retries": 0}
        if tools:
            arguments["tools"] = tools
        try:
            if on_delta is None:
                response = await module.acompletion(**arguments)
            else:
                response = await self._streamed(module, arguments, on_delta)
        except Exception as error:
            raise classify(error) from error
        return self._reply(model, response)

    @staticmethod
    async def _streamed(module: Any, arguments: dict[str, Any],
                        on_delta: DeltaCallback) -> Any:
        stream = await module.acompletion(**arguments, stream=True,
                                          stream_options={"include_usage": True})
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            delta = chunk.choices[0].delta.content if chunk.choices else None
            if delta:
                outcome = on_delta(valid_text(delta))
                if inspect.isawaitable(outcome):
                    await outcome
        return module.stream_chunk_builder(chunks, messages=arguments["messages"])

    def _reply(self, model: str, response: Any) -> ModelReply:
        message = response.choices[0].message
        calls = tuple(  # model text is made valid UTF-8 here, where it enters lace
            ToolCallRequest(id=valid_text(str(call.id)), name=valid_text(call.function.name or ""),
                            arguments=valid_text(call.function.arguments or "{}"))
            for call in (message.tool_calls or []))
        usage = getattr(response, "usage", None)
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is None and model not in self._unpriced:  # an unknown price stays unknown
            try:
                cost = litellm().completion_cost(completion_response=response)
            except Exception:
                cost = None
        if cost is None and model not in self._unpriced:
            self._unpriced.add(model)
            log.info("no known price for %s; its calls count as $0 (tokens still add up)", model)
        return ModelReply(
            content=valid_text(message.content) if message.content else None, tool_calls=calls,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=float(cost or 0.0), priced=cost is not None)
