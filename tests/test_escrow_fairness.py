"""The escrow's fairness (a process keeps idle at most a spare of whole calls) attacked with
mixed calls, nested caps and several processes over one store: the caps are passed by at most
one call, no call gives up waiting while the cap is not reached, and what a process counts as
granted is never more than its row."""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lace.config import Budgets
from lace.core.records import Agent, Lease
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import Escrow, HaltedError, Taken
from lace.store import Store
from lace.store.leases import fenced
from tests.conftest import new_session, query, spawn_child
from tests.grants import agent_row, claimed, process, processes, recorded

SESSION_CAP, SUBTREE_CAP, LARGEST = 150_000, 40_000, 12_000


def claimed_agent(store: Store, thread_id: str, holder: str) -> tuple[Agent, Lease]:
    lease = claimed(store, thread_id, holder)
    return agent_row(store, thread_id), lease


@dataclass
class Outcome:
    went: int = 0
    reasons: list[str] = field(default_factory=list)
    above_row: list[str] = field(default_factory=list)
    looks: int = 0
    longest_wait: float = 0.0


async def calls_of(name: str, agent: Agent, lease: Lease, db: AsyncStore, escrow: Escrow,
                   budgets: Budgets, rng: random.Random, outcome: Outcome) -> None:
    """Calls one after another of 300 to 12,000 tokens, each using half to all of its
    estimate, until one is refused."""
    while True:
        estimate = rng.choice((300, 300, 1000, 4000, LARGEST))
        asked = time.monotonic()
        try:
            taken = await escrow.room_for_call(db, agent, lease, budgets,
                                               functools.partial(int, estimate), 10)
        except HaltedError as halted:
            outcome.reasons.append(halted.reason)
            return
        finally:
            outcome.longest_wait = max(outcome.longest_wait, time.monotonic() - asked)
        outcome.went += 1
        await asyncio.sleep(rng.uniform(0, 0.01))  # the model answers
        used = rng.randint(estimate // 2, estimate)
        await db.write(fenced(lease, recorded(lease, escrow.settle(taken, used), used)))


async def heartbeats(holder: str, db: AsyncStore, escrow: Escrow) -> None:
    """What the scheduler's heartbeat does (every fifth of a lease timeout of 3 s): give back
    the grants under which this process has no call in flight, asking or waiting."""
    while True:
        await asyncio.sleep(0.6)
        await db.write(functools.partial(lambda idle, tx: tx.grants.spend(holder, idle),
                                         escrow.idle()))


async def rows_cover_what_is_counted(escrows: dict[str, Escrow], db_path: Path,
                                     outcome: Outcome) -> None:
    """Every 2 ms, that no process counts more granted under an owner than its row: read on
    the event loop (blocking it), so nothing here changes while the rows are read; a grant
    is counted here only once committed, what is given back taken off before its write."""
    while True:
        rows = {(owner, holder): tokens for owner, holder, tokens in query(
            db_path, "SELECT owner, process_id, tokens FROM token_grants")}
        outcome.looks += 1
        for holder, escrow in escrows.items():
            for owner, one in escrow.held.items():
                if one.granted > rows.get((owner, holder), 0):
                    outcome.above_row.append(f"{holder} {owner}: {one.granted} > "
                                             f"{rows.get((owner, holder), 0)}")
        await asyncio.sleep(0.002)


@pytest.mark.both_engines
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_three_processes_of_mixed_calls_under_nested_caps(
        store: Store, db_path: Path, seed: int) -> None:
    """Three processes, five agents: `a` runs a helper with a subtree budget of 40,000 and the
    root, `b` that helper's own helper (the same two caps), `c` the root's other helper and
    the root again; four calls at once per agent, each 300 to 12,000 tokens. Each cap is
    passed by at most its largest call, every call that stops was stopped by a cap reached
    (none gave up waiting, 10 s), and no grant is left."""
    rng = random.Random(seed)
    session = new_session(store)
    helper = spawn_child(store, session.id)
    with store.transaction() as tx:
        tx.agents.update(helper, budget={"tokens": SUBTREE_CAP})
    nested, other = spawn_child(store, helper), spawn_child(store, session.id)
    runs = {"a": [helper, session.id], "b": [nested], "c": [other]}
    for name in runs:
        process(store, name)
    dbs = {name: AsyncStore(store) for name in runs}
    escrows = {name: Escrow() for name in runs}
    budgets, outcome = Budgets(session_tokens=SESSION_CAP), Outcome()
    agents = [(name, *claimed_agent(store, thread_id, name))
              for name, threads in runs.items() for thread_id in threads]
    watching = [asyncio.ensure_future(rows_cover_what_is_counted(escrows, db_path, outcome))]
    try:
        await asyncio.wait_for(asyncio.gather(*(
            calls_of(name, agent, lease, dbs[name], escrows[name], budgets,
                     random.Random(rng.random()), outcome)
            for name, agent, lease in agents for _ in range(4))), 120)
    finally:
        for task in watching:
            task.cancel()
        await asyncio.gather(*watching, return_exceptions=True)
        for db in dbs.values():
            db.close()
    (used,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls")
    (subtree,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls "
                                 "WHERE thread_id IN (?, ?)", helper, nested)
    gave_up = [reason for reason in outcome.reasons if "budget reached" not in reason]
    print(f"seed {seed}: {outcome.went} calls, used {used} of {SESSION_CAP}, subtree "
          f"{subtree} of {SUBTREE_CAP}, gave up {len(gave_up)}, rows read {outcome.looks}, "
          f"longest wait {outcome.longest_wait:.2f} s")
    assert outcome.looks > 10 and not outcome.above_row, outcome.above_row[:5]
    assert not gave_up, gave_up[:3]
    assert SUBTREE_CAP <= subtree <= SUBTREE_CAP + LARGEST or used >= SESSION_CAP
    assert used <= SESSION_CAP + LARGEST
    # no heartbeat here: a call stopped by a cap gave back what its process held idle
    assert query(db_path, "SELECT COALESCE(SUM(tokens), 0) FROM token_grants") == [(0,)]


async def until_refused_or_done(escrow: Escrow, owner: str, call: asyncio.Future[Taken],
                                ) -> None:
    """Wait (with a deadline) until `call` went or gave up, or waits having been refused."""
    deadline = time.monotonic() + 10
    while not call.done():
        one = escrow.held[owner]
        if one.waiting and not one.asking:
            return
        assert time.monotonic() < deadline, vars(one)
        await asyncio.sleep(0.005)


@pytest.mark.both_engines
async def test_processes_keeping_spares_for_calls_that_wait_do_not_wait_for_each_other(
        store: Store, db_path: Path) -> None:
    """Under a cap of 100,000, processes `y` and `z` each send a call of 1,000 tokens (each
    granted 9,000: a spare of 8,000); `x` then uses 80,000 in calls of 10,000 and sends one more,
    past the room left. `y` and `z` each send a call of 12,000, which finds the cap filled
    and waits; their calls of 1,000 and `x`'s are over. Then 8,000 of the cap is left and
    nothing is in flight: one of the two waiting calls must go (past the cap by at most
    itself). Before, each kept its spare of 8,000 idle for its waiting call (too small for
    it), which filled the cap for the other: both waited until they gave up (stall_timeout_s),
    the heartbeat giving back nothing (a call waits there)."""
    session = new_session(store)
    threads = {"x": session.id, "y": spawn_child(store, session.id),
               "z": spawn_child(store, session.id)}
    three = processes(store, threads)
    budgets, cap = Budgets(session_tokens=100_000), 100_000

    async def call(name: str, tokens: int, wait_s: float = 2) -> Taken:
        return await three.call(name, budgets, tokens, wait_s)

    over = three.over
    beating = [asyncio.ensure_future(heartbeats(name, three.dbs[name], three.escrows[name]))
               for name in threads]
    try:
        small = {name: await call(name, 1000) for name in ("y", "z")}
        assert [held_of(db_path, name) for name in ("y", "z")] == [9000, 9000]
        for _ in range(8):
            await over("x", await call("x", 10_000), 10_000)
        past = await call("x", 10_000)  # 2,000 of room left: it goes, granted past the cap
        waiting = {name: asyncio.ensure_future(call(name, 12_000)) for name in ("y", "z")}
        for name, one in waiting.items():
            await until_refused_or_done(three.escrows[name], session.id, one)
        for name, taken in small.items():
            await over(name, taken, 1000)
        await over("x", past, 10_000)
        went, reasons = [], []
        for name, one in waiting.items():
            try:
                went.append((name, await asyncio.wait_for(one, 10)))
            except HaltedError as halted:
                reasons.append(halted.reason)
        for name, taken in went:
            await over(name, taken, 12_000)
    finally:
        for task in beating:
            task.cancel()
        await asyncio.gather(*beating, return_exceptions=True)
        three.close()
    (used,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls")
    assert went, reasons
    assert cap <= used <= cap + 12_000
    assert query(db_path, "SELECT COALESCE(SUM(tokens), 0) FROM token_grants") == [(0,)]


def held_of(db_path: Path, holder: str, owner: str | None = None) -> int:
    rows = [(tokens,) for row_owner, tokens in query(
        db_path, "SELECT owner, tokens FROM token_grants WHERE process_id = ?", holder)
        if owner in (None, row_owner)]
    return sum(int(tokens) for tokens, in rows)


async def test_a_call_granted_under_one_cap_is_still_covered_under_the_other(
        store: Store, db_path: Path) -> None:
    """A helper with a budget of 40,000 under a session cap of 100,000: a call of 12,000
    whose process holds enough under the session (a whole call kept from the last) but too
    little under the helper asks for the helper's tokens alone; while that write waits for
    the lock, the process's call of 300 is over, and keeping only whole calls of 300 it
    gives back most of the session's tokens, which the asking call was counting on. The
    asking call must not then go with its session tokens covered by no grant: another
    process would see them as room, and the cap could be passed by more than one call.
    (SQLite: the lock held by another connection keeps the grant write waiting.)"""
    session = new_session(store)
    helper = spawn_child(store, session.id)
    with store.transaction() as tx:
        tx.agents.update(helper, budget={"tokens": SUBTREE_CAP})
    process(store, "p")
    agent, lease = claimed_agent(store, helper, "p")
    db, escrow, budgets = AsyncStore(store), Escrow(), Budgets(session_tokens=100_000)

    async def call(tokens: int) -> Taken:
        return await escrow.room_for_call(db, agent, lease, budgets,
                                          functools.partial(int, tokens), 2)

    async def over(taken: Taken, used: int) -> None:
        await db.write(fenced(lease, recorded(lease, escrow.settle(taken, used), used)))

    try:
        first = await call(12_000)  # granted 34,000 under the session, 19,000 under helper
        small = await call(300)
        await over(first, 12_000)  # keeps one whole call of 12,000 under the session
        assert escrow.held[session.id].granted == 12_300
        assert escrow.held[helper].granted == 300
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process writes: the grant write waits
        asking = asyncio.ensure_future(call(12_000))
        deadline = time.monotonic() + 10
        while not escrow.held[helper].asking:
            assert time.monotonic() < deadline, "the call never asked"
            await asyncio.sleep(0.001)
        assert not escrow.held[session.id].asking  # enough held there
        settled = asyncio.ensure_future(over(small, 300))  # over while the grant waits
        other.execute("COMMIT")
        other.close()
        taken = await asyncio.wait_for(asking, 10)
        await asyncio.wait_for(settled, 10)
        for owner in (session.id, helper):
            one = escrow.held[owner]
            assert one.in_flight <= one.granted <= held_of(db_path, "p", owner), \
                (owner, vars(one))
        await over(taken, 12_000)
        assert query(db_path, "SELECT COALESCE(SUM(tokens), 0) FROM token_grants") == [(0,)]
    finally:
        db.close()
