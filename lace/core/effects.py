"""What a committed transaction caused (notices posted, agents spawned or stopped, tasks
changed): one value the store returns and the runtime acts on after COMMIT, and the log its
verbs record into while the transaction runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Notice:
    """An inbox row posted: its thread must run a turn soon, unless the row only `wakes`
    nobody (progress, read with the thread's next turn)."""

    thread_id: str
    kind: str
    task_id: str | None
    wakes: bool = True


@dataclass(frozen=True)
class Spawned:
    """A new agent, created for a task."""

    thread_id: str
    parent_id: str
    model_name: str
    task_id: str


@dataclass(frozen=True)
class Effects:
    """Everything one transaction (or several, merged with `|`) did that others must hear of."""

    notices: tuple[Notice, ...] = ()
    spawned: tuple[Spawned, ...] = ()
    stopped: tuple[str, ...] = ()
    tasks: frozenset[str] = frozenset()
    """Tasks created or changed (fields, status or notes)."""

    @property
    def woken(self) -> list[str]:
        """Threads with new inbox rows that start a turn, each once, in the order they were
        told."""
        return list(dict.fromkeys(notice.thread_id for notice in self.notices if notice.wakes))

    def __bool__(self) -> bool:
        return bool(self.notices or self.spawned or self.stopped or self.tasks)

    def __or__(self, other: Effects) -> Effects:
        return Effects(notices=self.notices + other.notices, spawned=self.spawned + other.spawned,
                       stopped=self.stopped + other.stopped, tasks=self.tasks | other.tasks)


NO_EFFECTS = Effects()


class EffectLog:
    """What one transaction caused so far: its verbs record into it, and only the owner of the
    transaction reads it (`collect`), once it committed."""

    def __init__(self) -> None:
        self._notices: list[Notice] = []
        self._spawned: list[Spawned] = []
        self._stopped: list[str] = []
        self._tasks: set[str] = set()

    def notice(self, notice: Notice) -> None:
        """An inbox row was posted."""
        self._notices.append(notice)

    def spawn(self, spawned: Spawned) -> None:
        """An agent was created for a task."""
        self._spawned.append(spawned)

    def stop(self, thread_ids: list[str]) -> None:
        """These agents were stopped."""
        self._stopped.extend(thread_ids)

    def task(self, task_id: str) -> None:
        """A task was created or changed (fields, status, notes or edges)."""
        self._tasks.add(task_id)

    def collect(self) -> Effects:
        """Everything recorded, as one value."""
        return Effects(notices=tuple(self._notices), spawned=tuple(self._spawned),
                       stopped=tuple(self._stopped), tasks=frozenset(self._tasks))
