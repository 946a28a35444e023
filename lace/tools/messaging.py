"""Agents talk: direct messages and topics, delivered through the recipients' inboxes."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from lace.core import notifications
from lace.core.errors import NotFoundError
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError

Topic = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$",
                             description="A topic name such as party-chat.")]
Text = Annotated[str, Field(min_length=1, max_length=20_000)]


class SendMessage(Tool):
    """Send a message to another agent of this session (by thread id). It reaches their inbox:
    an idle agent wakes up, a busy one reads it after its current turn."""

    name: ClassVar[str] = "send_message"
    to: str = Field(min_length=1, description="The recipient's thread id.")
    text: Text

    def run(self, tx: Tx, context: ToolContext) -> str:
        try:
            thread = tx.threads.get(self.to)
        except NotFoundError:
            thread = None
        if thread is None or thread.root_id != context.session_id or \
                tx.agents.find(self.to) is None:
            raise ToolError(f"Unknown agent {self.to!r} in this session; agents_list shows your "
                            "helpers, and the board shows who works on what.")
        if self.to == context.thread_id:
            raise ToolError("You cannot send a message to yourself.")
        tx.inbox.post(self.to, sender=context.thread_id, kind="message",
                      text=notifications.message(context.thread_id, self.text))
        return f"Message sent to {self.to}."


class Subscribe(Tool):
    """Subscribe to a topic: every message published on it by others reaches you."""

    name: ClassVar[str] = "subscribe"
    topic: Topic

    def run(self, tx: Tx, context: ToolContext) -> str:
        new = tx.subscriptions.add(context.thread_id, self.topic)
        return f"Subscribed to '{self.topic}'." if new else f"Already subscribed to '{self.topic}'."


class Unsubscribe(Tool):
    """Stop receiving a topic's messages."""

    name: ClassVar[str] = "unsubscribe"
    topic: Topic

    def run(self, tx: Tx, context: ToolContext) -> str:
        if not tx.subscriptions.remove(context.thread_id, self.topic):
            raise ToolError(f"You are not subscribed to '{self.topic}'.")
        return f"Unsubscribed from '{self.topic}'."


class Publish(Tool):
    """Publish a message on a topic: every subscriber of this session but you receives it."""

    name: ClassVar[str] = "publish"
    topic: Topic
    text: Text

    def run(self, tx: Tx, context: ToolContext) -> str:
        subscribers = tx.subscriptions.subscribers(context.session_id, self.topic)
        recipients = [thread for thread in subscribers if thread != context.thread_id]
        for recipient in recipients:
            tx.inbox.post(recipient, sender=context.thread_id, kind="topic",
                          text=notifications.message(context.thread_id, self.text, self.topic))
        if not recipients:
            return f"Published on '{self.topic}', but nobody else is subscribed to it."
        return f"Published on '{self.topic}' to {len(recipients)} subscriber(s)."


MESSAGING_TOOLS: tuple[type[Tool], ...] = (SendMessage, Subscribe, Unsubscribe, Publish)
