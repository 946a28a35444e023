"""Task statuses, priorities and the transition table that governs status changes."""

from __future__ import annotations

from typing import Final, Literal, get_args

from lace.core.errors import InvalidTransitionError
from lace.core.records import Task

Status = Literal["pending", "in_progress", "blocked", "completed", "archived"]
Priority = Literal["high", "medium", "low"]
STATUSES: Final[tuple[str, ...]] = get_args(Status)
PRIORITIES: Final[tuple[str, ...]] = get_args(Priority)
ACTIVE_STATUSES: Final = ("pending", "in_progress")
"""Work still to be done by someone: a wait on such a task goes on."""
OPEN_STATUSES: Final = (*ACTIVE_STATUSES, "blocked")
FINISHED_STATUSES: Final = ("completed", "archived")
"""Nothing more will be done: a task that waits on it no longer waits."""
STALLED_STATUSES: Final = ("blocked", "archived")
"""Will not be completed as things stand: whoever waits on it is told so."""
PRIORITY_RANK: Final = {"high": 0, "medium": 1, "low": 2}
STATUS_SYMBOL: Final = {
    "pending": "○",
    "in_progress": "◐",
    "blocked": "⊘",
    "completed": "●",
    "archived": "⌫",
}

WAITING_SYMBOL: Final = "⧖"
"""A pending task that waits for others to be completed."""


def task_symbol(task: Task) -> str:
    """The mark of a task on a board: its status's, or the waiting mark."""
    return WAITING_SYMBOL if task.waits_for and task.status == "pending" else \
        STATUS_SYMBOL[task.status]


TRANSITIONS: Final[dict[str, tuple[str, ...]]] = {
    "pending": ("in_progress", "blocked", "completed", "archived"),
    "in_progress": ("pending", "blocked", "completed"),
    "blocked": ("pending", "in_progress", "completed"),
    "completed": ("archived",),
    "archived": (),
}


def check_transition(task_id: str, current: str, wanted: str) -> None:
    """Raise an error naming the allowed moves unless `current -> wanted` is allowed."""
    allowed = TRANSITIONS[current]
    if wanted in allowed:
        return
    if wanted == current and allowed:
        raise InvalidTransitionError(
            f"Task {task_id} is already {current}; allowed: {', '.join(allowed)}.")
    if not allowed:
        raise InvalidTransitionError(
            f"Task {task_id} is {current}; an archived task cannot change status. "
            "Create a follow-up task instead."
        )
    hint = ""
    if current == "completed":
        hint = " A finished task is not reopened: create a follow-up task."
    raise InvalidTransitionError(
        f"Task {task_id} cannot move from {current} to {wanted}; "
        f"allowed: {', '.join(allowed)}.{hint}"
    )
