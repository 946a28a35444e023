"""The tokens this process holds for its model calls under token caps: what each capped
subtree (`owner`) granted it (`token_grants`), and what its calls in flight there took of it.
A call takes its estimate from what is held, in memory; only a call that finds too little
writes, to ask for more (`grant_before_call`), and a call that is over gives back what it used
(with the write that records it), or the whole grant once nothing is in flight there. Before,
every model call under a cap wrote a reservation of its own and waited for that write.

What is held here is never more than the grant's row says: a grant is counted once its write
committed, and what a call used is taken off before the write that takes it off the row."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from lace.config import Budgets
from lace.core.records import Agent, Lease
from lace.runtime.database import AsyncStore
from lace.store.budgets import (
    SPARE_CALLS,
    Halt,
    check_before_call,
    grant_before_call,
    halt_before_call,
)
from lace.store.leases import fenced
from lace.store.tx import Tx

POLL_S = 0.05
"""How often a call waiting for room under a cap looks again (a read)."""
Spent = dict[str, int | None]
"""What a call that is over takes off each grant (None: the whole grant goes back)."""


class HaltedError(Exception):
    """No further model call may be made: the agent was stopped, a budget is used up, or the
    watchdog found the turn too long or stalled. `owner` is the subtree to stop."""

    def __init__(self, owner: str, reason: str) -> None:
        super().__init__(reason)
        self.owner, self.reason = owner, reason


@dataclass(eq=False)  # each call its own, however alike
class Taken:
    """What a model call took: `tokens` under each of `owners`, until it is `settled`."""

    owners: list[str]
    tokens: int
    settled: bool = False
    refused: Halt | None = None
    """Waiting to ask, it was in a grant write that found no room: it looks, not asks again."""


@dataclass
class _Held:
    granted: int = 0
    in_flight: int = 0
    asking: int = 0
    """Grant writes not answered yet: their tokens may be in the row already."""
    waiting: int = 0
    """Calls of this process that found too little, until they go or give up."""
    spare: int = 0
    """The spare of the last grant: at most this much (in whole calls) of what calls leave
    over is kept idle here for this process's next calls; the rest goes back. With none (a
    grant at the room left), all goes back, also while a call here waits: a leftover kept
    for a call that needs more than it would fill the cap for the other processes, which
    then wait for each other until stall_timeout_s."""


@dataclass
class Escrow:
    """One per process (`TurnRunner.escrow`)."""

    held: dict[str, _Held] = field(default_factory=dict)
    _asking: asyncio.Lock = field(default_factory=asyncio.Lock)
    _looks: dict[tuple[str, ...], asyncio.Future[Halt | None]] = field(default_factory=dict)
    _wanting: list[Taken] = field(default_factory=list)
    """The calls waiting for `_asking`: its holder asks for them all in one write."""

    def _of(self, owner: str) -> _Held:
        return self.held.setdefault(owner, _Held())

    def take(self, owners: Sequence[str], tokens: int) -> bool:
        """Take `tokens` from what is held under each owner, if all have room."""
        held = [self._of(owner) for owner in owners]
        if any(one.in_flight + tokens > one.granted for one in held):
            return False
        for one in held:
            one.in_flight += tokens
        return True

    async def _ask(self, db: AsyncStore, agent: Agent, lease: Lease, budgets: Budgets,
                   owners: list[str], tokens: int) -> Halt | None:
        """The grant write, for what is short of `tokens` under the owners, and of the other
        calls waiting to ask under them."""
        along = [call for call in self._wanting if call.owners == owners]
        short = self.short(owners, tokens + sum(call.tokens for call in along))
        for owner in short:
            self._of(owner).asking += 1
        try:
            halt, added = await db.write(fenced(lease, functools.partial(
                grant_before_call, thread_id=agent.thread_id, budgets=budgets,
                holder=lease.holder, in_flight=self._in_flight(owners), short=short,
                going=self.short(owners, tokens))))
        finally:
            for owner in short:
                self._of(owner).asking -= 1
        for owner, count in added.items():
            self._of(owner).granted += count
            self._of(owner).spare = max(0, count - short[owner])
        if halt is not None and halt.wait:
            for call in along:
                call.refused = halt
        return halt

    def _in_flight(self, owners: Sequence[str]) -> dict[str, int]:
        return {owner: self._of(owner).in_flight for owner in owners}

    def short(self, owners: Sequence[str], tokens: int) -> dict[str, int]:
        """What is missing under each owner for a call of `tokens`."""
        missing = {owner: self._of(owner).in_flight + tokens - self._of(owner).granted
                   for owner in owners}
        return {owner: count for owner, count in missing.items() if count > 0}

    def settle(self, taken: Taken, used: int) -> Spent:
        """A call is over, having used `used` tokens: what to take off the rows."""
        spent: Spent = {}
        taken.settled = True
        for owner in taken.owners:
            one = self._of(owner)
            one.in_flight -= taken.tokens
            if one.in_flight == 0 and one.asking == 0 and one.waiting == 0:
                one.granted, spent[owner] = 0, None  # nothing in flight here: all goes back
                continue
            left_over = max(0, one.granted - used - one.in_flight)
            back = used + left_over - self._kept(one, left_over, taken.tokens)
            one.granted, spent[owner] = max(0, one.granted - back), back
        return spent

    @staticmethod
    def _kept(one: _Held, left_over: int, call: int) -> int:
        """Of what is left over, what stays here: whole calls of `call` tokens, for the calls
        waiting here and a spare for the next (at most the last grant's, at most SPARE_CALLS);
        held idle, more would keep the others' calls waiting while the cap is not used (one
        process held half of a 2,000,000 cap with one call in flight, 50 calls waiting in
        another)."""
        if not one.spare or not call:
            return 0
        wanted = one.waiting * call + min(one.spare, SPARE_CALLS * call)
        return min(left_over, wanted) // call * call

    def idle(self) -> Spent:
        """The grants under which no call of this process is in flight, asking or waiting,
        to give back whole (with the heartbeat) and forget here. A call that is over gives
        its grant back itself, but not when the write that would have failed (its lease was
        lost: the write is fenced) or was never made (the call was cut off before the model
        answered); the row would keep that grant from the other processes' calls for as
        long as this process lives. Give back in a write asked for at once: a grant asked
        for after it commits after it (`AsyncStore` keeps a process's writes in order)."""
        owners = [owner for owner, one in self.held.items()
                  if not (one.in_flight or one.asking or one.waiting)]
        for owner in owners:
            del self.held[owner]
        return dict.fromkeys(owners)

    async def room_for_call(self, db: AsyncStore, agent: Agent, lease: Lease, budgets: Budgets,
                            estimate: Callable[[], int], wait_s: float) -> Taken:
        """Check the budgets before a model call of `agent`, and take its tokens (settle them
        with `settle`). HaltedError when no call may go, or none could for `wait_s` seconds."""
        halt, owners = await db.read(functools.partial(
            check_before_call, thread_id=agent.thread_id, budgets=budgets, lease=lease))
        if halt is not None:
            raise HaltedError(halt.owner, halt.reason)
        tokens = estimate() if owners else 0
        if self.take(owners, tokens):
            return Taken(owners, tokens)
        for owner in owners:
            self._of(owner).waiting += 1
        try:
            return await self._wait_for_room(db, agent, lease, budgets, owners, tokens, wait_s)
        finally:
            for owner in owners:
                self._of(owner).waiting -= 1

    async def _wait_for_room(self, db: AsyncStore, agent: Agent, lease: Lease, budgets: Budgets,
                             owners: list[str], tokens: int, wait_s: float) -> Taken:
        """Ask for what a call is short of, and while there is no room, look again in reads
        (hundreds of agents waiting at a cap each trying a write every 50 ms held the others'
        writes back), taking what calls of this process leave over."""
        waiting_since = time.monotonic()
        while True:
            wanting = Taken(owners, tokens)
            self._wanting.append(wanting)
            try:
                async with self._asking:  # one grant write at a time, for all that wait
                    self._wanting.remove(wanting)
                    if self.take(owners, tokens):
                        return wanting
                    halt = wanting.refused or await self._ask(
                        db, agent, lease, budgets, owners, tokens)
                    if halt is None:  # granted all it alone was short of: it goes
                        if self.take(owners, tokens):
                            return wanting
                        continue  # calls here that were over meanwhile gave back what it
                        # counted on (under an owner it did not ask under): ask again
            finally:
                if wanting in self._wanting:  # cancelled while waiting for the lock
                    self._wanting.remove(wanting)
            if not halt.wait:  # this call's own check: used up, or its agent stopped
                await self._give_back_idle(db, lease.holder, owners)  # not the heartbeat's
                raise HaltedError(halt.owner, halt.reason)  # (seconds), while others wait
            while halt is not None and halt.wait:  # until a look shows room: ask again
                if time.monotonic() - waiting_since > wait_s:  # they never settle: give up
                    raise HaltedError(agent.thread_id, halt.reason)
                if self.take(owners, tokens):
                    return Taken(owners, tokens)
                await self._give_back_idle(db, lease.holder, owners)
                halt = await self._look(db, agent, lease, budgets, owners)
                if self.take(owners, tokens):
                    return Taken(owners, tokens)

    async def _give_back_idle(self, db: AsyncStore, holder: str, owners: list[str]) -> None:
        """Give back what this process holds under the owners past its calls in flight: a
        call here found the cap filled and cannot take it. Kept idle (a spare, or whole calls
        kept for the calls waiting here), it fills the cap for the other processes, whose
        calls wait the same way: two processes each keeping 8,000 for a call of 12,000 waited
        for each other until stall_timeout_s with 8,000 of the cap left and nothing in
        flight, the heartbeat giving back nothing (a call waits there). Under `_asking`: a
        grant write not answered yet was asked for with what is held here counted."""
        if not self._idle(owners):  # most looks: no lock to wait for (hundreds may wait)
            return
        async with self._asking:
            idle = self._idle(owners)
            for owner, count in idle.items():
                self._of(owner).granted -= count
            given = db.submit(functools.partial(_spend, holder=holder, spent=idle)) \
                if idle else None
        if given is not None:
            await given

    def _idle(self, owners: Sequence[str]) -> dict[str, int]:
        idle = {owner: self._of(owner).granted - self._of(owner).in_flight for owner in owners}
        return {owner: count for owner, count in idle.items() if count > 0}

    async def _look(self, db: AsyncStore, agent: Agent, lease: Lease, budgets: Budgets,
                    owners: list[str]) -> Halt | None:
        """In POLL_S, whether there is room under the owners: one read for all the calls of
        this process waiting under them (hundreds may wait at a cap; a read each every 50 ms
        was half a core). Only a hint, read along one waiting agent's chain: each call then
        asks in its own write, which checks its own."""
        key = tuple(owners)
        look = self._looks.get(key)
        if look is None or look.done():
            look = self._looks[key] = asyncio.ensure_future(
                self._look_later(db, agent.thread_id, lease.holder, budgets, owners))
        return await asyncio.shield(look)

    async def _look_later(self, db: AsyncStore, thread_id: str, holder: str, budgets: Budgets,
                          owners: list[str]) -> Halt | None:
        await asyncio.sleep(POLL_S)
        return await db.read(functools.partial(
            halt_before_call, thread_id=thread_id, budgets=budgets, holder=holder,
            in_flight=self._in_flight(owners)))


def _spend(tx: Tx, holder: str, spent: Mapping[str, int | None]) -> None:
    tx.grants.spend(holder, spent)
