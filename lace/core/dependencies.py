"""Task dependencies as pure rules: `#N` references to the tasks of one call, cycles found with
their path, the moves a waiting task cannot make, and how tasks are named in these messages."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from lace.core.errors import DependencyError, InvalidTransitionError
from lace.core.records import Task
from lace.core.tasks import ACTIVE_STATUSES

CALL_REF_PREFIX: Final = "#"
RESULT_CAP: Final = 2000
"""Characters of each blocker's result that a released task's assignment carries."""
REFUSED_WHILE_WAITING: Final = ("in_progress", "completed")
"""Moves a task cannot make while it waits: nobody starts or finishes it before its blockers."""


def task_label(task_id: str, title: str) -> str:
    """A task as dependency messages name it: `task_… ("Title")`."""
    return f'{task_id} ("{title}")'


def call_ref(ref: str, count: int, who: str) -> int | None:
    """The 0-based index of the task that `#N` names among the `count` tasks of one call, or
    None when `ref` is not a `#N` (a task id); `who` names the task that refers, for the error
    a bad `#N` raises."""
    if not ref.startswith(CALL_REF_PREFIX):
        return None
    number = ref[len(CALL_REF_PREFIX):]
    if not (number.isascii() and number.isdigit() and len(number) <= 4
            and 1 <= int(number) <= count):
        raise DependencyError(
            f"{who} is blocked_by {ref!r}, which names no task of this call: \"#N\" is the "
            f"N-th task of the same task_create, here #1 to #{count}. Use a task id for a "
            "task that already exists.")
    return int(number) - 1


def find_cycle(blockers: Mapping[str, Iterable[str]], start: str) -> list[str] | None:
    """The shortest path by which `start` waits for itself, `[start, ..., start]` (each task
    waits for the next), through `blockers` (each task to the tasks it waits for); None when
    there is none. Breadth first, so a long chain costs one visit per task."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for task in frontier:
            for blocker in blockers.get(task, ()):
                if blocker == start:
                    path = [task]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if blocker not in parents:
                    parents[blocker] = task
                    following.append(blocker)
        frontier = following
    return None


def any_cycle(blockers: Mapping[str, Collection[str]]) -> list[str] | None:
    """A cycle anywhere in `blockers` (`[task, ..., task]`, each waiting for the next), or
    None: tasks are peeled off once nothing they wait for is left (Kahn), and what is left
    waits, task after task, in a loop; a whole board costs one pass."""
    waiting = {task: set(found) for task, found in blockers.items()}
    dependents: dict[str, list[str]] = {}
    for task, found in waiting.items():
        for blocker in found:
            dependents.setdefault(blocker, []).append(task)
    ready = [task for task in {*waiting, *dependents} if not waiting.get(task)]
    while ready:
        done = ready.pop()
        for task in dependents.get(done, ()):
            waiting[task].discard(done)
            if not waiting[task]:
                ready.append(task)
    left = [task for task, found in waiting.items() if found]  # in the order given
    if not left:
        return None
    task = left[0]
    walked = {task: 0}  # each task left waits for another task left: the walk loops
    while True:
        task = next(blocker for blocker in blockers[task] if blocker in waiting[task])
        if task in walked:
            path = list(walked)[walked[task]:]
            return [*path, task]
        walked[task] = len(walked)


def cycle_error(path: Sequence[str], labels: Mapping[str, str]) -> DependencyError:
    """The refusal of a dependency that closes `path` (from `find_cycle`)."""
    shown = " → ".join(labels.get(task, task) for task in path)
    return DependencyError(
        f"Refused: these dependencies make a cycle, {shown}: each waits for the next, so none "
        "could ever start. Drop one of them (a task cannot wait for itself, directly or "
        "through others).")


def check_not_waiting(task_id: str, wanted: str, waits_for: Sequence[str]) -> None:
    """Refuse moving a task that still waits for `waits_for` (labels) to in_progress or
    completed."""
    if waits_for and wanted in REFUSED_WHILE_WAITING:
        raise InvalidTransitionError(
            f"Task {task_id} waits for {', '.join(waits_for)}: it cannot move to {wanted} "
            "before they are completed. Its assignee is told when the last one is (an agent "
            "planned with new: is spawned then); to start it now, remove the dependency with "
            "task_update remove_blocked_by.")


def batch_running(tasks: Sequence[Task]) -> bool:
    """Whether a batch (the tasks one agent created in one model reply) still has a task to
    wait for: one pending or in progress that can still finish, because every task it waits
    for is completed or can itself still finish. A task that waits for one outside the batch,
    or for one that ended blocked or archived, holds nothing back."""
    by_id = {task.id: task for task in tasks}
    known: dict[str, bool] = {}

    def can_finish(task: Task) -> bool:
        if task.id not in known:
            known[task.id] = False  # no cycles (refused on creation); this ends any
            known[task.id] = task.status in ACTIVE_STATUSES and all(
                blocker in by_id and (by_id[blocker].status == "completed"
                                      or can_finish(by_id[blocker]))
                for blocker in task.waits_for)
        return known[task.id]

    return any(can_finish(task) for task in tasks)
