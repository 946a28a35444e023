"""Helpers of the token-grant tests (`lace.runtime.escrow`): processes registered on one
store, agents claimed by them, and the write that records a call."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from lace.config import Budgets
from lace.core.records import Agent, Lease
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import Escrow, Taken
from lace.runtime.turns import record_call
from lace.store import Store
from lace.store.leases import fenced
from tests.conftest import query


def held_row(db_path: Path | str, holder: str) -> int:
    rows = query(db_path, "SELECT tokens FROM token_grants WHERE process_id = ?", holder)
    return int(rows[0][0]) if rows else 0


def process(store: Store, process_id: str, lease_timeout_s: float = 60) -> None:
    with store.transaction() as tx:
        tx.processes.register(process_id, lease_timeout_s)


def agent_row(store: Store, thread_id: str) -> Agent:
    with store.transaction() as tx:
        return tx.agents.get(thread_id)


def claimed(store: Store, thread_id: str, holder: str) -> Lease:
    with store.transaction() as tx:
        return tx.leases.claim(tx.agents.get(thread_id), holder)


def recorded(lease: Lease, spent: dict[str, int | None], used: int) -> functools.partial[None]:
    """The write recording a call of `lease`'s agent that used `used` tokens, giving `spent`
    back (`Escrow.settle`)."""
    return functools.partial(record_call, thread_id=lease.thread_id, holder=lease.holder,
                             spent=spent, model="demo/coordinator", prompt_tokens=used,
                             completion_tokens=0, cost_usd=0.0, latency_ms=1.0)


@dataclass
class Processes:
    """Lace processes by name over one store, each holding one agent: its lease, its
    `AsyncStore` and its `Escrow`."""

    store: Store
    leases: dict[str, Lease]
    dbs: dict[str, AsyncStore]
    escrows: dict[str, Escrow]

    async def call(self, name: str, budgets: Budgets, tokens: int, wait_s: float) -> Taken:
        """Room for a model call of `tokens` by process `name`'s agent (HaltedError if none)."""
        lease = self.leases[name]
        return await self.escrows[name].room_for_call(
            self.dbs[name], agent_row(self.store, lease.thread_id), lease, budgets,
            lambda: tokens, wait_s)

    async def over(self, name: str, taken: Taken, used: int) -> None:
        """Process `name`'s call is over, having used `used` tokens: recorded and settled."""
        lease = self.leases[name]
        await self.dbs[name].write(fenced(lease, recorded(
            lease, self.escrows[name].settle(taken, used), used)))

    def close(self) -> None:
        for db in self.dbs.values():
            db.close()


def processes(store: Store, holding: dict[str, str]) -> Processes:
    """Register a process for each name in `holding` and claim its agent there."""
    for name in holding:
        process(store, name)
    leases = {name: claimed(store, thread_id, name) for name, thread_id in holding.items()}
    return Processes(store, leases, {name: AsyncStore(store) for name in leases},
                     {name: Escrow() for name in leases})
