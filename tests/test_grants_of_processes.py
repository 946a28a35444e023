"""What other processes hold of a token cap (`token_grants`): a live process's grant is room
no call here may take, a dead process's grant (its lease expired) is room again, and a process
with nothing in flight gives its whole grant back. On both engines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lace.config import Budgets, Limits, Settings
from lace.core.records import Thread
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.runtime import Runtime, open_runtime
from lace.store import Store, schema
from lace.store.budgets import check_before_call
from lace.store.leases import LeaseLostError
from tests.conftest import lost_and_held_leases, query, spawn_child, until_quiet_then_closed
from tests.scripted import ScriptedModels, reply

pytestmark = pytest.mark.both_engines
CAP = 100_000


def runtime_with_cap(store: Store, stall_s: float = 30.0) -> Runtime:
    limits = Limits(retry_base_s=0.001, retry_max_s=0.002, stall_timeout_s=stall_s)
    return open_runtime(store, Settings(limits=limits, budgets=Budgets(session_tokens=CAP)),
                        default_client(), check_model=check_model)


def another_process_holds(store: Store, owner: str, tokens: int, *, expires_in: float) -> None:
    """Process `other` (a row of `processes`) holds `tokens` of `owner`'s cap."""
    now = time.time()
    with store.transaction() as tx:
        tx.connection.execute(schema.processes.insert().values(
            id="other", pid=1, host="elsewhere", started_at="2026-01-01T00:00:00Z",
            heartbeat_at=now, expires_at=now + expires_in))
        tx.grants.add(owner, "other", tokens)


async def a_turn(runtime: Runtime, models: ScriptedModels, owner_tokens: int,
                 expires_in: float, store: Store) -> str:
    models.on("root", lambda messages: reply("the answer"))
    root = await runtime.open_empty_session("capped", "scripted/root")
    another_process_holds(store, root.id, owner_tokens, expires_in=expires_in)
    await runtime.send(root.id, "go")
    await until_quiet_then_closed(runtime, root.id)
    return root.id


async def test_a_dead_processes_grant_is_room_again(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    root = await a_turn(runtime_with_cap(store), models, CAP, expires_in=-1.0, store=store)
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", root) == [
        ("idle",)]
    assert len(models.calls_of("root")) == 1
    assert query(db_path, "SELECT process_id FROM token_grants") == [("other",)]  # not ours


async def test_a_live_processes_grant_is_room_no_call_here_takes(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    root = await a_turn(runtime_with_cap(store, stall_s=0.5), models, CAP, expires_in=3600.0,
                        store=store)
    assert models.calls_of("root") == []
    (status, reason), = query(db_path, "SELECT status, stop_reason FROM agent_metadata "
                                       "WHERE thread_id = ?", root)
    assert status == "stopped"
    assert reason.startswith(f"budget nearly reached: session used 0 of {CAP:g} tokens "
                             f"([budgets] session_tokens) and {CAP:g} more are set aside")


async def test_what_is_left_beside_a_live_grant_is_taken_and_given_back(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    root = await a_turn(runtime_with_cap(store), models, CAP // 2, expires_in=3600.0,
                        store=store)
    assert len(models.calls_of("root")) == 1
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", root) == [
        ("idle",)]
    assert query(db_path, "SELECT process_id, tokens FROM token_grants") == [
        ("other", CAP // 2)]  # this process, with no call in flight, holds nothing


def test_a_process_paused_past_its_lease_makes_no_call_with_what_it_held(
        store: Store, session: Thread) -> None:
    """The read before each model call checks the lease: a call would otherwise take tokens
    its process still held here, though the grant stopped counting for the others."""
    child = spawn_child(store, session.id)
    lost, held = lost_and_held_leases(store, child)
    with store.reading() as tx:
        assert check_before_call(tx, child, Budgets(session_tokens=CAP), held) == (
            None, [session.id])
    with store.reading() as tx, pytest.raises(LeaseLostError):
        check_before_call(tx, child, Budgets(session_tokens=CAP), lost)
