"""What lace's provider clients share, importable without litellm or the openai SDK: the guards
before a call, the cleanup of what is sent, the sorting of errors and the reply built from an
answer."""

from __future__ import annotations

import dataclasses
import errno
import inspect
import json
import logging
import re
from typing import Any

from lace.core.providers import LOCAL_PROVIDERS
from lace.core.text import (
    MAX_NESTING,
    MAX_REPLY_CHARACTERS,
    cut_arguments,
    cut_note,
    json_nesting,
    valid_strings,
    valid_text,
)
from lace.core.usage import CallTokens, estimate_tokens, plausible_cost, plausible_tokens
from lace.llm.checks import (
    TEST_PROVIDERS,
    UNBOUNDED_PROVIDERS,
    are_test_providers_enabled,
    base_url_variable,
    check_provider,
    on_this_machine,
)
from lace.llm.types import DeltaCallback, ModelError, ModelReply, ToolCallRequest

log = logging.getLogger("lace.llm")
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key|token)-[A-Za-z0-9_\-]{8,}"
                      r"|\b(?=[A-Za-z_\-]*\d)(?=[0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}")
TRANSIENT_KINDS = frozenset({
    "RateLimitError", "Timeout", "APIConnectionError", "ServiceUnavailableError",
    "InternalServerError", "BadGatewayError", "MidStreamFallbackError"})
"""Kinds of error (litellm's exception names) worth retrying."""

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


def model_error(kind: str, text: str) -> ModelError:
    """A failed call of this kind: transient (rate limits, timeouts, 5xx) unless the text is
    about a missing key; permanent otherwise; a context overflow says so."""
    message = valid_text(redact(text))
    missing_key = "credentials" in message.lower() or "api key" in message.lower()
    first_line = message.strip().splitlines()[0] if message.strip() else kind
    return ModelError(f"{kind}: {first_line[:300]}",
                      transient=kind in TRANSIENT_KINDS and not missing_key,
                      context_overflow=kind == "ContextWindowExceededError")


async def passed_on(on_delta: DeltaCallback, delta: str) -> None:
    """Give a text delta to lace; a failure there is lace's, sorted by its name as a provider's
    error would be, not a broken stream."""
    try:
        outcome = on_delta(delta)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception as error:
        raise model_error(type(error).__name__, str(error)) from error


def refused(error: BaseException, provider: str, default_url: str) -> ModelError | None:
    """A permanent error naming the address when nothing listens there (the connection was
    refused, somewhere in the chain of causes): asking again would be refused again."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError) or (
                isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED):
            named = base_url_variable(provider)
            url, check = (named[1], f"is the server running, and is {named[0]} right?") \
                if named else (default_url, "is the network up?")
            return ModelError(f"APIConnectionError: nothing answers at {url} (connection "
                              f"refused): {check}", transient=False)
        cause = cause.__cause__ or cause.__context__
    return None


class ReplyBudget:
    """What lace keeps of one reply: `MAX_REPLY_CHARACTERS` of its text and its calls'
    arguments together, the text first; text past it is cut with a note, arguments past it
    replaced by `cut_arguments`. `length` is the whole size when only a part was kept (a part
    is always cut)."""

    def __init__(self) -> None:
        self.left = MAX_REPLY_CHARACTERS

    def text(self, text: str, length: int | None = None) -> str:
        length = len(text) if length is None else length
        if length == len(text) and length <= self.left:
            self.left -= length
            return text
        kept = text[:self.left]
        self.left -= len(kept)
        return kept + cut_note(length - len(kept))

    def arguments(self, arguments: str, length: int | None = None) -> str:
        length = len(arguments) if length is None else length
        if length == len(arguments) and length <= self.left:
            self.left -= length
            return arguments
        return cut_arguments(length)


class ProviderClient:
    """The guards and the reply of a client that calls providers (litellm or directly)."""

    allow_remote_calls = True
    """Tests set this False (on this class, so it holds for every client), so no test can ever
    reach a real provider (only 127.0.0.1)."""

    def __init__(self) -> None:
        self._unpriced: set[str] = set()

    def check_allowed(self, model: str) -> None:
        """Refuse the test provider outside tests, a provider whose answers lace cannot
        bound (a row may name one: an edited or imported database), and remote calls where
        they are disabled."""
        provider = model.split("/", 1)[0]
        if provider in UNBOUNDED_PROVIDERS:
            raise ModelError(f"{model}: {check_provider(provider, model)}", transient=False)
        if provider in TEST_PROVIDERS and not are_test_providers_enabled():
            raise ModelError(f"{model}: the {provider} provider exists only in lace's tests",
                             transient=False)
        if not self.allow_remote_calls and not (provider in LOCAL_PROVIDERS
                                                or on_this_machine(provider)):
            raise ModelError(f"remote model calls are disabled here ({model})", transient=False)

    def is_unpriced(self, model: str) -> bool:
        """Whether this model already turned out to have no known price."""
        return model in self._unpriced

    def reply(self, model: str, message: Any, tokens: CallTokens, cost: Any,
              lengths: dict[str | int, int] | None = None) -> ModelReply:
        """The reply from an answer's message (`content`, `tool_calls`), its checked `tokens`
        (`counted_tokens`) and cost; model text is made valid UTF-8 and capped
        (`ReplyBudget`) here, where it enters lace; `lengths` are the whole sizes of a text
        (`"content"`) or arguments (by index) read only in part. A model without a price (or
        with an absurd one) is logged once, and its cost stays unknown (None)."""
        lengths = lengths or {}
        budget = ReplyBudget()
        content = budget.text(message.content, lengths.get("content")) if message.content \
            else None
        calls = tuple(
            ToolCallRequest(id=valid_text(str(call.id)), name=valid_text(call.function.name or ""),
                            arguments=valid_text(budget.arguments(
                                call.function.arguments or "{}", lengths.get(index))))
            for index, call in enumerate(message.tool_calls or []))
        price = plausible_cost(cost)
        if price is None and model not in self._unpriced:
            self._unpriced.add(model)
            log.info("no known price for %s; its cost stays unknown (tokens still add up)", model)
        return ModelReply(
            content=valid_text(content) if content else None, tool_calls=calls,
            prompt_tokens=tokens.prompt, completion_tokens=tokens.completion, cost_usd=price,
            cache_read_tokens=tokens.cache_read, cache_write_tokens=tokens.cache_write,
            reasoning_tokens=tokens.reasoning)


def reported(usage: Any, *path: str) -> Any:
    """A field of a provider's usage (an object or a dict), following `path`; None if absent."""
    for key in path:
        usage = usage.get(key) if isinstance(usage, dict) else getattr(usage, key, None)
        if usage is None:
            return None
    return usage


