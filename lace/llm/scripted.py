"""Local litellm providers: `demo/...` (the offline demo) and `scripted/...` (tests and benchmarks,
which enable it with `LACE_TEST_PROVIDERS=1`; elsewhere it does not exist).
Both make real litellm calls, tool calls and streaming included, with answers from a script."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from lace.llm.demo import demo_reply
from lace.llm.litellm_setup import litellm
from lace.llm.types import ScriptedReply

Script = Callable[[str, list[dict[str, Any]]], "ScriptedReply | Awaitable[ScriptedReply]"]
_call_ids = itertools.count(1)


def _plain(message: Any) -> dict[str, Any]:
    return message if isinstance(message, dict) else dict(message.model_dump())


async def _demo(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The demo model, optionally slowed by `$LACE_DEMO_DELAY` seconds per call (to watch it)."""
    delay = float(os.environ.get("LACE_DEMO_DELAY") or 0)
    if delay > 0:
        await asyncio.sleep(delay)
    return demo_reply(model, messages)


def _unavailable(_model: str, _messages: list[dict[str, Any]]) -> ScriptedReply:
    raise RuntimeError("no script installed for the scripted provider")


def make_provider_class() -> type:
    """The CustomLLM subclass, built on first use so importing lace never imports litellm."""
    module = litellm()

    class ScriptedProvider(module.CustomLLM):  # type: ignore[misc, name-defined]
        """Answers every call with `script(model, messages)`."""

        def __init__(self, name: str, script: Script) -> None:
            super().__init__()
            self.name, self.script = name, script

        async def _reply(self, model: str, messages: list[Any]) -> tuple[ScriptedReply, list[Any]]:
            outcome = self.script(model, [_plain(message) for message in messages])
            reply = await outcome if inspect.isawaitable(outcome) else outcome
            calls = [(f"call_{next(_call_ids)}", name,
                      arguments if isinstance(arguments, str) else json.dumps(arguments))
                     for name, arguments in reply.tool_calls]
            return reply, calls

        async def acompletion(self, model: str, messages: list[Any], *args: Any,
                              **kwargs: Any) -> Any:
            reply, calls = await self._reply(model, messages)
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if calls:
                message["tool_calls"] = [
                    {"id": call_id, "type": "function",
                     "function": {"name": name, "arguments": arguments}}
                    for call_id, name, arguments in calls]
            return module.ModelResponse(
                model=f"{self.name}/{model}",
                choices=[{"index": 0, "message": message,
                          "finish_reason": "tool_calls" if calls else "stop"}],
                usage={"prompt_tokens": reply.prompt_tokens,
                       "completion_tokens": reply.completion_tokens,
                       "total_tokens": reply.prompt_tokens + reply.completion_tokens})

        async def astreaming(self, model: str, messages: list[Any], *args: Any,
                             **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            reply, calls = await self._reply(model, messages)
            finish = "tool_calls" if calls else "stop"

            def chunk(text: str = "", tool_use: Any = None, usage: Any = None) -> dict[str, Any]:
                return {"text": text, "tool_use": tool_use, "is_finished": usage is not None,
                        "finish_reason": finish if usage is not None else "", "usage": usage,
                        "index": 0}

            for number, word in enumerate((reply.text or "").split(" ") if reply.text else []):
                yield chunk(word if number == 0 else f" {word}")
                await asyncio.sleep(0)
            for index, (call_id, name, arguments) in enumerate(calls):
                yield chunk(tool_use={"id": call_id, "type": "function", "index": index,
                                      "function": {"name": name, "arguments": arguments}})
            yield chunk(usage={"prompt_tokens": reply.prompt_tokens,
                               "completion_tokens": reply.completion_tokens,
                               "total_tokens": reply.prompt_tokens + reply.completion_tokens})

    return ScriptedProvider


_providers: dict[str, Any] = {}


_registering = threading.Lock()


def local_providers_registered() -> bool:
    return bool(_providers)


def register_local_providers() -> None:
    """Make `demo/...` and `scripted/...` callable through litellm (idempotent, thread-safe:
    first calls import litellm in threads)."""
    with _registering:
        if _providers:
            return
        provider_class = make_provider_class()
        handlers = {"demo": provider_class("demo", _demo),
                    "scripted": provider_class("scripted", _unavailable)}
        module = litellm()
        module.custom_provider_map = [
            entry for entry in module.custom_provider_map if entry["provider"] not in handlers
        ] + [{"provider": name, "custom_handler": handler} for name, handler in handlers.items()]
        _providers.update(handlers)  # last: registered means callable


def install_script(script: Script) -> None:
    """Answer `scripted/...` calls with `script(model, messages)` from now on."""
    register_local_providers()
    _providers["scripted"].script = script
