"""The app as the Pilot tests drive it: a scripted coordinator and chatty workers, a screen size,
waiting for every agent to finish, and the conversation's texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lace.llm.types import ScriptedReply
from lace.tui.app import LaceApp
from lace.tui.factory import create_app
from lace.tui.widgets.conversation import Conversation, ToolCallView
from tests.scripted import ScriptedModels, assigned_task, dutiful_worker, reply, text
from tests.scripted_coordinator import coordinator

SIZE = (160, 45)


def chatty_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Works its task like a dutiful worker, and answers a person's message."""
    last = messages[-1]
    if last["role"] == "user" and not text(last).startswith("[LACE"):
        return reply(f"you said: {text(last)}")
    return dutiful_worker(f"result of {assigned_task(messages)}")(messages)


def make_app(db_path: Path, models: ScriptedModels) -> LaceApp:
    models.on("root", coordinator("new:scripted/worker", "new:scripted/worker"))
    models.on("worker", chatty_worker)
    return create_app(db=str(db_path), model="scripted/root")


async def settle(app: LaceApp, pilot: Any) -> None:
    """Let every agent finish, then let the screen catch up."""
    assert app.session_id is not None
    await pilot.pause()
    await app.workers.wait_for_complete()
    await app.runtime.run_until_quiet(app.session_id)
    await app.refresh_view()
    await pilot.pause()


def conversation_texts(app: LaceApp) -> list[str]:
    conversation = app.query_one(Conversation)
    texts = []
    for widget in conversation.children:
        if isinstance(widget, ToolCallView):
            texts.append(str(widget.title))
        else:
            texts.append(str(getattr(widget, "content", getattr(widget, "source", ""))))
    return texts
