"""The signal of the board's changes that a waiting call sleeps on: any change, or a change of
the tasks it waits for. A fan-out of K tasks has K/10 `delegate` calls waiting at once; waking
each of them at every change of any task cost O(K²) looks at the board."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterator


class BoardChanges:
    """`next`: an event set, then replaced, at each change. `watching(tasks)`: an event set at
    the next change of one of `tasks`, or of a change that names no tasks in particular."""

    def __init__(self) -> None:
        self.next = asyncio.Event()
        self._watchers: dict[str, set[asyncio.Event]] = {}

    def changed(self, tasks: Collection[str] | None = None) -> None:
        """Wake everything waiting for the next change, and the watchers of `tasks` (None:
        of every task; empty: of none, when the commit that changed them already said so)."""
        self.next.set()
        self.next = asyncio.Event()
        named = list(self._watchers) if tasks is None else tasks
        for task_id in named:
            for event in self._watchers.pop(task_id, ()):
                event.set()

    @contextlib.contextmanager
    def watching(self, tasks: Collection[str]) -> Iterator[asyncio.Event]:
        """An event for the next change of one of `tasks`; forgotten on leaving."""
        event = asyncio.Event()
        for task_id in tasks:
            self._watchers.setdefault(task_id, set()).add(event)
        try:
            yield event
        finally:
            for task_id in tasks:
                watchers = self._watchers.get(task_id)
                if watchers is not None:
                    watchers.discard(event)
                    if not watchers:
                        del self._watchers[task_id]
