"""Running a new session's first root turn and taking its answer, whatever its helpers do."""

from __future__ import annotations

import asyncio

from lace.core.records import Thread
from lace.runtime import Runtime
from lace.runtime.events import RuntimeEvent, TurnEnded, TurnStarted


async def first_root_answer(runtime: Runtime, prompt: str, model: str, *,
                            watch: bool = False, timeout_s: float = 30,
                            ) -> tuple[Thread, str | None]:
    """Start a session and wait for its root's first turn to end: (root, its answer). With
    `watch`, the root's text is streamed (as when a person watches it)."""
    ended: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def on_event(event: RuntimeEvent) -> None:
        is_root = "." not in getattr(event, "thread_id", ".")
        if watch and is_root and isinstance(event, TurnStarted):
            runtime.watch(event.thread_id)
        if is_root and isinstance(event, TurnEnded) and not ended.done():
            ended.set_result(event.text)

    runtime.bus.subscribe(on_event)
    root = await runtime.start_session(prompt, model)
    async with asyncio.timeout(timeout_s):
        return root, await ended
