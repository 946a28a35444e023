"""Budgets over the tree: the session's caps at the root, a spawned subtree's own caps below;
checked before every model call, and told to the agent at the start of each turn."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from lace.config import Budget, Budgets
from lace.core.clock import seconds_since
from lace.core.providers import LOCAL_PROVIDERS
from lace.core.records import Agent, Lease
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


def _chain_agents(tx: Tx, thread_id: str, budgets: Budgets,
                  agent: Agent | None = None) -> dict[str, Agent]:
    """The agent rows of a thread and its ancestors that the checks read, in one query: a
    helper's chain leaves out the root's row unless the session caps seconds (the row's age;
    the session's caps are `budgets`', and a row's budget and age never change); not the
    thread's own when given (`agent`, as this transaction read it)."""
    chain = _chain(thread_id)
    if len(chain) > 1 and budgets.session_seconds is None:
        chain = chain[1:]
    known = {} if agent is None else {thread_id: agent}
    read = tx.agents.by_ids([owner for owner in chain if owner not in known])  # [] reads none
    return {**known, **{row.thread_id: row for row in read}}


def caps_of(tx: Tx, thread_id: str, budgets: Budgets, agent: Agent | None = None,
            real_caller: bool = False) -> Budget | None:
    """The caps on the subtree rooted at `thread_id`: the session's for a root, where a call
    to a real provider (by whichever agent of the session makes it) gets the default token
    cap when none is configured (a root's row is not read)."""
    if "." not in thread_id:
        budget = budgets.for_session(real_caller)
        return None if budget == Budget() else budget
    agent = agent or tx.agents.get(thread_id)
    return Budget.model_validate(agent.budget) if agent.budget else None


def _caps_in_chain(tx: Tx, thread_id: str, budgets: Budgets,
                   chain: dict[str, Agent]) -> list[tuple[str, Budget]]:
    """(owner, caps) for the agent and each ancestor whose subtree is capped: no usage read."""
    real_caller = chain[thread_id].provider not in LOCAL_PROVIDERS
    found = ((owner, caps_of(tx, owner, budgets, chain.get(owner), real_caller))
             for owner in _chain(thread_id))
    return [(owner, caps) for owner, caps in found if caps is not None]


def _used(tx: Tx, owner: str, chain: dict[str, Agent]) -> dict[str, float]:
    """What the subtree of `owner` used. One sum over the subtree's agent rows: read once per
    check, and only for capped subtrees. Its seconds only when its row was read (`_chain_agents`
    reads it where seconds are capped)."""
    usage = tx.usage.subtree(owner)
    used = {"tokens": usage.tokens, "cost_usd": usage.cost_usd, "turns": usage.turns}
    if owner in chain:
        used["seconds"] = seconds_since(chain[owner].created_at)
    return used


def _capped_subtrees(tx: Tx, thread_id: str, budgets: Budgets,
                     chain: dict[str, Agent] | None = None,
                     ) -> Iterator[tuple[str, Budget, dict[str, float]]]:
    """(owner, caps, used) for the agent and each ancestor whose subtree is capped."""
    chain = chain if chain is not None else _chain_agents(tx, thread_id, budgets)
    for owner, caps in _caps_in_chain(tx, thread_id, budgets, chain):
        yield owner, caps, _used(tx, owner, chain)


def remaining(tx: Tx, thread_id: str, budgets: Budgets,
              agent: Agent | None = None) -> dict[str, float]:
    """What is left in each capped dimension, the tightest over the agent and its ancestors
    (`agent`: its row as this transaction read it, not read again)."""
    left: dict[str, float] = {}
    chain = _chain_agents(tx, thread_id, budgets, agent)
    for _, caps, used in _capped_subtrees(tx, thread_id, budgets, chain):
        for dimension, _ in DIMENSIONS:
            cap = getattr(caps, dimension)
            if cap is not None:
                left[dimension] = min(left.get(dimension, cap), cap - used[dimension])
    return left


def check_before_call(tx: Tx, thread_id: str, budgets: Budgets, lease: Lease | None = None,
                      ) -> tuple[Halt | None, list[str]]:
    """A reason to make no model call (the agent was stopped, or a cap in its chain other
    than tokens is used), and the subtrees whose tokens are capped (`owner`s): a read, which
    sums no usage when only tokens are capped. The call then takes its tokens from what its
    process holds for each (`lace.runtime.escrow`), which is room under the cap, and asks for
    more (`grant_before_call`, which checks the tokens used) only when that is too little.
    LeaseLostError once the agent's `lease` is another's: a process paused past it makes
    no call with what it held (the write that asks for more is fenced too)."""
    chain = _chain_agents(tx, thread_id, budgets)
    if lease is not None:
        tx.leases.check(lease)
    owners = [owner for owner, caps in _caps_in_chain(tx, thread_id, budgets, chain)
              if caps.tokens is not None]
    return _halt(tx, thread_id, budgets, chain, tokens=False), owners


def halt_before_call(tx: Tx, thread_id: str, budgets: Budgets, holder: str,
                     in_flight: Mapping[str, int]) -> Halt | None:
    """`check_before_call`'s halt, where the tokens set aside for calls in flight count as
    used: what the other processes hold, and of what process `holder` holds, its calls
    `in_flight` under each owner. Whether a call may go (a call waiting for room looks
    with it)."""
    return _halt(tx, thread_id, budgets, _chain_agents(tx, thread_id, budgets),
                 aside=functools.partial(_aside, functools.partial(tx.grants.held, holder=holder),
                                         in_flight))


def _aside(held: Callable[[str], tuple[int, int]], in_flight: Mapping[str, int],
           owner: str) -> int:
    """Of what the processes hold under `owner` (`held`: all, and this process's), what is
    set aside for calls in flight: all the others hold, and this process's calls `in_flight`."""
    total, mine = held(owner)
    return total - mine + min(mine, in_flight.get(owner, 0))


SPARE_SHARE = 4
SPARE_CALLS = 8
"""A grant adds to what its calls are short of a spare for the process's next calls: a quarter
of the room left after them, at most eight times what the asking call alone was short of (not
eight times all its process's waiting calls: two processes asking for fifty calls each held
half of the room idle while the others' calls waited); so calls mostly take their tokens
without a write, and no process holds much of what others may need."""


def grant_before_call(tx: Tx, thread_id: str, budgets: Budgets, holder: str,
                      in_flight: Mapping[str, int], short: Mapping[str, int],
                      going: Mapping[str, int] | None = None,
                      ) -> tuple[Halt | None, dict[str, int]]:
    """`halt_before_call`, and when the call may go ahead, the tokens set aside for process
    `holder` under each capped `owner` that it is `short` of (with a spare, `SPARE_SHARE`):
    returns the halt, or what was added to each grant. `going` is what the asking call alone
    is short of (`short` may add the process's other calls waiting to ask; by default it is
    `short`). With less room left than it is short of, the call still goes (used then passes
    the cap by at most this call: the others' calls in flight are covered by what their
    processes hold), and its grant covers all it alone is short of, past the cap: another
    process that keeps what its grant left over, counted as free for its own calls
    (`_aside`), must see the cap filled and wait, not go with less too (before, each such
    process could pass the cap by a call); with no room left it waits while calls are in
    flight, and stops once the tokens are used."""
    going = short if going is None else going
    chain = _chain_agents(tx, thread_id, budgets)
    held = functools.cache(functools.partial(tx.grants.held, holder=holder))  # read once each
    halt = _halt(tx, thread_id, budgets, chain, aside=functools.partial(_aside, held, in_flight))
    if halt is not None:
        return halt, {}
    added: dict[str, int] = {}
    for owner, caps, used in _capped_subtrees(tx, thread_id, budgets, chain):
        if caps.tokens is None or short.get(owner, 0) <= 0:
            continue
        need = short[owner]
        room = int(caps.tokens - used["tokens"]) - held(owner)[0]
        spare = (min((room - need) // SPARE_SHARE, going.get(owner, 0) * SPARE_CALLS)
                 if room > need else 0)
        added[owner] = need + spare if room >= need else max(0, room, going.get(owner, 0))
        if added[owner]:
            tx.grants.add(owner, holder, added[owner])
    return None, added


def _stopped(agent: Agent) -> Halt | None:
    if agent.status == "stopped":
        return Halt(agent.thread_id, agent.stop_reason or "stopped")
    return None


def _halt(tx: Tx, thread_id: str, budgets: Budgets, chain: dict[str, Agent], *,
          aside: Callable[[str], int] | None = None, tokens: bool = True) -> Halt | None:
    """Why no call may go; with `aside`, the tokens set aside under each owner for calls in
    flight count as used, and a cap they fill (not yet used) is a halt to `wait` on; without
    `tokens`, token caps are left out."""
    stopped = _stopped(chain[thread_id])
    if stopped is not None:
        return stopped
    for owner, caps in _caps_in_chain(tx, thread_id, budgets, chain):
        checked = [(dimension, unit) for dimension, unit in DIMENSIONS
                   if getattr(caps, dimension) is not None and (tokens or dimension != "tokens")]
        used = _used(tx, owner, chain) if checked else {}
        for dimension, unit in checked:
            cap = getattr(caps, dimension)
            where = "session" if "." not in owner else f"subtree of {owner}"
            key = f"[budgets] session_{dimension}" if "." not in owner else "its budget"
            if used[dimension] >= cap:
                return Halt(owner, f"budget reached: {where} used {used[dimension]:g} of "
                                   f"{cap:g} {unit} ({key})")
            held = aside(owner) if aside is not None and dimension == "tokens" else 0
            if used[dimension] + held >= cap:
                return Halt(thread_id, f"budget nearly reached: {where} used "
                                       f"{used[dimension]:g} of {cap:g} {unit} ({key}) and "
                                       f"{held:g} more are set aside for the calls in flight",
                            wait=True)
    return None


def budget_line(tx: Tx, agent: Agent, budgets: Budgets) -> str | None:
    """`[LACE BUDGET] Remaining: ...` for `agent` (its row as this transaction read it), or
    None when nothing is capped."""
    left = remaining(tx, agent.thread_id, budgets, agent)
    if not left:
        return None
    parts = [f"{max(0, left[d]):,.0f} {unit}" if d != "cost_usd" else f"${max(0, left[d]):.4f}"
             for d, unit in DIMENSIONS if d in left]
    return "[LACE BUDGET] Remaining for you and your helpers: " + ", ".join(parts) + "."
