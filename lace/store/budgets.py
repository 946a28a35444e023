"""Budgets over the tree: the session's caps at the root, a spawned subtree's own caps below;
checked before every model call, and told to the agent at the start of each turn."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lace.config import Budget, Budgets
from lace.core.clock import seconds_since
from lace.core.providers import LOCAL_PROVIDERS
from lace.core.records import Agent
from lace.store.agent_rules import Tx

DIMENSIONS = (("tokens", "tokens"), ("cost_usd", "USD"), ("turns", "turns"),
              ("seconds", "seconds"))


@dataclass(frozen=True)
class Halt:
    """Why no further model call may be made: whose subtree, and the reason."""

    owner: str
    reason: str


def _chain(thread_id: str) -> list[str]:
    parts = thread_id.split(".")
    return [".".join(parts[: n + 1]) for n in range(len(parts))]


def _chain_agents(tx: Tx, thread_id: str) -> dict[str, Agent]:
    """The agent rows of a thread and its ancestors, in one query."""
    return {agent.thread_id: agent for agent in tx.agents_by_id(_chain(thread_id))}


def caps_of(tx: Tx, thread_id: str, budgets: Budgets,
            agent: Agent | None = None) -> Budget | None:
    """The caps on the subtree rooted at `thread_id`: the session's for a root."""
    agent = agent or tx.get_agent(thread_id)
    if "." not in thread_id:
        budget = budgets.for_session(agent.provider not in LOCAL_PROVIDERS)
        return None if budget == Budget() else budget
    return Budget.model_validate(agent.budget) if agent.budget else None


def _capped_subtrees(tx: Tx, thread_id: str, budgets: Budgets,
                     chain: dict[str, Agent] | None = None,
                     ) -> Iterator[tuple[str, Budget, dict[str, float]]]:
    """(owner, caps, used) for the agent and each ancestor whose subtree is capped."""
    chain = chain if chain is not None else _chain_agents(tx, thread_id)
    for owner in _chain(thread_id):
        caps = caps_of(tx, owner, budgets, chain[owner])
        if caps is None:
            continue
        usage = tx.subtree_usage(owner)
        yield owner, caps, {"tokens": usage.tokens, "cost_usd": usage.cost_usd,
                            "turns": usage.turns,
                            "seconds": seconds_since(chain[owner].created_at)}


def remaining(tx: Tx, thread_id: str, budgets: Budgets) -> dict[str, float]:
    """What is left in each capped dimension, the tightest over the agent and its ancestors."""
    left: dict[str, float] = {}
    for _, caps, used in _capped_subtrees(tx, thread_id, budgets):
        for dimension, _ in DIMENSIONS:
            cap = getattr(caps, dimension)
            if cap is not None:
                left[dimension] = min(left.get(dimension, cap), cap - used[dimension])
    return left


def halt_before_call(tx: Tx, thread_id: str, budgets: Budgets) -> Halt | None:
    """A reason to make no model call: the agent was stopped, or a cap in its chain is used."""
    chain = _chain_agents(tx, thread_id)
    agent = chain[thread_id]
    if agent.status == "stopped":
        return Halt(thread_id, agent.stop_reason or "stopped")
    for owner, caps, used in _capped_subtrees(tx, thread_id, budgets, chain):
        for dimension, unit in DIMENSIONS:
            cap = getattr(caps, dimension)
            if cap is not None and used[dimension] >= cap:
                where = "session" if "." not in owner else f"subtree of {owner}"
                key = f"[budgets] session_{dimension}" if "." not in owner else "its budget"
                return Halt(owner, f"budget reached: {where} used {used[dimension]:g} of "
                                   f"{cap:g} {unit} ({key})")
    return None


def budget_line(tx: Tx, thread_id: str, budgets: Budgets) -> str | None:
    """`[LACE BUDGET] Remaining: ...`, or None when nothing is capped."""
    left = remaining(tx, thread_id, budgets)
    if not left:
        return None
    parts = [f"{max(0, left[d]):,.0f} {unit}" if d != "cost_usd" else f"${max(0, left[d]):.4f}"
             for d, unit in DIMENSIONS if d in left]
    return "[LACE BUDGET] Remaining for you and your helpers: " + ", ".join(parts) + "."
