"""Token grants (`token_grants`, `lace.runtime.escrow`) attacked as another process, a crash or
a lock would: what a process counts as held is never more than its row, a dead process's grant
is not counted, and processes sharing one cap pass it by at most one call."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from lace.config import Budgets, Limits, Settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.assembly import Sharing
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import Escrow, HaltedError, Taken
from lace.store import Store, open_database
from lace.store.budgets import SPARE_CALLS
from lace.store.leases import fenced
from tests.conftest import new_session, query, spawn_child
from tests.grants import (
    Processes,
    agent_row,
    claimed,
    held_row,
    process,
    processes,
    recorded,
)
from tests.scripted import (
    ScriptedModels,
    assigned_task,
    creating_root,
    overlapping_worker,
    reply,
    tools_called,
)

CAP = 100_000


async def test_a_grant_asked_while_a_give_back_waits_for_the_lock_is_not_lost(
        store: Store, db_path: Path) -> None:
    """A call that is over gives the whole grant back (nothing else in flight) in a write that
    finds SQLite's lock held by another process and goes to the store thread; a call of the
    same process that then asks for a grant writes on the loop once the lock is free. The
    give-back must not commit after the grant and delete it: the process would then spend
    tokens no other process sees as held. (SQLite only: on PostgreSQL every write goes
    through the one store thread in order.)"""
    session = new_session(store)
    process(store, "p1")
    lease = claimed(store, session.id, "p1")
    db, escrow, budgets = AsyncStore(store), Escrow(), Budgets(session_tokens=CAP)
    try:
        first = await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                           lambda: 1000, 5)
        assert escrow.held[session.id].granted == held_row(db_path, "p1") > 0
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process writes
        give_back = asyncio.ensure_future(db.write(fenced(lease, recorded(
            lease, escrow.settle(first, 500), 500))))
        deadline = time.monotonic() + 10
        while not db._waiting:  # the give-back waits on the thread for the lock
            assert time.monotonic() < deadline, "the give-back never went to the thread"
            await asyncio.sleep(0.005)
        assert not give_back.done()
        other.execute("COMMIT")
        other.close()
        second = await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                            lambda: 1000, 5)
        await asyncio.wait_for(give_back, 10)
        assert escrow.held[session.id].granted <= held_row(db_path, "p1")
        escrow.settle(second, 0)
    finally:
        db.close()




def sharing_runtime(store: Store, *, serve_all: bool = False, cap: int = 3000,
                    **limits: Any) -> Runtime:
    """A lace process sharing the database (as `lace run --workers` and `lace worker` do),
    under one session token cap."""
    quick = Limits(**{"retry_base_s": 0.001, "retry_max_s": 0.002, "max_children": 40,
                      "spawns_per_minute": 60, **limits})
    return open_runtime(store, Settings(limits=quick, budgets=Budgets(session_tokens=cap)),
                        default_client(), check_model=check_model,
                        sharing=Sharing(feed=store.database.change_feed(), share_work=True,
                                        serve_all=serve_all, max_agents=4))


SHARED_CAP, PER_CALL = 3000, 600  # the default cap of `sharing_runtime`


async def in_two_processes(first: Runtime, second: Runtime, other_store: Store,
                           timeout: float) -> float:
    """Seconds a session of `scripted/root` told "go" took to be quiet, started by `first`
    while `second` serves every session beside it; both then closed."""
    serving = asyncio.ensure_future(second.serve())
    started = time.monotonic()
    try:
        root = await first.start_session("go", "scripted/root")
        await asyncio.wait_for(first.run_until_quiet(root.id), timeout)
    finally:
        await first.stop()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        first.close()
        second.close()
        other_store.close()
    return time.monotonic() - started


@pytest.mark.both_engines
async def test_two_processes_at_one_cap_pass_it_by_at_most_one_call_and_give_all_back(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    """Two processes (two runtimes, each its own connections and grants) run fifteen helpers
    of one session, at most four turns each at once: what they use passes the session's cap
    by at most one call, no call waits out stall_timeout_s, and no grant is left."""
    other_store = Store(open_database(str(db_path)))
    first, second = sharing_runtime(store), sharing_runtime(other_store, serve_all=True)

    models.on("root", creating_root(15))
    models.on("worker", overlapping_worker)
    took = await in_two_processes(first, second, other_store, 60)
    (used,), = query(db_path, "SELECT SUM(prompt_tokens + completion_tokens) FROM llm_calls")
    holders = query(db_path, "SELECT DISTINCT lease_holder FROM agent_metadata "
                             "WHERE lease_holder IS NOT NULL")
    print(f"used {used} of {SHARED_CAP}, {len(holders)} processes, {took:.2f} s")
    assert len(holders) == 2  # both processes ran turns
    assert SHARED_CAP <= used <= SHARED_CAP + PER_CALL
    assert took < Limits().stall_timeout_s / 10  # nobody waited out a stall
    assert query(db_path, "SELECT COUNT(*) FROM token_grants") == [(0,)]


@pytest.mark.both_engines
async def test_a_dead_processs_grant_counts_until_its_lease_expires_then_not(
        store: Store, db_path: Path) -> None:
    """A process killed while it held the whole cap leaves its row: while its lease is live
    a call of another process waits for it and gives up after its wait with a clear reason;
    once the lease expired the grant is not counted and the call goes."""
    session = new_session(store)
    process(store, "killed", lease_timeout_s=1.5)
    with store.transaction() as tx:
        tx.grants.add(session.id, "killed", CAP)  # all of the cap, for calls never settled
    process(store, "alive")
    lease = claimed(store, session.id, "alive")
    db, escrow, budgets = AsyncStore(store), Escrow(), Budgets(session_tokens=CAP)
    try:
        with pytest.raises(HaltedError) as halted:
            await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                       lambda: 1000, 0.2)
        assert "set aside for the calls in flight" in halted.value.reason
        assert held_row(db_path, "alive") == 0 and escrow.held[session.id].waiting == 0
        deadline = time.monotonic() + 10
        while "killed" in await db.read(lambda tx: tx.processes.live()):
            assert time.monotonic() < deadline, "the killed process's lease never expired"
            await asyncio.sleep(0.05)
        taken = await escrow.room_for_call(db, agent_row(store, session.id), lease, budgets,
                                           lambda: 1000, 0.2)
        assert 1000 <= escrow.held[session.id].granted == held_row(db_path, "alive")
        await db.write(fenced(lease, recorded(lease, escrow.settle(taken, 800), 800)))
        assert held_row(db_path, "alive") == 0  # nothing in flight: all given back
        assert query(db_path, "SELECT tokens FROM token_grants WHERE process_id = 'killed'") \
            == [(CAP,)]  # left until a process registers after it was forgotten
    finally:
        db.close()


def capped_runtime(store: Store) -> Runtime:
    quick = Limits(retry_base_s=0.001, retry_max_s=0.002, lease_timeout_s=2)
    return open_runtime(store, Settings(limits=quick, budgets=Budgets(session_tokens=CAP)),
                        default_client(), check_model=check_model)


async def until_idle(runtime: Runtime, root_id: str, models: ScriptedModels) -> None:
    """Wait (with a deadline) until the session's root was answered and no turn runs."""
    deadline = time.monotonic() + 20
    while runtime.running or not models.calls_of("root"):
        assert time.monotonic() < deadline, f"{root_id} kept running"
        await asyncio.sleep(0.02)


