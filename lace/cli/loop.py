"""A command's event loop (`run_async`), and its stop on a signal (`once_on`), safe from
a signal that comes as the loop starts or ends."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(main())`, except that a Ctrl+C (SIGINT) or SIGTERM which comes while the
    loop is being built, or before `main` runs, waits until `main` runs and is then its
    KeyboardInterrupt (or whatever the signal's handler does there), as any later one is. With
    `asyncio.run`, one that came inside the loop's constructor (a KeyboardInterrupt, or the
    SystemExit of a forked worker's handler) left a half-built loop whose finalizer printed a
    traceback, and `main`'s coroutine unawaited.
    A signal wakes the loop whichever thread it reaches (`_woken_by_signals`)."""
    held = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    woken, waking = socket.socketpair()

    async def unheld() -> T:
        _woken_by_signals(asyncio.get_running_loop(), woken, waking)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a signal held comes now
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
        woken.close()
        waking.close()


def _woken_by_signals(loop: asyncio.AbstractEventLoop, woken: socket.socket,
                      waking: socket.socket) -> None:
    """Make every signal with a handler of Python's own (`once_on`'s, the runner's for
    Ctrl+C) write to `waking`, which the loop watches: such a handler runs on the main thread
    once it runs Python again, and a signal that another thread took (a `kill` of its id, or
    the main thread busy taking another) left it waiting in its selector until something
    else was due. asyncio's own handlers, where a command adds one, write to its self-pipe
    instead, which wakes it as well."""
    for end in (woken, waking):
        end.setblocking(False)
    loop.add_reader(woken.fileno(), _drained, woken)
    signal.set_wakeup_fd(waking.fileno(), warn_on_full_buffer=False)


def _drained(woken: socket.socket) -> None:
    with contextlib.suppress(OSError):  # nothing left to read
        while woken.recv(4096):
            pass


def once_on(signums: Iterable[int], action: Callable[[], object], *,
            came: threading.Event | None = None) -> Callable[[], None]:
    """Call `action` (in the running loop: a task's `cancel`, an event's `set`) the first time
    one of `signums` comes; the same signal again changes nothing, also once the loop has
    closed (a second cancel would cut the shutdown short). Returns the function that calls it
    so, for other reasons to stop. `came` is set the moment a signal comes, for a blocking
    call on the loop's thread (which holds `action` back) to stop on.

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
        if came is not None:
            came.set()
        with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending
            loop.call_soon_threadsafe(once)

    for signum in signums:
        signal.signal(signum, signalled)
        signal.siginterrupt(signum, False)  # as asyncio's: no system call of a thread cut short
    return once
