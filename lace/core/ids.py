"""Thread ids (`lace_YYYYMMDD_xxxxxx` roots, `<parent>.N` children) and task ids."""

from __future__ import annotations

import re
import secrets

from lace.core.clock import today_compact

ROOT_THREAD_PATTERN = r"lace_\d{8}_[0-9a-z]{6}"
THREAD_ID_RE = re.compile(rf"^{ROOT_THREAD_PATTERN}(\.[1-9]\d*)*$")
TASK_ID_RE = re.compile(r"^task_\d{8}_[0-9a-f]{6}$")
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _random_suffix(alphabet: str) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(6))


def new_root_thread_id() -> str:
    """A fresh root (session) thread id."""
    return f"lace_{today_compact()}_{_random_suffix(_ALPHABET)}"


def new_task_id() -> str:
    """A fresh task id; the store retries on the rare clash."""
    return f"task_{today_compact()}_{_random_suffix('0123456789abcdef')}"


def child_thread_id(parent_id: str, index: int) -> str:
    """The id of the `index`-th child of `parent_id` (1-based)."""
    return f"{parent_id}.{index}"


def child_index(thread_id: str) -> int | None:
    """The last `.N` part of a child id, or None for a root."""
    head, dot, tail = thread_id.rpartition(".")
    return int(tail) if dot and head and tail.isdigit() else None


def root_of(thread_id: str) -> str:
    """The session (root thread) a thread id belongs to."""
    return thread_id.split(".", 1)[0]


def is_thread_id(text: str) -> bool:
    """Whether `text` has the shape of a thread id."""
    return bool(THREAD_ID_RE.match(text))


def depth_of(thread_id: str) -> int:
    """0 for a root, 1 for its children, and so on."""
    return thread_id.count(".")
