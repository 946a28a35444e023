"""The openai SDK, imported off the critical path, and one `AsyncOpenAI` per endpoint: its
import (half a second here) runs in a thread that `lace run` starts first thing, and each
endpoint's connection pool is sized for a fan-out (lace's `max_running` is the one cap on calls
in flight). Every answer is read with a limit (`answer_limit`)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openai import AsyncOpenAI

NO_KEY = "no-key"
"""The key sent to a local server when the environment has none: the SDK refuses to call
without one, and such a server ignores it."""
MAX_CONNECTIONS = 10_000
"""Connections one endpoint may open and keep: more than any fan-out lace runs (its own
`max_running` is the cap on calls in flight), so the pool never holds a call back."""

_importing: list[threading.Thread] = []
_import_lock = threading.Lock()


def start_import() -> None:
    """Import the SDK in a daemon thread (once), so the first model call finds it ready."""
    with _import_lock:
        if not _importing:
            thread = threading.Thread(target=_import, name="openai-import", daemon=True)
            thread.start()
            _importing.append(thread)


def _import() -> None:
    with contextlib.suppress(Exception):  # a broken install fails again, in the call
        importlib.import_module("openai")


def imported() -> bool:
    """Whether the SDK's import is done (`sdk()` returns at once)."""
    return not _importing or not _importing[0].is_alive()


def sdk() -> ModuleType:
    """The `openai` module: waits for the import `start_import` began, if any."""
    if _importing:
        _importing[0].join()
    return importlib.import_module("openai")


async def sdk_ready() -> ModuleType:
    """`sdk()` without blocking the event loop while the import runs."""
    if not (imported() and "openai" in sys.modules):
        await asyncio.to_thread(sdk)
    return sdk()


@dataclass(frozen=True)
class Settings:
    """What makes an endpoint: its URL, key (None for a local server), organization, and the
    timeout of one request."""

    base_url: str
    api_key: str | None
    organization: str | None
    timeout_s: float


def new_client(settings: Settings) -> AsyncOpenAI:
    """An `AsyncOpenAI` for one endpoint: no retries of its own (lace's backoff is the one
    retry policy, and every attempt is an `llm_calls` row), a pool of `MAX_CONNECTIONS`,
    answers read with a limit."""
    sdk()  # the import started first thing, waited for
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    from lace.llm.openai_transport import limited_transport

    http = DefaultAsyncHttpxClient(transport=limited_transport(MAX_CONNECTIONS))
    return AsyncOpenAI(base_url=settings.base_url, api_key=settings.api_key or NO_KEY,
                              organization=settings.organization, timeout=settings.timeout_s,
                              max_retries=0, http_client=http)
