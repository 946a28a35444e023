"""Past-tense events the runtime publishes; the CLI and the TUI subscribe, the runtime never
knows who listens."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("lace.runtime")


@dataclass(frozen=True)
class ThreadSpawned:
    thread_id: str
    parent_id: str
    model: str
    task_id: str | None


@dataclass(frozen=True)
class EventAppended:
    thread_id: str
    event_id: int
    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class TextStreamed:
    """Text of the answer being written; `restart` drops what came before (a failed call
    that is being retried)."""

    thread_id: str
    delta: str
    restart: bool = False


@dataclass(frozen=True)
class ModelCalled:
    """A model call started for the thread (its answer is awaited)."""

    thread_id: str
    model: str


@dataclass(frozen=True)
class ModelAnswered:
    """The thread's model call ended, answered or not."""

    thread_id: str


@dataclass(frozen=True)
class TurnStarted:
    thread_id: str


@dataclass(frozen=True)
class TurnEnded:
    thread_id: str
    text: str | None


@dataclass(frozen=True)
class TurnFailed:
    thread_id: str
    error: str


@dataclass(frozen=True)
class TasksChanged:
    task_ids: tuple[str, ...]


@dataclass(frozen=True)
class ApprovalRequested:
    approval_id: int
    thread_id: str
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Warned:
    """Something a person should know that is no agent's doing (an MCP server that failed)."""

    text: str


RuntimeEvent = (ThreadSpawned | EventAppended | TextStreamed | ModelCalled | ModelAnswered
                | TurnStarted | TurnEnded | TurnFailed | TasksChanged | ApprovalRequested
                | Warned)
Subscriber = Callable[[RuntimeEvent], None]


class EventBus:
    """Delivers each event to every subscriber; a failing subscriber never stops the runtime."""

    def __init__(self) -> None:
        self.subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        """Receive every event from now on."""
        self.subscribers.append(subscriber)

    def publish(self, event: RuntimeEvent) -> None:
        """Hand `event` to every subscriber."""
        for subscriber in self.subscribers:
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber failed on %r", event)
