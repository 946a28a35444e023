"""How a session ended, as `lace run`, `lace wait` and `lace.run` report it: the root's last
answer, the board, the usage and the exit code."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from lace.core.records import Agent, Task
from lace.core.usage import Totals, priced_models, totals_by
from lace.llm.prices import known_price
from lace.store import Store

EXIT_QUIET, EXIT_ROOT_FAILED = 0, 1


@dataclass(frozen=True)
class Outcome:
    """A session read after its agents went quiet (or while they still run)."""

    root_id: str
    root: Agent
    answer: str | None
    agents: list[Agent]
    tasks: list[Task]

    @property
    def exit_code(self) -> int:
        """`lace run`'s code for a quiet session: 1 when the root failed, else 0."""
        return EXIT_ROOT_FAILED if self.root.status == "error" else EXIT_QUIET

    def usage(self) -> dict[str, Any]:
        """Tokens and cost of every agent of the session."""
        return {"tokens_in": sum(agent.tokens_in for agent in self.agents),
                "tokens_out": sum(agent.tokens_out for agent in self.agents),
                "cost_usd": sum(agent.cost_usd for agent in self.agents)}

    def task_counts(self) -> dict[str, int]:
        """How many of the session's tasks have each status."""
        return dict(sorted(Counter(task.status for task in self.tasks).items()))


def read_outcome(store: Store, root_id: str) -> Outcome:
    """The session's root, its last non-empty answer, its agents and all its tasks."""
    with store.reading() as tx:
        root = tx.agents.get(root_id)
        answers = [event.data["message"].get("content") for event in tx.events.of_thread(root_id)
                   if event.type == "agent_message"]
        agents = tx.agents.of_session(root_id)
        tasks, _ = tx.tasks.query(root_id, include_closed=True)
    answer = next((text for text in reversed(answers) if text), None)
    return Outcome(root_id=root_id, root=root, answer=answer, agents=agents, tasks=tasks)


def session_totals(store: Store, root_id: str) -> Totals:
    """Tokens, calls and cost of every model call of the session; calls to a model with no
    known price are counted apart (`Totals.unpriced_calls`), never as $0."""
    with store.reading() as tx:
        groups = tx.usage.call_groups(root_id)
    rows = totals_by(groups, "thread", priced_models(groups, known_price))
    return sum(rows.values(), Totals())
