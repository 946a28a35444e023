"""Agents' lifetime: list one's descendants with their usage, and stop a subtree."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from lace.core.assignee import HUMAN
from lace.core.ids import root_of
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError


class AgentsList(Tool):
    """List your helpers and theirs (your descendants): status, model, current task, last
    activity, and the tokens and cost of each one's whole subtree."""

    name: ClassVar[str] = "agents_list"

    def run(self, tx: Tx, context: ToolContext) -> str:
        below = [agent for agent in tx.agents.subtree(context.thread_id)
                 if agent.thread_id != context.thread_id]
        if not below:
            return "You have no helpers."
        lines = []
        for agent in below:
            usage = tx.usage.subtree(agent.thread_id)
            task = tx.tasks.get(agent.current_task).title if agent.current_task else "no task"
            stopped = f" ({agent.stop_reason})" if agent.stop_reason else ""
            lines.append(f"{agent.thread_id} [{agent.status}{stopped}] {agent.model_name} · "
                         f"{task} · last active {agent.updated_at} · subtree {usage.tokens} "
                         f"tokens ${usage.cost_usd:.4f} {usage.turns} turns")
        return "\n".join(lines)


class AgentStop(Tool):
    """Stop one of your descendants and its whole subtree: running turns are cancelled, their
    open tasks are blocked with your reason, and their creators are told."""

    name: ClassVar[str] = "agent_stop"
    thread_id: str = Field(min_length=1, description="A descendant's thread id.")
    reason: str = Field(min_length=1, max_length=2000)

    def run(self, tx: Tx, context: ToolContext) -> str:
        by_person = context.thread_id == HUMAN
        if by_person and root_of(self.thread_id) != context.session_id:
            raise ToolError(f"Unknown agent {self.thread_id!r} in this session "
                            f"({context.session_id}); threads_list shows its agents.")
        if not by_person and not self.thread_id.startswith(f"{context.thread_id}."):
            raise ToolError(f"You can only stop your own descendants (thread ids starting with "
                            f"{context.thread_id}.); {self.thread_id!r} is not one.")
        if tx.agents.find(self.thread_id) is None:
            lister = "threads_list shows the session's agents" if by_person else \
                "agents_list shows your helpers"
            raise ToolError(f"Unknown agent {self.thread_id!r}; {lister}.")
        stopped = tx.lifecycle.stop_subtree(
            self.thread_id, reason=f"{self.reason} (by {context.thread_id})",
            by_person=by_person)
        if not stopped:
            return f"{self.thread_id} and its subtree were already stopped."
        return f"Stopped {len(stopped)} agent(s): {', '.join(stopped)}."


LIFETIME_TOOLS: tuple[type[Tool], ...] = (AgentsList, AgentStop)
