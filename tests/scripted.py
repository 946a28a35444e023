"""A scripted model behind lace's model client: each `scripted/<role>` answers from a handler."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

from lace.llm.scripted import install_script
from lace.llm.types import ScriptedReply

Handler = Callable[[list[dict[str, Any]]], "ScriptedReply | Awaitable[ScriptedReply]"]
ASSIGNED = re.compile(r"You have been assigned task '([^']+)'")


class ScriptedModels:
    """Routes each call to the handler of its model name and records what it was sent."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        install_script(self)

    def on(self, name: str, handler: Handler) -> None:
        self.handlers[name] = handler

    async def __call__(self, model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        self.calls.append((model, messages))
        outcome = self.handlers[model](messages)
        return await outcome if inspect.isawaitable(outcome) else outcome

    def calls_of(self, name: str) -> list[list[dict[str, Any]]]:
        return [messages for model, messages in self.calls if model == name]


def text(message: dict[str, Any]) -> str:
    return message.get("content") or ""


def tools_called(messages: list[dict[str, Any]]) -> list[str]:
    return [call["function"]["name"] for message in messages
            for call in message.get("tool_calls") or []]


def assigned_task(messages: list[dict[str, Any]]) -> str:
    """The id of the latest task assigned in this conversation."""
    for message in reversed(messages):
        match = ASSIGNED.search(text(message))
        if match:
            return match.group(1)
    raise AssertionError("no assignment in the conversation")


def reply(text: str | None = None, *calls: tuple[str, dict[str, Any]]) -> ScriptedReply:
    return ScriptedReply(text=text, tool_calls=list(calls))


def dutiful_worker(result: str = "the result") -> Handler:
    """Adds a note, completes its task with `result`, then answers."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id = assigned_task(messages)
        done = tools_called(messages)
        if "task_add_note" not in done:
            return reply(None, ("task_add_note", {"task_id": task_id, "note": "working on it"}))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": task_id, "message": result}))
        return reply("finished")

    return handle


def creating_root(parts: int) -> Handler:
    """A root that creates `parts` tasks for `new:scripted/worker` helpers at the person's
    message, then only waits."""
    return lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": f"Part {n}", "prompt": "p", "assigned_to": "new:scripted/worker"}
        for n in range(parts)]})) if messages[-1]["role"] == "user" else reply("waiting")


async def overlapping_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """A helper whose calls overlap (each takes 50 ms) and use 600 tokens: a note on its task,
    then its completion, each step again until it is done."""
    await asyncio.sleep(0.05)
    task_id = assigned_task(messages)
    step = ("task_complete", {"task_id": task_id, "message": "done"}) \
        if "task_add_note" in tools_called(messages) else \
        ("task_add_note", {"task_id": task_id, "note": "working"})
    return ScriptedReply(None, [step], prompt_tokens=400, completion_tokens=200)
