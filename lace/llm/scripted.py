"""Local models, answered in this process from a script: `demo/...` (the offline demo) and
`scripted/...` (tests and benchmarks, which enable it with `LACE_TEST_PROVIDERS=1`; elsewhere
it does not exist). `LocalClient` serves them as a provider's client would (tool calls, streamed
text, usage, errors sorted by kind) without importing litellm, whose import is seconds of CPU
that a demo run or a test's `lace` process would otherwise pay for nothing."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import os
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from lace.core.text import valid_text
from lace.llm.calls import ProviderClient, counted_tokens, model_error, outgoing, passed_on
from lace.llm.demo import demo_reply
from lace.llm.types import DeltaCallback, ModelError, ModelReply, ScriptedReply

Script = Callable[[str, list[dict[str, Any]]], "ScriptedReply | Awaitable[ScriptedReply]"]
_call_ids = itertools.count(1)


async def _demo(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The demo model, optionally slowed by `$LACE_DEMO_DELAY` seconds per call (to watch it)."""
    delay = float(os.environ.get("LACE_DEMO_DELAY") or 0)
    if delay > 0:
        await asyncio.sleep(delay)
    return demo_reply(model, messages)


def _unavailable(_model: str, _messages: list[dict[str, Any]]) -> ScriptedReply:
    raise RuntimeError("no script installed for the scripted provider")


_scripts: dict[str, Script] = {"demo": _demo, "scripted": _unavailable}


def install_script(script: Script) -> None:
    """Answer `scripted/...` calls with `script(model, messages)` from now on (`model` without
    its `scripted/` prefix)."""
    _scripts["scripted"] = script


class LocalClient(ProviderClient):
    """Calls `demo/...` and `scripted/...` models: their script's reply, its text streamed word
    by word when watched; an exception the script raises is sorted by its name, as a
    provider's would be (a `RateLimitError` is transient)."""

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        """One model call; raises ModelError."""
        self.check_allowed(model)
        provider, _, name = model.partition("/")
        try:
            outcome = _scripts[provider](name, outgoing(messages))
            reply = await outcome if inspect.isawaitable(outcome) else outcome
        except ModelError:
            raise
        except Exception as error:
            raise model_error(type(error).__name__, str(error)) from error
        if on_delta is not None and reply.text:
            for number, word in enumerate(reply.text.split(" ")):
                await passed_on(on_delta, valid_text(word if number == 0 else f" {word}"))
                await asyncio.sleep(0)
        calls = [SimpleNamespace(id=f"call_{next(_call_ids)}", function=SimpleNamespace(
            name=tool, arguments=value if isinstance(value, str) else json.dumps(value)))
            for tool, value in reply.tool_calls]
        message = SimpleNamespace(content=reply.text, tool_calls=calls)
        usage = SimpleNamespace(prompt_tokens=reply.prompt_tokens,
                                completion_tokens=reply.completion_tokens,
                                cache_read_input_tokens=reply.cache_read_tokens)
        tokens, _ = counted_tokens(usage, messages, tools, message)
        return self.reply(model, message, tokens, reply.cost_usd)
