"""Leases: which lace process runs which agent, and whether that process is still alive.

Each process has a `processes` row that it renews: `heartbeat_at`, and `expires_at` (the
heartbeat plus the process's own lease timeout). An agent being run names its process in
`agent_metadata.lease_holder`. A holder is alive until its lease expires and, on this host,
while its pid exists (so a crash here is noticed at once, not after the timeout)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.records import Agent, Lease
from lace.store import schema
from lace.store import statements as sql
from lace.store.agent_rows import AgentRows
from lace.store.prepared import dialect_of, end_block
from lace.store.rows import Rows

if TYPE_CHECKING:
    from lace.store.tx import Tx

T = TypeVar("T")

_FORGET_AFTER_S = 86_400.0


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseLostError(Exception):
    """This process no longer holds the agent's lease: another took the agent over. The turn
    is abandoned and nothing of it is committed."""


def fenced(lease: Lease | None, work: Callable[[Tx], T]) -> Callable[[Tx], T]:
    """`work`, done only while `lease` still holds (checked in the same transaction); as it is
    when there is no lease (the person's acts)."""
    if lease is None:
        return work

    def run(tx: Tx) -> T:
        with tx.leases.holding(lease):
            return work(tx)

    return run


def _is_lease_lost(error: BaseException) -> bool:
    cause = getattr(error, "orig", None) or error
    return getattr(cause, "sqlstate", None) == "22P02" and sql.LEASE_LOST in str(cause)


class ProcessRows(Rows):
    """The `processes` table: each lace process's row, renewed by its heartbeat."""

    def register(self, process_id: str, lease_timeout_s: float) -> None:
        """Add this process, and forget processes silent for a day (crashed long ago)."""
        now = time.time()
        processes = schema.processes
        self._execute(processes.delete().where(processes.c.heartbeat_at < now - _FORGET_AFTER_S))
        grants = schema.token_grants
        self._execute(grants.delete().where(grants.c.process_id.not_in(sa.select(processes.c.id))))
        self._execute(processes.insert().values(
            id=process_id, pid=os.getpid(), host=socket.gethostname(), started_at=now_iso(),
            heartbeat_at=now, expires_at=now + lease_timeout_s))

    def beat(self, process_id: str, lease_timeout_s: float) -> None:
        """Renew this process's lease."""
        now, processes = time.time(), schema.processes
        self._execute(processes.update().where(processes.c.id == process_id)
                      .values(heartbeat_at=now, expires_at=now + lease_timeout_s))

    def forget(self, process_id: str) -> None:
        """This process exits cleanly: its row goes, and the tokens it held (`token_grants`)."""
        self._execute(schema.processes.delete().where(schema.processes.c.id == process_id))
        grants = schema.token_grants
        self._execute(grants.delete().where(grants.c.process_id == process_id))

    def live(self) -> set[str]:
        """Ids of processes whose lease has not expired and that still exist."""
        host = socket.gethostname()
        rows = self._execute(sa.select(schema.processes)
                             .where(schema.processes.c.expires_at >= time.time()))
        return {row.id for row in rows if row.host != host or pid_exists(row.pid)}


class Leases:
    """Which process runs which agent: the claim that starts a turn, the fence every write of
    the turn passes, and the agents whose holder is gone."""

    def __init__(self, agents: AgentRows, processes: ProcessRows) -> None:
        self.agents = agents
        self.processes = processes

    def claim(self, agent: Agent, holder: str) -> Lease:
        """Claim `agent` (as just read) for a turn of process `holder`: a new epoch."""
        lease = Lease(agent.thread_id, holder, agent.lease_epoch + 1)
        self.agents.update(agent.thread_id, status="running", lease_holder=holder,
                           lease_epoch=lease.epoch)
        return lease

    def check(self, lease: Lease) -> None:
        """Raise LeaseLostError unless `lease` is still the agent's, in this transaction."""
        agent = self.agents.get(lease.thread_id)
        if (agent.lease_holder, agent.lease_epoch) != (lease.holder, lease.epoch):
            raise LeaseLostError(f"{lease.thread_id} is now held by {agent.lease_holder} "
                                 f"(epoch {agent.lease_epoch}); this turn had epoch {lease.epoch}")

    @contextmanager
    def holding(self, lease: Lease) -> Iterator[None]:
        """Run the block only while `lease` is still the agent's, in this transaction, else
        LeaseLostError. On SQLite the row is read first (`check`, in process). On PostgreSQL a
        statement that fails unless the lease holds (LEASE_STILL_HELD) goes out before the
        block's statements, with the first that needs an answer (`deferred_writes`): no round
        trip of its own; the rest of the block's writes are sent before it ends, so its error
        comes out here (unless the writes are carried past it: `carried_writes`)."""
        raw = self.agents.raw
        if dialect_of(raw) == "sqlite":
            self.check(lease)
            yield
            return
        try:
            sql.LEASE_STILL_HELD.send(raw, {"agent": lease.thread_id, "holder": lease.holder,
                                            "epoch": lease.epoch})
            yield
            end_block(raw)
        except Exception as error:
            if _is_lease_lost(error):
                raise LeaseLostError(f"{lease.thread_id} is no longer held by {lease.holder} "
                                     f"at epoch {lease.epoch}, this turn's") from None
            raise

    def cut_off_agents(self, root_id: str, alive: set[str]) -> list[str]:
        """Agents of the session whose turn was cut off: marked `interrupted`, or marked running
        or waiting by a holder that is neither in `alive` nor a live process (it crashed);
        never an inert one (imported, and no person has resumed it yet)."""
        live = alive | self.processes.live()
        return self.agents.cut_off(root_id, live)
