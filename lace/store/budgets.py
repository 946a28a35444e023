"""Budgets over the tree: the session's caps at the root, a spawned subtree's own caps below;
checked before every model call, and told to the agent at the start of each turn."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lace.config import Budget, Budgets
from lace.core.clock import seconds_since
from lace.core.providers import LOCAL_PROVIDERS
from lace.core.records import Agent
from lace.store.tx import Tx

DIMENSIONS = (("tokens", "tokens"), ("cost_usd", "USD"), ("turns", "turns"),
              ("seconds", "seconds"))


@dataclass(frozen=True)
class Halt:
    """Why no further model call may be made: whose subtree, and the reason."""

    owner: str
    reason: str
    wait: bool = False
    """Not over the cap, but the calls in flight may take what is left: wait for them."""


def _chain(thread_id: str) -> list[str]:
    parts = thread_id.split(".")
    return [".".join(parts[: n + 1]) for n in range(len(parts))]


def _chain_agents(tx: Tx, thread_id: str) -> dict[str, Agent]:
    """The agent rows of a thread and its ancestors, in one query."""
    return {agent.thread_id: agent for agent in tx.agents.by_ids(_chain(thread_id))}


def caps_of(tx: Tx, thread_id: str, budgets: Budgets, agent: Agent | None = None,
            real_caller: bool = False) -> Budget | None:
    """The caps on the subtree rooted at `thread_id`: the session's for a root, where a call
    to a real provider (by whichever agent of the session makes it) gets the default token
    cap when none is configured."""
    agent = agent or tx.agents.get(thread_id)
    if "." not in thread_id:
        budget = budgets.for_session(real_caller)
        return None if budget == Budget() else budget
    return Budget.model_validate(agent.budget) if agent.budget else None


def _caps_in_chain(tx: Tx, thread_id: str, budgets: Budgets,
                   chain: dict[str, Agent]) -> list[tuple[str, Budget]]:
    """(owner, caps) for the agent and each ancestor whose subtree is capped: no usage read."""
    real_caller = chain[thread_id].provider not in LOCAL_PROVIDERS
    found = ((owner, caps_of(tx, owner, budgets, chain[owner], real_caller))
             for owner in _chain(thread_id))
    return [(owner, caps) for owner, caps in found if caps is not None]


def _used(tx: Tx, owner: Agent) -> dict[str, float]:
    """What the subtree of `owner` used; tokens reserved for calls in flight apart. One sum
    over the subtree's agent rows: read once per check, and only for capped subtrees."""
    usage = tx.usage.subtree(owner.thread_id)
    return {"tokens": usage.tokens, "cost_usd": usage.cost_usd, "turns": usage.turns,
            "seconds": seconds_since(owner.created_at), "reserved": usage.reserved}


def _capped_subtrees(tx: Tx, thread_id: str, budgets: Budgets,
                     chain: dict[str, Agent] | None = None,
                     ) -> Iterator[tuple[str, Budget, dict[str, float]]]:
    """(owner, caps, used) for the agent and each ancestor whose subtree is capped; tokens
    reserved for calls in flight count as used."""
    chain = chain if chain is not None else _chain_agents(tx, thread_id)
    for owner, caps in _caps_in_chain(tx, thread_id, budgets, chain):
        yield owner, caps, _used(tx, chain[owner])


def _tokens_capped(tx: Tx, thread_id: str, budgets: Budgets, chain: dict[str, Agent]) -> bool:
    return any(caps.tokens is not None
               for _, caps in _caps_in_chain(tx, thread_id, budgets, chain))


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
    return _halt(tx, thread_id, budgets, _chain_agents(tx, thread_id))


def check_before_call(tx: Tx, thread_id: str, budgets: Budgets) -> tuple[Halt | None, bool]:
    """`halt_before_call`, and whether tokens are capped in the chain (so the call must set
    tokens aside in a write first): a read, enough for the many calls no cap concerns. When
    tokens are capped the halt is left to `reserve_before_call` (None here unless the agent
    was stopped), which checks in its write: usage is summed once per call, not twice."""
    chain = _chain_agents(tx, thread_id)
    if _tokens_capped(tx, thread_id, budgets, chain):
        return _stopped(chain[thread_id]), True
    return _halt(tx, thread_id, budgets, chain), False


def reserve_before_call(tx: Tx, thread_id: str, budgets: Budgets,
                        estimate: Callable[[], int]) -> tuple[Halt | None, int]:
    """`halt_before_call`, and when the call may go ahead and tokens are capped in its chain,
    the `estimate()` of its tokens set aside for it (in this transaction), so calls made at
    once by many agents cannot each spend what is left. Returns the halt and what was set
    aside (to give back when the call is recorded)."""
    chain = _chain_agents(tx, thread_id)
    halt = _halt(tx, thread_id, budgets, chain)
    if halt is not None or not _tokens_capped(tx, thread_id, budgets, chain):
        return halt, 0
    tokens = estimate()
    tx.usage.reserve(thread_id, tokens)
    return None, tokens


def _stopped(agent: Agent) -> Halt | None:
    if agent.status == "stopped":
        return Halt(agent.thread_id, agent.stop_reason or "stopped")
    return None


def _halt(tx: Tx, thread_id: str, budgets: Budgets, chain: dict[str, Agent]) -> Halt | None:
    stopped = _stopped(chain[thread_id])
    if stopped is not None:
        return stopped
    for owner, caps, used in _capped_subtrees(tx, thread_id, budgets, chain):
        for dimension, unit in DIMENSIONS:
            cap = getattr(caps, dimension)
            held = used["reserved"] if dimension == "tokens" else 0
            if cap is None or used[dimension] + held < cap:
                continue
            where = "session" if "." not in owner else f"subtree of {owner}"
            key = f"[budgets] session_{dimension}" if "." not in owner else "its budget"
            if used[dimension] >= cap:
                return Halt(owner, f"budget reached: {where} used {used[dimension]:g} of "
                                   f"{cap:g} {unit} ({key})")
            return Halt(thread_id, f"budget nearly reached: {where} used {used[dimension]:g} "
                                   f"of {cap:g} {unit} ({key}) and {held:g} more are set aside "
                                   "for the calls in flight", wait=True)
    return None


def budget_line(tx: Tx, thread_id: str, budgets: Budgets) -> str | None:
    """`[LACE BUDGET] Remaining: ...`, or None when nothing is capped."""
    left = remaining(tx, thread_id, budgets)
    if not left:
        return None
    parts = [f"{max(0, left[d]):,.0f} {unit}" if d != "cost_usd" else f"${max(0, left[d]):.4f}"
             for d, unit in DIMENSIONS if d in left]
    return "[LACE BUDGET] Remaining for you and your helpers: " + ", ".join(parts) + "."
