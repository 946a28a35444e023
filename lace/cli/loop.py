"""A command's event loop (`run_async`), and its stop on a signal (`once_on`), safe from
a signal that comes as the loop starts or ends."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine, Iterable
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

    runner = asyncio.Runner()
    try:
        return runner.run(unheld())
    finally:
        # the loop closes its self-pipe before it lets go of its signals: a signal in between
        # was written to a closed descriptor ("Exception ignored ... signal wakeup fd")
        signal.set_wakeup_fd(-1)
        runner.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def once_on(signums: Iterable[int], action: Callable[[], object]) -> Callable[[], None]:
    """Call `action` (in the running loop: a task's `cancel`, an event's `set`) the first time
    one of `signums` comes; the same signal again changes nothing, also once the loop has
    closed (a second cancel would cut the shutdown short). Returns the function that calls it
    so, for other reasons to stop.

    The handler is Python's own, and calls the loop: asyncio's (`add_signal_handler`) puts
    the signal's default action back when it is removed, at the latest as the loop closes, so
    one that came in that moment killed the process instead."""
    loop = asyncio.get_running_loop()
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            action()

    def signalled(_signum: int, _frame: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending
            loop.call_soon_threadsafe(once)

    for signum in signums:
        signal.signal(signum, signalled)
    return once
