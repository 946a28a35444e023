"""How a session ended, as `lace run`, `lace wait` and `lace.run` report it: the root's last
answer, the board, the usage and the exit code."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from lace.core.records import Agent, Task
from lace.core.usage import Totals, totals_by
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
    failure: str | None = None
    """Why the root failed (its last error), when it did."""
    silent: bool = False
    """The root's last reply held neither text nor a tool call: its model gave no answer."""
    asked: bool = True
    """The root is an agent that was asked something: False for a board a person (the CLI's
    task commands) or an MCP client fills, whose root never calls a model."""

    @property
    def problem(self) -> str | None:
        """What went wrong with the root, in one line for the person; None when it answered."""
        if self.root.status == "error":
            return f"the root agent failed: {self.failure or 'see lace show ' + self.root_id}"
        if self.root.status == "stopped":
            return f"the root agent was stopped: {self.root.stop_reason or 'no reason given'}"
        if self.silent:
            return (f"the model {self.root.model_name} gave no answer (an empty reply); see "
                    f"lace show {self.root_id}")
        if self.answer is None and self.asked:
            return (f"the session ended without an answer from its root agent (status "
                    f"{self.root.status}); see lace show {self.root_id}")
        return None

    @property
    def exit_code(self) -> int:
        """`lace run`'s and `lace wait`'s code for a quiet session: 1 when the session ended
        without the root's answer (it failed, was stopped first, or its model gave none),
        else 0 (a root that was never asked anything owes no answer)."""
        return EXIT_ROOT_FAILED if self.root.status == "error" or (
            self.answer is None and self.asked) else EXIT_QUIET

    def usage(self) -> dict[str, Any]:
        """Tokens and cost of every agent of the session."""
        return {"tokens_in": sum(agent.tokens_in for agent in self.agents),
                "tokens_out": sum(agent.tokens_out for agent in self.agents),
                "cost_usd": sum(agent.cost_usd for agent in self.agents)}

    def task_counts(self) -> dict[str, int]:
        """How many of the session's tasks have each status."""
        return dict(sorted(Counter(task.status for task in self.tasks).items()))


def read_outcome(store: Store, root_id: str) -> Outcome:
    """The session's root, its last non-empty answer (None when its last reply was empty),
    its last error, its agents and all its tasks."""
    with store.reading() as tx:
        root = tx.agents.get(root_id)
        events = tx.events.of_thread(root_id)
        agents = tx.agents.of_session(root_id)
        tasks, _ = tx.tasks.query(root_id, include_closed=True)
    replies = [event.data["message"] for event in events if event.type == "agent_message"]
    errors = [str(event.data.get("error")) for event in events
              if event.type == "error" and not event.data.get("fallback_to")]
    answer = next((reply.get("content") for reply in reversed(replies) if reply.get("content")),
                  None)
    silent = bool(replies) and not replies[-1].get("content") \
        and not replies[-1].get("tool_calls")
    silent = silent and root.status == "idle"
    failure = errors[-1] if errors and root.status == "error" else None
    asked = bool(replies) or root.status != "idle"  # an idle root that never replied: a board
    return Outcome(root_id=root_id, root=root, answer=None if silent else answer,
                   agents=agents, tasks=tasks, failure=failure, silent=silent, asked=asked)


def session_totals(store: Store, root_id: str) -> Totals:
    """Tokens, calls and cost of every model call of the session; calls to a model with no
    known price are counted apart (`Totals.unpriced_calls`), never as $0."""
    with store.reading() as tx:
        groups = tx.usage.call_groups(root_id)
    rows = totals_by(groups, "thread")
    return sum(rows.values(), Totals())
