"""What the runtime and the LLM seam exchange; importing this never imports litellm."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelReply:
    """One model answer with its usage: `prompt_tokens` counts every input token, those read
    from and written to the provider's prompt cache too; `reasoning_tokens` are part of
    `completion_tokens`; a count the provider did not give is None, and so is the cost of a
    model with no known price."""

    content: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def priced(self) -> bool:
        """Whether the call's cost is known."""
        return self.cost_usd is not None

    def message(self) -> dict[str, Any]:
        """The assistant message as it goes back to the model in the next call."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
                for call in self.tool_calls]
        return message


class ModelError(Exception):
    """A model call that failed; `transient` ones are worth retrying."""

    def __init__(self, message: str, *, transient: bool, context_overflow: bool = False) -> None:
        super().__init__(message)
        self.transient, self.context_overflow = transient, context_overflow


session_tree: ContextVar[str | None] = ContextVar("session_tree", default=None)
"""The session (root thread id) a model call is made for, set by the runtime around each call:
a client that can use it (a provider's prompt cache key) reads it, the others need not take
it."""

DeltaCallback = Callable[[str], Awaitable[None] | None]


class ModelClient(Protocol):
    """The seam: send a conversation and tools, get a reply (streamed when `on_delta` is given)."""

    async def complete(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]], *,
                       on_delta: DeltaCallback | None = None) -> ModelReply: ...


@dataclass
class ScriptedReply:
    """What a scripted or demo model answers: text, tool calls (name, arguments), usage (the
    cached and reasoning parts too, which the HTTP fakes report), and what the call cost
    (local models are free; None: no known price)."""

    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cost_usd: float | None = 0.0
    cache_read_tokens: int | None = None
    reasoning_tokens: int | None = None
