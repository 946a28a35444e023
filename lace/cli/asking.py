"""Approval requests asked on the terminal `lace run` was started in: a person who ran it by
hand answers there (y, s or n, then Enter) instead of waiting for a second terminal; `lace
approve` from elsewhere still works, and whichever answer comes first counts. A run sent to the
background (`lace run ... &`) is stopped by the shell when it asks, as any program that reads
its terminal is; `fg` brings the question back."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from lace.core.errors import LaceError
from lace.runtime.events import ApprovalRequested, RuntimeEvent

if TYPE_CHECKING:
    from lace.runtime import Runtime

ANSWERS = {"y": "approved", "yes": "approved", "s": "approved_session",
           "session": "approved_session", "n": "denied", "no": "denied", "": "denied"}
"""What the person types, and the decision it makes (a bare Enter denies)."""
QUESTION = ("  answer here: y (allow once), s (allow for this session) or n (deny), then "
            "Enter")


class TerminalAnswers:
    """Hears approval requests on the runtime's bus and asks them one at a time on stdin."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.loop = asyncio.get_running_loop()
        self.asked: asyncio.Queue[ApprovalRequested] = asyncio.Queue()

    def __call__(self, event: RuntimeEvent) -> None:
        if isinstance(event, ApprovalRequested):  # the bus may call from another thread
            self.loop.call_soon_threadsafe(self.asked.put_nowait, event)

    async def serve(self) -> None:
        """Ask each request in turn until stdin ends; one still waiting is skipped once it was
        answered elsewhere."""
        while True:
            event = await self.asked.get()
            try:
                waiting = await self._waiting(event.approval_id)
            except Exception as error:  # the commands of the approval line remain
                print(f"lace: cannot ask here ({error}); answer with the commands above",
                      file=sys.stderr, flush=True)
                continue
            if not waiting:
                continue
            print(QUESTION, file=sys.stderr, flush=True)
            line = await self.loop.run_in_executor(None, sys.stdin.readline)
            if not line:  # stdin closed: the commands of the approval line remain
                return
            word = line.strip().lower()
            while word not in ANSWERS:
                print(f"  {word!r} is not an answer; y, s or n", file=sys.stderr, flush=True)
                line = await self.loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return
                word = line.strip().lower()
            await self._decide(event.approval_id, ANSWERS[word])

    async def _waiting(self, approval_id: int) -> bool:
        approval = await self.runtime.read(lambda tx: tx.approvals.get(approval_id))
        return approval.status == "pending"

    async def _decide(self, approval_id: int, status: str) -> None:
        try:
            await self.runtime.decide(approval_id, status)
        except LaceError as error:  # answered elsewhere meanwhile, or timed out
            print(f"lace: {error}", file=sys.stderr, flush=True)
            return
        print(f"  #{approval_id}: {status}", file=sys.stderr, flush=True)
