"""The scheduler: runs a turn for every thread with pending inbox rows, concurrently, in one
asyncio process; idle agents hold no coroutine. Several processes may run the agents of one
session (`lace run --workers`, `lace worker`): each claims a thread in the transaction that
starts its turn, learns of rows the others wrote through a `ChangeFeed`, and takes only its
share of the turns at once."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from lace.config import Limits
from lace.core.agents import BUSY_STATUSES, HELD_STATUSES
from lace.core.effects import Effects
from lace.core.errors import StorageError
from lace.core.ids import root_of
from lace.core.records import Lease, Place
from lace.llm.types import ModelError
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import HaltedError, Spent
from lace.runtime.events import EventBus, TasksChanged, ThreadSpawned, TurnFailed
from lace.runtime.sessions import WATCH_POLL_S, quiet, resume_cut_off
from lace.runtime.turn_end import fail_turn
from lace.runtime.turns import AlreadyRunningError, TurnRunner
from lace.store import Tx
from lace.store.engines import ChangeFeed, Polling
from lace.store.engines.reconnect import is_retried
from lace.store.failures import storage_error
from lace.store.leases import LeaseLostError, fenced

log = logging.getLogger("lace.runtime")
STOP_WRITE_S = 5.0
"""How long a stopping process waits for its cut-off turns to end (each writes as it ends) and
tries to mark them `interrupted` while the database is unreachable; past it they are left to
expire with its lease (others resume them then)."""
LOOK_GAP_S = 0.05
"""The least time between two looks of the watch: the commits of other processes (hundreds a
second in a fan-out, each announced) cost one look per gap, not one each."""
DEFER_S = 0.1
"""How long a process leaves a woken thread to the others when it runs its share of the turns
already, or the thread falls to another's part, before it claims the thread itself (if a look
finds it still unclaimed: no thread waits on a process that never comes)."""
STEAL_S = 2.0
"""How long a process already running its share of the turns leaves a thread of another live
process's part (`_not_mine`) to that process before it claims the thread itself, if a look
finds it still unclaimed: the owner's claims, woken by the same commit, take a few batches to
commit (more than DEFER_S on a busy machine), and a process that claimed the others' threads
after DEFER_S raced the owner for each (three failed claims per turn in a 300-task fan-out on
four processes)."""


@dataclass
class Scheduler:
    """Owns the running turns of one process, and the process's lease (`process_id`); built by
    `lace.runtime.assembly.open_runtime`, which registered the process first."""

    db: AsyncStore
    runner: TurnRunner
    bus: EventBus
    limits: Limits
    process_id: str
    database_path: Path | None = None
    """The SQLite file, to tell a full disk from other errors (None on a server)."""
    feed: ChangeFeed = field(default_factory=lambda: Polling())
    sessions: set[str] = field(default_factory=set)
    serve_all: bool = False
    """Serve every session of the database, new ones too (`lace worker` without --session)."""
    max_agents: int | None = None
    """At most this many turns at once here; threads past it are left for other processes."""
    share_work: bool = False
    """Other processes run these sessions' agents too: claim at once only a fair share of the
    turns (see `wake`), and count a session quiet only when the database says so."""
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    storage_failure: StorageError | None = None
    _wake_again: set[str] = field(default_factory=set)
    _halting: set[str] = field(default_factory=set)
    _stopping: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _watch: asyncio.Task[None] | None = None
    _share: float = math.inf
    _deferred: dict[str, float] = field(default_factory=dict)
    """Threads left to the others (`wake`), with the loop time each was first left."""
    _peers: list[str] = field(default_factory=list)  # the live processes, when sharing
    _left_some: bool = False

    def __post_init__(self) -> None:
        if self.share_work:
            self._share = 1  # until the watch has counted the turns and the processes

    @property
    def claims_at(self) -> Place | None:
        """The place this process claims agents for (`TurnRunner.place`)."""
        return self.runner.place

    def apply(self, effects: Effects) -> None:
        """Act on what a committed write caused: announce new agents, let waiting tools look
        again, cancel the turns of stopped agents, and wake every agent that was told
        something."""
        for spawned in effects.spawned:
            self.bus.publish(ThreadSpawned(spawned.thread_id, spawned.parent_id,
                                           spawned.model_name, spawned.task_id))
        if effects.tasks or effects.notices:
            self.bus.publish(TasksChanged(tuple(sorted(effects.tasks))))
            self.runner.tools.changed(effects.tasks)
        self.cancel(list(effects.stopped))
        for thread_id in effects.woken:
            self.wake(thread_id)

    def reopen(self) -> None:
        """Accept wake-ups again after `stop` (a new session, or one resumed)."""
        self._stopping = False

    async def resume(self, root_id: str) -> list[str]:
        """Queue a resume for every agent of the session whose turn was cut off (marked
        interrupted, or held by a process that died); a live process's turns are left alone.
        From now on this process also takes over the session's agents if their holder dies."""
        self._stopping = False
        self.sessions.add(root_id)
        resumed = await self.db.write(lambda tx: resume_cut_off(tx, root_id, self.process_id))
        self._start_watch()
        return resumed

    # the watch: heartbeat, takeover, and rows written by other processes

    def _start_watch(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watch_loop(), name="lace-watch")

    async def _watch_loop(self) -> None:
        """Whenever the feed says the database changed (at least every WATCH_POLL_S), wake the
        runnable threads of this process's sessions (rows another process wrote); every fifth
        of the lease timeout renew the heartbeat and take over the agents of processes that
        died."""
        loop = asyncio.get_running_loop()
        lease_timeout = self.limits.lease_timeout_s
        beat_every = lease_timeout / 5
        next_beat = loop.time() + beat_every
        while True:
            try:
                await self.feed.wait(max(0.0, min(WATCH_POLL_S, next_beat - loop.time())))
                self._changed.set()  # a session quiet here may not be quiet elsewhere
                if loop.time() >= next_beat:
                    next_beat = loop.time() + beat_every
                    await self.db.write(functools.partial(
                        self._beat, lease_timeout, self.runner.escrow.idle()))
                    await self._take_over()
                await self._look()
                await asyncio.sleep(LOOK_GAP_S)  # news meanwhile waits for the next look
            except Exception as error:  # a busy database must not end the heartbeat
                if not self._storage_failed(error):
                    log.exception("the watch loop failed; trying again")
                await asyncio.sleep(WATCH_POLL_S)

    def _beat(self, lease_timeout: float, idle: Spent, tx: Tx) -> None:
        """The heartbeat, giving back the grants this process holds with no call there."""
        tx.processes.beat(self.process_id, lease_timeout)
        tx.grants.spend(self.process_id, idle)

    async def _take_over(self) -> None:
        """Resume the cut-off agents of every session served (serving all: of every session
        with agents running, waiting or interrupted)."""
        roots = sorted(await self.db.read(lambda tx: tx.agents.sessions_with(BUSY_STATUSES))
                       if self.serve_all else self.sessions)
        for root_id in roots:
            await self.resume(root_id)

    async def _look(self) -> None:
        """In one read: cancel the turns of agents stopped meanwhile by another process (`lace
        stop`: their tool calls, a running `bash` among them, end within a poll), and wake the
        runnable threads of the sessions served, this process's part first (`_not_mine`), in
        random order, forgetting the deferred ones no longer runnable; when sharing, count
        this process's share of the turns: those running or runnable, over the live
        processes."""
        roots = None if self.serve_all else list(self.sessions)
        running = list(self.running)

        def look(tx: Tx) -> tuple[list[str], list[str]]:
            stopped = tx.agents.stopped_among(running) if running else []
            if roots == []:
                return [], stopped
            runnable = tx.inbox.runnable_anywhere(self.claims_at) if roots is None else [
                thread for root_id in roots
                for thread in tx.inbox.runnable(root_id, self.claims_at)]
            if self.share_work:
                held = (sum(tx.agents.sessions_with(HELD_STATUSES).values()) if roots is None
                        else sum(tx.agents.count_in(root_id, HELD_STATUSES)
                                 for root_id in roots))
                self._peers = sorted(tx.processes.live())
                processes = max(1, len(self._peers))
                self._share = max(1, math.ceil((held + len(runnable)) / processes))
            return runnable, stopped

        runnable, stopped = await self.db.read(look)
        self.cancel(stopped)
        self._deferred = {thread_id: since for thread_id, since in self._deferred.items()
                          if thread_id in runnable}  # the others were claimed meanwhile
        random.shuffle(runnable)
        runnable.sort(key=self._not_mine)  # this process's part first, in random order
        now = asyncio.get_running_loop().time()
        for thread_id in runnable:
            self.wake(thread_id, late=self._left_long_enough(thread_id, now))

    def _left_long_enough(self, thread_id: str, now: float) -> bool:
        """Whether a thread left to the others (`wake`) has waited its time (`_patience`)."""
        since = self._deferred.get(thread_id)
        return since is not None and now - since >= self._patience(thread_id)

    def _patience(self, thread_id: str) -> float:
        """How long a thread is left to the others: STEAL_S for another's while this process
        runs its share, else DEFER_S."""
        busy = len(self.running) >= self._share
        return STEAL_S if busy and self._not_mine(thread_id) else DEFER_S

    def _not_mine(self, thread_id: str) -> bool:
        """Whether a thread falls to another live process's part (by a hash of its id over
        the live processes), so the processes that look at once each claim their own first
        instead of racing for the same threads."""
        if self.process_id not in self._peers:
            return False
        return (zlib.crc32(thread_id.encode()) % len(self._peers)
                != self._peers.index(self.process_id))

    # scheduling

    def wake(self, thread_id: str, *, late: bool = False) -> None:
        """Make sure `thread_id` runs its pending inbox rows soon (unless this process is
        stopping: its agents are left interrupted for the next one).

        Past `max_agents` turns the thread is left to other processes (looked at again when a
        turn here ends). When sharing, a thread of another live process's part, or any while
        this process runs its share of the turns, is left to the others for a while
        (`_patience`); then the look that finds it still unclaimed claims it (`late`)."""
        if self._stopping:
            return
        self.sessions.add(root_of(thread_id))
        self._start_watch()
        if thread_id in self.running:
            self._wake_again.add(thread_id)
            return
        if self.max_agents is not None and len(self.running) >= self.max_agents:
            self._left_some = True
            return
        if not late and (len(self.running) >= self._share or self._not_mine(thread_id)):
            if thread_id not in self._deferred:
                loop = asyncio.get_running_loop()
                self._deferred[thread_id] = loop.time()
                loop.call_later(self._patience(thread_id), self._look_again, thread_id)
            return
        self._deferred.pop(thread_id, None)
        task = asyncio.create_task(self._drive(thread_id), name=f"lace-turns-{thread_id}")
        self.running[thread_id] = task
        task.add_done_callback(functools.partial(self._never_ran, thread_id))

    def _look_again(self, thread_id: str) -> None:
        """A thread's time left to the others is up: the watch looks at the board soon, and
        claims the thread if it is still unclaimed (a claim without a look raced the owner's,
        still being committed)."""
        if thread_id in self._deferred:  # not started here meanwhile
            self.feed.notify()

    def cancel(self, thread_ids: list[str]) -> None:
        """Cancel the running turns of these (just stopped) agents at once, except a turn that
        is stopping its own agent (it ends by itself)."""
        for thread_id in thread_ids:
            task = self.running.get(thread_id)
            if task is not None and thread_id not in self._halting:
                task.cancel()

    async def stop_agent(self, thread_id: str, reason: str, *, by_person: bool = False,
                         lease: Lease | None = None) -> list[str]:
        """Stop an agent and its subtree: by a person (the app; it lasts until a person
        resumes it), or by the watchdog or a budget (during a turn under `lease`)."""

        return await self.db.write(fenced(lease, lambda tx: tx.lifecycle.stop_subtree(
            thread_id, reason=reason, by_person=by_person)))

    async def _drive(self, thread_id: str) -> None:
        try:
            while True:
                self._wake_again.discard(thread_id)  # this look covers every wake so far
                if not await self.db.read(
                        lambda tx: thread_id in tx.inbox.runnable_of(thread_id)):
                    return
                try:
                    await self.runner.run(thread_id)
                except AlreadyRunningError:
                    return
                except HaltedError as halt:
                    await self._halt(thread_id, halt)
                    return
                except ModelError as error:
                    await self._fail(thread_id, str(error))
                    return
                except LeaseLostError as lost:
                    log.info("abandoned the turn of %s: %s", thread_id, lost)
                    return
                except Exception as error:  # a bug must not take the session down
                    if self._storage_failed(error):
                        return
                    if is_retried(error):  # the database, not the agent: resume the turn
                        await self._cut_by_database(thread_id, error)
                        return
                    log.exception("turn of %s failed", thread_id)
                    await self._fail(thread_id, f"internal error: {error!r}")
                    return
        except Exception as error:  # marking the failure failed too: a full disk ends the run
            if not self._storage_failed(error):
                raise
        finally:
            self._ended(thread_id)

    def _ended(self, thread_id: str) -> None:
        """A drive is over: its slot is free, and a wake that came meanwhile starts the next."""
        self.running.pop(thread_id, None)
        self.runner.leases.pop(thread_id, None)
        self._changed.set()
        if self._left_some:  # a slot is free for a thread left past max_agents
            self._left_some = False
            self.feed.notify()
        if thread_id in self._wake_again:
            self._wake_again.discard(thread_id)
            self.wake(thread_id)

    def _never_ran(self, thread_id: str, task: asyncio.Task[None]) -> None:
        """A drive cancelled before its first step (its agent stopped as it was woken) never
        ran its `finally`: without this its thread would stay `running` for good, and
        `run_until_quiet` would never return."""
        if self.running.get(thread_id) is task:
            self._ended(thread_id)

    def _storage_failed(self, error: Exception) -> bool:
        """Whether `error` is the disk refusing a write (full, read-only). Then the run ends
        (`run_until_quiet` raises it) and the agent is left as it is, not marked `error`: its
        process is gone when the run ends, so `lace run --continue` resumes it."""
        storage = storage_error(error, self.database_path)
        if storage is None:
            return False
        self.storage_failure = self.storage_failure or storage
        self._changed.set()
        return True

    async def _cut_by_database(self, thread_id: str, error: Exception) -> None:
        """Leave a turn a database fault cut off `interrupted`, and resume it: the agent did
        nothing wrong, so it is not marked `error`."""
        log.warning("the turn of %s was cut off by the database (%s); it resumes",
                    thread_id, error)

        def interrupt(tx: Tx) -> None:
            tx.agents.update(thread_id, status="interrupted")

        try:
            await self.db.write(fenced(self.runner.leases.get(thread_id), interrupt))
        except LeaseLostError:
            return
        await self.resume(root_of(thread_id))

    async def _halt(self, thread_id: str, halt: HaltedError) -> None:
        """Stop the subtree a halted turn names (while this turn still holds its lease)."""
        self._halting.add(thread_id)
        try:
            await self.stop_agent(halt.owner, halt.reason, lease=self.runner.leases.get(
                thread_id))
        except LeaseLostError:
            return
        finally:
            self._halting.discard(thread_id)
        self.bus.publish(TurnFailed(thread_id, f"stopped: {halt.reason}"))

    async def _fail(self, thread_id: str, error: str) -> None:
        """Mark a failed turn's agent `error` (while its turn still holds its lease)."""
        lease = self.runner.leases.get(thread_id)
        try:
            await self.db.write(fenced(lease, lambda tx: fail_turn(tx, thread_id, error)))
        except LeaseLostError:
            return
        self.bus.publish(TurnFailed(thread_id, error))

    async def run_until_quiet(self, root_id: str) -> None:
        """Run every agent of the session until none is running and no runnable row waits;
        when other processes share the session, until no agent of it is running, waiting or
        interrupted in any process either (the database says so)."""
        while True:
            if self.storage_failure is not None:
                await self.stop()
                raise self.storage_failure
            runnable, quiet_everywhere = await self.db.read(lambda tx: (
                tx.inbox.runnable(root_id), not self.share_work or quiet(tx, root_id)))
            for thread_id in runnable:
                self.wake(thread_id)
            if not self.running and quiet_everywhere:
                return
            self._changed.clear()
            await self._changed.wait()

    async def serve(self) -> None:
        """Run the agents of the sessions served (`sessions`, or all with `serve_all`) until
        cancelled, then stop (running turns are marked interrupted, for any process to
        resume). Raises the storage failure that ends it early."""
        try:
            await self._take_over()
            self._start_watch()
            while self.storage_failure is None:
                self._changed.clear()
                await self._changed.wait()
        finally:
            await self.stop()
        if self.storage_failure is not None:
            raise self.storage_failure

    async def stop(self) -> list[str]:
        """Cancel running turns and mark their agents `interrupted` (resumable); nothing is
        started again afterwards."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        cut = list(self.running)
        for task in list(self.running.values()):
            task.cancel()
        deadline = asyncio.get_running_loop().time() + STOP_WRITE_S
        if self.running:  # a turn ending writes (a cut model call's usage): not for good
            await asyncio.wait(list(self.running.values()), timeout=STOP_WRITE_S)

        def mark(tx: Tx) -> None:
            for agent in tx.agents.by_ids(cut):
                if agent.status in HELD_STATUSES and agent.lease_holder == self.process_id:
                    tx.agents.update(agent.thread_id, status="interrupted")

        try:
            left = max(deadline - asyncio.get_running_loop().time(), 0.1)
            await asyncio.wait_for(self.db.write(mark), left)
        except TimeoutError:
            log.warning("lace could not reach the database to mark its cut-off turns; other "
                        "processes resume them once this process's lease expires")
        except Exception as error:  # a full disk: the dead process's agents resume anyway
            if not self._storage_failed(error):
                raise
        finally:
            await self.stop_servers()
        return cut

    async def stop_servers(self) -> None:
        """Stop the process's MCP servers, after the last hooks (SessionEnd) finished: every
        exit path of lace comes here."""
        if self.runner.tools.hooks is not None:
            await self.runner.tools.hooks.finish()
        if self.runner.tools.mcp is not None:
            await self.runner.tools.mcp.stop()

    def close(self) -> None:
        """Stop watching the database (the runtime closes the store and gives up the lease)."""
        if self._watch is not None:
            self._watch.cancel()
        self.feed.close()
