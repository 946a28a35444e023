"""Prompt-cache marks for the providers that want them (Anthropic): `cache_control` breakpoints
on the static prefix (the last tool, the shared part of the system prompt) and on the last two
user or tool messages (the one before keeps the previous call's cache entry within reach), so
a call pays the cache-read rate for everything an earlier call already sent. At most four
marks, Anthropic's limit. Other providers cache a stable prefix by themselves."""

from __future__ import annotations

from typing import Any, Final

from lace.core.prompt_parts import shared_and_own

CACHE_MARK: Final = {"type": "ephemeral"}
MARKED_PROVIDERS: Final = frozenset({"anthropic"})
ROLLING_MARKS: Final = 2
"""Marks on the conversation's tail; with the last tool's and the system prompt's: four."""


def wants_cache_marks(model: str) -> bool:
    """Whether calls to `provider/model` carry `cache_control` marks."""
    return model.split("/", 1)[0] in MARKED_PROVIDERS


def cache_marked(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Copies of `messages` and `tools` with cache marks where the model wants them (else the
    same lists). litellm passes a mark on a tool, a system or user text block, or a message
    with text content on to Anthropic; on a tool message it lands on the tool_result block."""
    if not wants_cache_marks(model):
        return messages, tools
    marked_tools = [*tools[:-1], {**tools[-1], "cache_control": CACHE_MARK}] if tools else tools
    marked = list(messages)
    system = next((index for index, message in enumerate(marked)
                   if message.get("role") == "system"), None)
    if system is not None and isinstance(marked[system].get("content"), str):
        marked[system] = {**marked[system], "content": _system_blocks(marked[system]["content"])}
    tail = [index for index, message in enumerate(marked)
            if message.get("role") in ("user", "tool") and message.get("content")]
    for index in tail[-ROLLING_MARKS:]:
        marked[index] = {**marked[index], "cache_control": CACHE_MARK}
    return marked, marked_tools


def _system_blocks(prompt: str) -> list[dict[str, Any]]:
    """The system prompt as text blocks, the mark at the end of its shared part (or of the
    whole prompt, when it has no per-agent part)."""
    shared, own = shared_and_own(prompt)
    if not shared:
        return [{"type": "text", "text": own, "cache_control": CACHE_MARK}]
    return [{"type": "text", "text": shared, "cache_control": CACHE_MARK},
            {"type": "text", "text": own}]