def counted_tokens(usage: Any, sent: list[dict[str, Any]], tools: list[dict[str, Any]],
                   message: Any) -> tuple[CallTokens, bool]:
    """The tokens of an answer (`cached_parts` for the cache and reasoning counts): the
    provider's prompt and completion counts where plausible (`plausible_tokens`), each
    estimated from the text where missing or absurd (no tokens for a prompt, or for an answer
    that says something, is a missing count: litellm makes a missing usage zeros); and whether
    any was estimated. A provider's usage is not believed blindly: a negative count would
    defeat a budget, a huge one would not fit the database."""
    answer = {"content": message.content, "tool_calls": [
        {"function": {"arguments": call.function.arguments}}
        for call in (message.tool_calls or [])]}
    prompt, completion = plausible_tokens(reported(usage, "prompt_tokens")), plausible_tokens(
        reported(usage, "completion_tokens"))
    prompt = prompt or None
    if completion == 0 and (answer["content"] or answer["tool_calls"]):
        completion = None
    estimated = prompt is None or completion is None
    if estimated:
        log.info("usage from the provider not believed (prompt %.40r, completion %.40r); "
                 "estimated from the text", reported(usage, "prompt_tokens"),
                 reported(usage, "completion_tokens"))
    if prompt is None:
        prompt = estimate_tokens(sent, len(json.dumps(tools)) if tools else 0)
    if completion is None:
        completion = estimate_tokens([answer])
    return cached_parts(usage, CallTokens(prompt, completion)), estimated


def cached_parts(usage: Any, tokens: CallTokens) -> CallTokens:
    """`tokens` with the cache-read, cache-write and reasoning counts of a provider's usage
    (OpenAI's `prompt_tokens_details` / `completion_tokens_details`, or Anthropic's
    `cache_read_input_tokens` / `cache_creation_input_tokens` as litellm passes them on).
    A count that is absurd, or larger than the whole it is part of, is dropped (None)."""
    read = plausible_tokens(_first(reported(usage, "prompt_tokens_details", "cached_tokens"),
                                   reported(usage, "cache_read_input_tokens")))
    write = plausible_tokens(_first(
        reported(usage, "cache_creation_input_tokens"),
        reported(usage, "prompt_tokens_details", "cache_creation_tokens"),
        reported(usage, "prompt_tokens_details", "cache_write_tokens")))
    if (read or 0) + (write or 0) > tokens.prompt:
        read = write = None
    reasoning = plausible_tokens(reported(usage, "completion_tokens_details",
                                          "reasoning_tokens"))
    if reasoning is not None and reasoning > tokens.completion:
        reasoning = None
    return dataclasses.replace(tokens, cache_read=read, cache_write=write, reasoning=reasoning)


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)
