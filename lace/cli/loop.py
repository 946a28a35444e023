"""`run_async`: a command's event loop, safe from a Ctrl+C that comes as it starts."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(main())`, except that a Ctrl+C (SIGINT) which comes while the loop is being
    built, or before `main` runs, waits until `main` runs and is then its KeyboardInterrupt, as
    any later one is. With `asyncio.run`, one that came inside the loop's constructor left a
    half-built loop whose finalizer printed a traceback, and `main`'s coroutine unawaited."""
    held = {signal.SIGINT}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)

    async def unheld() -> T:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a Ctrl+C held comes now
        return await main()

    try:
        with asyncio.Runner() as runner:
            return runner.run(unheld())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
