"""A plain snapshot of one session for the screen: threads, agents, tasks and each thread's mark.
Loaded in one read transaction on the app's reader thread; no Textual here, so it can be tested
on its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from lace.core.agents import BUSY_STATUSES, HALTED_STATUSES
from lace.core.records import Agent, Task, Thread
from lace.runtime.public import Tx

MARKS = {
    "idle": "○", "running": "◐", "waiting": "⧗", "blocked": "⊘", "error": "✗",
    "stopped": "■", "done": "✓", "interrupted": "↯",
}


@dataclass(frozen=True)
class ThreadRow:
    """One line of the thread tree."""

    thread: Thread
    agent: Agent | None
    state: str
    task_title: str | None
    subtree_tokens: int = 0
    subtree_cost: float = 0.0

    @property
    def label(self) -> str:
        """`◐ .1 worker · Write the announcement · 45 tok $0.01`."""
        agent = self.agent
        short = "root" if self.thread.parent_id is None else \
            "." + self.thread.id.split(".", 1)[1]
        name = "(no agent)" if agent is None else agent.model if short == "root" else agent.name
        if agent is not None and name not in (agent.model, agent.model.rsplit("/", 1)[-1]):
            name = f"{name} on {agent.model}"  # a profile's model, or a fallback's
        parts = [f"{MARKS[self.state]} {short} {name}"]
        if self.task_title:
            parts.append(self.task_title[:24])
        if agent:
            own = agent.tokens_in + agent.tokens_out
            below = f" (tree {self.subtree_tokens} tok ${self.subtree_cost:.2f})" \
                if self.subtree_tokens != own else ""
            parts.append(f"{own} tok ${agent.cost_usd:.2f}{below}")
        return " · ".join(parts)


@dataclass(frozen=True)
class SessionView:
    """Everything the main screen shows about one session."""

    root: Thread
    rows: list[ThreadRow]
    tasks: list[Task]
    running: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    children: dict[str, list[str]] = field(default_factory=dict)

    def row(self, thread_id: str) -> ThreadRow | None:
        """The row of a thread, if it belongs to this session."""
        return next((row for row in self.rows if row.thread.id == thread_id), None)


def thread_state(agent: Agent | None, task: Task | None, open_created: int) -> str:
    """The status mark of a thread: the agent's own status, refined by its task's."""
    if agent is None:
        return "idle"
    if agent.status in (*BUSY_STATUSES, *HALTED_STATUSES):
        return agent.status
    if task is not None and task.assigned_to == agent.thread_id:
        if task.status == "blocked":
            return "blocked"
        if task.status == "completed" and not open_created:
            return "done"
    return "waiting" if open_created else "idle"


def _order(thread: Thread) -> list[int]:
    return [int(part) for part in thread.id.split(".")[1:]]


def _subtree_totals(agents: list[Agent]) -> dict[str, tuple[int, float]]:
    """Tokens and cost of each thread's subtree: every agent adds to itself and its ancestors."""
    totals: dict[str, tuple[int, float]] = {}
    for agent in agents:
        parts = agent.thread_id.split(".")
        for depth in range(1, len(parts) + 1):
            owner = ".".join(parts[:depth])
            tokens, cost = totals.get(owner, (0, 0.0))
            totals[owner] = (tokens + agent.tokens_in + agent.tokens_out, cost + agent.cost_usd)
    return totals


def load_session_view(tx: Tx, root_id: str, *, with_tasks: bool = True) -> SessionView:
    """Read one consistent snapshot of a session; every task only `with_tasks` (the board),
    else just the agents' current tasks, so a refresh stays quick on a big board."""
    root = tx.threads.get_session(root_id)
    threads = sorted(tx.threads.of_session(root_id), key=_order)
    agents = {agent.thread_id: agent for agent in tx.agents.of_session(root_id)}
    current_ids = [agent.current_task for agent in agents.values() if agent.current_task]
    tasks = tx.edges.attach(tx.tasks.query(root_id, include_closed=True)[0], root_id) \
        if with_tasks else []
    by_id = {task.id: task for task in (tasks if with_tasks else tx.tasks.by_ids(current_ids))}
    open_created = tx.tasks.open_by_creator(root_id)
    totals = _subtree_totals(list(agents.values()))
    rows: list[ThreadRow] = []
    children: dict[str, list[str]] = {}
    for thread in threads:
        agent = agents.get(thread.id)
        current = by_id.get(agent.current_task or "") if agent else None
        state = thread_state(agent, current, open_created.get(thread.id, 0))
        tokens, cost = totals.get(thread.id, (0, 0.0))
        rows.append(ThreadRow(thread, agent, state, current.title if current else None,
                              tokens, cost))
        if thread.parent_id:
            children.setdefault(thread.parent_id, []).append(thread.id)
    return SessionView(
        root=root, rows=rows, tasks=tasks, children=children,
        running=sum(1 for a in agents.values() if a.status == "running"),
        tokens=sum(a.tokens_in + a.tokens_out for a in agents.values()),
        cost_usd=sum(a.cost_usd for a in agents.values()))