@pytest.mark.both_engines
async def test_a_call_whose_lease_was_lost_gives_its_grant_back(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    """Another process takes the agent over while its model call runs: the call's reply is
    not written (fenced), but what its process was granted must not stay held in the row, where
    the other processes' calls would wait for it until stall_timeout_s, nor here."""
    runtime = capped_runtime(store)
    process(store, "another-process")  # live: the agent is not taken back from it

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        with store.transaction() as tx:
            (agent,) = [agent for agent in tx.agents.by_ids([session_of(db_path)])]
            tx.leases.claim(agent, "another-process")
        return reply("done")

    models.on("root", root)
    try:
        session = await runtime.start_session("go", "scripted/root")
        await until_idle(runtime, session.id, models)
        deadline = time.monotonic() + 10  # the heartbeat, every fifth of lease_timeout_s
        while held_row(db_path, runtime.process_id):
            assert time.monotonic() < deadline, "the grant stayed held with no call in flight"
            await asyncio.sleep(0.05)
        held = runtime.scheduler.runner.escrow.held
        assert {owner: one.granted for owner, one in held.items() if one.granted} == {}
    finally:
        await runtime.stop()
        runtime.close()


def session_of(db_path: Path | str) -> str:
    (root_id,), = query(db_path, "SELECT thread_id FROM agent_metadata "
                                 "WHERE parent_thread_id IS NULL")
    return str(root_id)


async def test_a_turn_cancelled_as_it_is_woken_frees_its_slot(
        store: Store, models: ScriptedModels) -> None:
    """A budget stop cancels the turns of the subtree, also one woken a moment before whose
    task never took its first step: its thread must not stay `running` (seen once in about
    twenty runs of two processes at one cap: `run_until_quiet` never returned)."""
    runtime = capped_runtime(store)
    models.on("root", lambda messages: reply("done"))
    try:
        session = new_session(store)
        runtime.scheduler.wake(session.id)
        runtime.cancel([session.id])  # before the task ran at all
        deadline = time.monotonic() + 10
        while runtime.running:
            assert time.monotonic() < deadline, f"still running: {runtime.running}"
            await asyncio.sleep(0.02)
    finally:
        await runtime.stop()
        runtime.close()


@pytest.mark.both_engines
async def test_two_processes_whose_calls_use_up_to_their_estimate_stay_near_the_cap(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    """Twenty helpers in two processes, each call using between 300 and 4,000 tokens (up to
    the estimate it took, `reserve_tokens` 4,096 and what it sends): the cap of 60,000 is
    passed by at most the largest call, no call gives up waiting for room (stall_timeout_s
    20), and every grant is given back. (A call using more than it took passes the cap by
    its excess, as every call in flight then may: with `reserve_tokens` 200 the same run
    used 65,197, the largest call 3,931.)"""
    cap, stall = 60_000, 20.0
    rng = random.Random(7)
    other_store = Store(open_database(str(db_path)))
    first, second = (sharing_runtime(one, cap=cap, serve_all=serve_all, stall_timeout_s=stall)
                     for one, serve_all in ((store, False), (other_store, True)))

    async def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        await asyncio.sleep(rng.uniform(0.0, 0.05))
        task_id = assigned_task(messages)
        notes = tools_called(messages).count("task_add_note")
        step = ("task_complete", {"task_id": task_id, "message": "done"}) if notes >= 3 else \
            ("task_add_note", {"task_id": task_id, "note": "working"})
        return ScriptedReply(None, [step], prompt_tokens=rng.randint(200, 3000),
                             completion_tokens=rng.randint(100, 1000))  # < reserve_tokens

    models.on("root", creating_root(20))
    models.on("worker", worker)
    took = await in_two_processes(first, second, other_store, 120)
    (used, largest, calls), = query(db_path, "SELECT SUM(prompt_tokens + completion_tokens), "
                                    "MAX(prompt_tokens + completion_tokens), COUNT(*) "
                                    "FROM llm_calls")
    reasons = {reason for (reason,) in query(
        db_path, "SELECT DISTINCT stop_reason FROM agent_metadata WHERE stop_reason IS NOT NULL")}
    print(f"used {used} of {cap} in {calls} calls (largest {largest}), {took:.2f} s, {reasons}")
    assert cap <= used <= cap + largest
    assert all(reason.startswith("budget reached: session used") for reason in reasons)
    assert took < stall
    assert query(db_path, "SELECT COALESCE(SUM(tokens), 0) FROM token_grants") == [(0,)]


async def used_all_they_took(went: list[tuple[str, Taken]], two: Processes) -> None:
    """Record each call that went (process name, what it took) as having used all it took."""
    for name, one in went:
        await two.over(name, one, one.tokens)


@pytest.mark.both_engines
async def test_processes_holding_leftovers_do_not_each_pass_the_cap(
        store: Store, db_path: Path) -> None:
    """Two processes, each keeping what its grant has left over (a call in flight there),
    each send a call that finds too little room and goes with what is left: the first one's
    row must cover all it took, or the other sees room that is not there and goes too, and
    the cap is passed by more than one call. Calls of 3,000 tokens under a cap of 10,000."""
    session = new_session(store)
    child = spawn_child(store, session.id)
    two = processes(store, {"a": session.id, "b": child})
    budgets, per_call, cap = Budgets(session_tokens=10_000), 3000, 10_000

    async def call(name: str) -> Taken | None:
        try:
            return await two.call(name, budgets, per_call, 0.3)
        except HaltedError:
            return None

    try:
        taken = [(name, await call(name)) for name in ("a", "b", "a", "b", "a", "b")]
        went = [(name, one) for name, one in taken if one is not None]
        await used_all_they_took(went, two)
        (used,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls")
        assert cap <= used <= cap + per_call, [name for name, _ in went]
    finally:
        two.close()


@pytest.mark.both_engines
async def test_a_subtree_budget_under_the_session_cap_holds_in_two_processes(
        store: Store, db_path: Path) -> None:
    """A helper spawned with a budget of 5,000 tokens (its process `a`) under a session cap
    of 20,000 that the root's process `b` shares: the helper's second call goes with less
    than its subtree has left, its third waits and gives up; the root's call goes beside
    them; once all are over the subtree passed its cap by at most one call, no grant is
    left, and the helper's next call is refused by its budget."""
    session = new_session(store)
    child = spawn_child(store, session.id)
    with store.transaction() as tx:
        tx.agents.update(child, budget={"tokens": 5000})
    two = processes(store, {"a": child, "b": session.id})
    budgets, per_call = Budgets(session_tokens=20_000), 3000

    async def call(name: str) -> Taken | None:
        try:
            return await two.call(name, budgets, per_call, 0.3)
        except HaltedError as halted:
            if "set aside for the calls in flight" not in halted.reason:
                raise  # not a wait given up
            return None

    try:
        taken = [(name, await call(name)) for name in ("a", "a", "a", "b")]
        went = [(name, one) for name, one in taken if one is not None]
        assert [name for name, _ in went] == ["a", "a", "b"]
        await used_all_they_took(went, two)
        (child_used,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls "
                                        "WHERE thread_id = ?", child)
        assert 5000 <= child_used <= 5000 + per_call
        assert query(db_path, "SELECT COUNT(*) FROM token_grants") == [(0,)]
        with pytest.raises(HaltedError) as refused:
            await call("a")
        assert refused.value.owner == child and "budget reached" in refused.value.reason
    finally:
        two.close()


@pytest.mark.both_engines
async def test_a_stalled_call_gives_its_tokens_back(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    """A model call that makes no progress is cut off by the watchdog: its usage row says so,
    nothing stays in flight, and no grant is left."""
    runtime = open_runtime(store, Settings(
        limits=Limits(retry_base_s=0.001, retry_max_s=0.002, stall_timeout_s=0.5,
                      lease_timeout_s=2),
        budgets=Budgets(session_tokens=CAP)), default_client(), check_model=check_model)

    async def silent(messages: list[dict[str, Any]]) -> ScriptedReply:
        await asyncio.sleep(30)
        return reply("too late")

    models.on("root", silent)
    try:
        session = await runtime.start_session("go", "scripted/root")
        deadline = time.monotonic() + 20
        while runtime.running or held_row(db_path, runtime.process_id) \
                or runtime.scheduler.runner.escrow.held:
            assert time.monotonic() < deadline, runtime.scheduler.runner.escrow
            await asyncio.sleep(0.05)
        assert query(db_path, "SELECT error FROM llm_calls WHERE thread_id = ?",
                     session.id) == [("stalled (watchdog)",)]
    finally:
        await runtime.stop()
        runtime.close()


@pytest.mark.both_engines
async def test_calls_waiting_to_ask_together_do_not_all_go_past_the_cap(
        store: Store, db_path: Path) -> None:
    """Four calls of 4,000 tokens at once in one process under a cap of 10,000: the first
    asks for them all (the others wait for its write), gets less than that, and goes; the
    grant past the room left covers that one call alone, so at most one call passes the
    cap, and the last waits and gives up."""
    session = new_session(store)
    process(store, "p1")
    lease = claimed(store, session.id, "p1")
    db, escrow, budgets, per_call, cap = AsyncStore(store), Escrow(), Budgets(
        session_tokens=10_000), 4000, 10_000
    agent = agent_row(store, session.id)

    async def call() -> Taken | None:
        try:
            return await escrow.room_for_call(db, agent, lease, budgets, lambda: per_call, 0.3)
        except HaltedError:
            return None

    try:
        went = [one for one in await asyncio.gather(*(call() for _ in range(4)))
                if one is not None]
        for one in went:
            await db.write(fenced(lease, recorded(lease, escrow.settle(one, per_call),
                                                  per_call)))
        (used,), = query(db_path, "SELECT SUM(prompt_tokens) FROM llm_calls")
        assert cap <= used <= cap + per_call, len(went)
        assert query(db_path, "SELECT COUNT(*) FROM token_grants") == [(0,)]
    finally:
        db.close()


@pytest.mark.both_engines
async def test_a_process_whose_calls_are_over_keeps_no_more_than_a_spare_from_the_others(
        store: Store, db_path: Path) -> None:
    """Process `a` sends 50 calls of 10,000 tokens at once under a cap of 2,000,000 (one
    grant write asks for them all), and all but one are over; process `b` then sends 150.
    `a` may keep a spare for its next calls, not the grant of the 50 (nor a quarter of the
    room, the spare of a grant for 50): with it kept idle, `b`'s calls past the room left
    waited while the cap was not used (in a fan-out, one process held half of the default
    cap with one call in flight while another's calls waited)."""
    session = new_session(store)
    child = spawn_child(store, session.id)
    two = processes(store, {"a": session.id, "b": child})
    budgets, per_call = Budgets(session_tokens=2_000_000), 10_000

    async def calls(name: str, count: int) -> list[Taken | None]:
        async def call() -> Taken | None:
            try:
                return await two.call(name, budgets, per_call, 0.3)
            except HaltedError:
                return None
        return list(await asyncio.gather(*(call() for _ in range(count))))

    try:
        first = await calls("a", 50)
        assert None not in first
        for one in first[1:]:
            assert one is not None
            await two.over("a", one, 10)
        assert held_row(db_path, "a") <= (1 + SPARE_CALLS) * per_call
        assert None not in await calls("b", 150)
    finally:
        two.close()
