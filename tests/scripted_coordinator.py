"""A scripted root that delegates one task per assignee and sums up the completions it hears."""

from __future__ import annotations

from typing import Any

from lace.core.notifications import read_completions
from lace.llm.types import ScriptedReply
from tests.scripted import reply, text

NOTICE = "[LACE TASK SYSTEM]"


def completions(messages: list[dict[str, Any]]) -> list[str]:
    """The results of the completion notices received, one per task (a batch's notice holds
    several)."""
    return [done.result for m in messages if m["role"] == "user"
            for done in read_completions(text(m))]


def coordinator(*assignees: str, titles: tuple[str, ...] = ("Alpha", "Beta")) -> Any:
    """Creates one task per assignee, then waits for every completion and sums them up."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        last = messages[-1]
        if last["role"] == "user" and not text(last).startswith(NOTICE):
            return reply(None, ("task_create", {"tasks": [
                {"title": title, "prompt": f"Do {title}", "assigned_to": who}
                for title, who in zip(titles, assignees, strict=False)]}))
        if last["role"] == "tool":
            return reply("delegated; waiting")
        done = completions(messages)
        if len(done) == len(assignees):
            return reply("all done: " + " | ".join(d.rsplit("\n", 1)[-1] for d in done))
        return reply(f"{len(done)} done; waiting")

    return handle
