"""The supervisor: runs a turn for every thread with pending inbox rows, concurrently, in one
asyncio process; idle agents hold no coroutine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.config import Settings
from lace.core.agents import HELD_STATUSES
from lace.core.assignee import HUMAN, parse_model
from lace.core.effects import Effects
from lace.core.errors import StorageError
from lace.core.ids import root_of
from lace.core.notifications import INTERRUPTED_TURN, LACE_SENDER
from lace.core.records import Lease, Thread
from lace.core.text import valid_text
from lace.llm.types import ModelClient, ModelError
from lace.runtime.approvals import Approvals
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventBus, TasksChanged, ThreadSpawned, TurnFailed
from lace.runtime.tool_runner import ToolRunner
from lace.runtime.turn_end import fail_turn
from lace.runtime.turns import AlreadyRunningError, HaltedError, TurnRunner
from lace.store import Store, Tx
from lace.store.failures import storage_error
from lace.store.leases import LeaseLostError, fenced
from lace.tools.base import ModelCheck, ToolResult, no_model_check
from lace.tools.names import ALL_TOOL_NAMES
from lace.tools.workspace import Workspace

log = logging.getLogger("lace.runtime")
POLL_S = 0.5


def _resume_cut_off(tx: Tx, root_id: str, process_id: str) -> list[str]:
    """Agents whose turn was cut off get a `resume` inbox row and become idle: those marked
    `interrupted`, and those marked running or waiting whose process has died."""
    resumed = tx.cut_off_agents(root_id, alive={process_id})
    for thread_id in resumed:
        tx.update_agent(thread_id, status="idle", lease_holder=None, tokens_reserved=0)
        tx.orphan_approvals(thread_id)
        tx.post_inbox(thread_id, sender=LACE_SENDER, kind="resume", text=INTERRUPTED_TURN,
                      priority="high")
    return resumed


@dataclass
class Supervisor:
    """Owns the running turns of one process, and the process's lease (`process_id`)."""

    store: Store
    client: ModelClient
    settings: Settings
    check_model: ModelCheck = no_model_check
    workspace: Path | None = None
    bus: EventBus = field(default_factory=EventBus)
    db: AsyncStore = field(init=False)
    runner: TurnRunner = field(init=False)
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _wake_again: set[str] = field(default_factory=set)
    _halting: set[str] = field(default_factory=set)
    _stopping: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    process_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    sessions: set[str] = field(default_factory=set)
    _watch: asyncio.Task[None] | None = None
    storage_failure: StorageError | None = None

    def __post_init__(self) -> None:
        with self.store.transaction() as tx:
            tx.register_process(self.process_id, self.settings.limits.lease_timeout_s)
        self.db = AsyncStore(self.store, on_commit=self._apply)
        workspace = None if self.workspace is None else Workspace.for_lace(
            self.workspace, database_url=self.store.database.url,
            protected_paths=self.settings.tools.protected_paths)
        tools = ToolRunner(db=self.db, bus=self.bus, check_model=self.check_model,
                           limits=self.settings.limits, profiles=self.settings.profiles,
                           budgets=self.settings.budgets, workspace=workspace)
        tools.approvals = Approvals(db=self.db, bus=self.bus, settings=self.settings.tools,
                                    timeout_s=self.settings.limits.approval_timeout_s,
                                    changed=tools.change_signal)
        self.runner = TurnRunner(db=self.db, client=self.client, limits=self.settings.limits,
                                 bus=self.bus, tools=tools, budgets=self.settings.budgets,
                                 holder=self.process_id)

    def _apply(self, effects: Effects) -> None:
        """Act on what a committed write caused: announce new agents, let waiting tools look
        again, cancel the turns of stopped agents, and wake every agent that was told
        something."""
        for spawned in effects.spawned:
            self.bus.publish(ThreadSpawned(spawned.thread_id, spawned.parent_id,
                                           spawned.model_name, spawned.task_id))
        if effects.tasks or effects.notices:
            self.bus.publish(TasksChanged(tuple(sorted(effects.tasks))))
            self.runner.tools.changed()
        self.cancel(list(effects.stopped))
        for thread_id in effects.woken:
            self.wake(thread_id)

    # sessions

    async def start_session(self, prompt: str, model: str) -> Thread:
        """A new root thread whose inbox holds the person's prompt."""
        provider, name = parse_model(model)
        prompt, self._stopping = valid_text(prompt), False

        def create(tx: Tx) -> Thread:
            root = tx.create_session(provider=provider, model=name, title=prompt[:80],
                                     tools=list(ALL_TOOL_NAMES))
            tx.post_inbox(root.id, sender=HUMAN, kind="message", text=prompt)
            return root

        return await self.db.write(create)

    async def send(self, thread_id: str, text: str) -> None:
        """A person's message to any thread (through its inbox, so it works mid-turn)."""
        await self.db.write(lambda tx: tx.post_inbox(thread_id, sender=HUMAN, kind="message",
                                                     text=valid_text(text)))

    async def act_as_human(self, root_id: str, tool: str,
                           arguments: dict[str, Any]) -> ToolResult:
        """Call a tool as the person (`human`) through the one tool path."""
        tools = self.runner.tools
        return await tools.call(tools.human_context(root_id), tool, arguments)

    async def decide(self, approval_id: int, status: str) -> None:
        """The person's answer to an approval request (the app's prompt)."""
        await self.db.write(lambda tx: tx.decide_approval(approval_id, status, HUMAN))
        self.runner.tools.changed()

    async def resume(self, root_id: str) -> list[str]:
        """Queue a resume for every agent of the session whose turn was cut off (marked
        interrupted, or held by a process that died); a live process's turns are left alone.
        From now on this process also takes over the session's agents if their holder dies."""
        self._stopping = False
        self.sessions.add(root_id)
        resumed = await self.db.write(lambda tx: _resume_cut_off(tx, root_id, self.process_id))
        self._start_watch()
        return resumed

    # the watch: heartbeat, takeover, and rows written by other processes

    def _start_watch(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watch_loop(), name="lace-watch")

    async def _watch_loop(self) -> None:
        """Every POLL_S wake the runnable threads of this process's sessions (rows another
        process wrote); every fifth of the lease timeout renew the heartbeat and take over
        the agents of processes that died."""
        lease_timeout = self.settings.limits.lease_timeout_s
        beat_every = lease_timeout / 5
        last_beat = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(min(POLL_S, beat_every))
            try:
                if asyncio.get_running_loop().time() - last_beat >= beat_every:
                    last_beat = asyncio.get_running_loop().time()
                    await self.db.write(lambda tx: tx.beat(self.process_id, lease_timeout))
                    for root_id in list(self.sessions):
                        await self.resume(root_id)
                await self._cancel_stopped()
                await self._wake_runnable()
            except Exception as error:  # a busy database must not end the heartbeat
                if not self._storage_failed(error):
                    log.exception("the watch loop failed; trying again")

    async def _cancel_stopped(self) -> None:
        """Cancel the turns of agents stopped meanwhile by another process (`lace stop`): their
        tool calls, a running `bash` among them, end within a poll."""
        if not self.running:
            return
        running = list(self.running)
        stopped = await self.db.read(lambda tx: [
            agent.thread_id for agent in tx.agents_by_id(running) if agent.status == "stopped"])
        self.cancel(stopped)

    async def _wake_runnable(self) -> None:
        roots = list(self.sessions)
        runnable = await self.db.read(
            lambda tx: [thread for root_id in roots for thread in tx.runnable_threads(root_id)])
        for thread_id in runnable:
            self.wake(thread_id)

    # scheduling

    def wake(self, thread_id: str) -> None:
        """Make sure `thread_id` runs its pending inbox rows soon (unless this process is
        stopping: its agents are left interrupted for the next one)."""
        if self._stopping:
            return
        self.sessions.add(root_of(thread_id))
        self._start_watch()
        if thread_id in self.running:
            self._wake_again.add(thread_id)
            return
        self.running[thread_id] = asyncio.create_task(self._drive(thread_id),
                                                      name=f"lace-turns-{thread_id}")

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

        return await self.db.write(fenced(lease, lambda tx: tx.stop_subtree(
            thread_id, reason=reason, by_person=by_person)))

    async def resume_agent(self, thread_id: str) -> bool:
        """Resume a stopped agent: it continues its conversation."""
        return await self.db.write(lambda tx: tx.resume_agent(thread_id))

    async def _drive(self, thread_id: str) -> None:
        try:
            while True:
                self._wake_again.discard(thread_id)  # this look covers every wake so far
                if not await self.db.read(
                        lambda tx: thread_id in tx.runnable_threads_of(thread_id)):
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
                    log.exception("turn of %s failed", thread_id)
                    await self._fail(thread_id, f"internal error: {error!r}")
                    return
        except Exception as error:  # marking the failure failed too: a full disk ends the run
            if not self._storage_failed(error):
                raise
        finally:
            self.running.pop(thread_id, None)
            self.runner.leases.pop(thread_id, None)
            self._changed.set()
            if thread_id in self._wake_again:
                self._wake_again.discard(thread_id)
                self.wake(thread_id)

    def _storage_failed(self, error: Exception) -> bool:
        """Whether `error` is the disk refusing a write (full, read-only). Then the run ends
        (`run_until_quiet` raises it) and the agent is left as it is, not marked `error`: its
        process is gone when the run ends, so `lace run --continue` resumes it."""
        storage = storage_error(error, self.store.database.path)
        if storage is None:
            return False
        self.storage_failure = self.storage_failure or storage
        self._changed.set()
        return True

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
        """Run every agent of the session until none is running and no runnable row waits."""
        while True:
            if self.storage_failure is not None:
                await self.stop()
                raise self.storage_failure
            for thread_id in await self.db.read(lambda tx: tx.runnable_threads(root_id)):
                self.wake(thread_id)
            if not self.running:
                return
            self._changed.clear()
            await self._changed.wait()

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
        await asyncio.gather(*self.running.values(), return_exceptions=True)

        def mark(tx: Tx) -> None:
            for agent in tx.agents_by_id(cut):
                if agent.status in HELD_STATUSES and agent.lease_holder == self.process_id:
                    tx.update_agent(agent.thread_id, status="interrupted", tokens_reserved=0)

        try:
            await self.db.write(mark)
        except Exception as error:  # a full disk: the dead process's agents resume anyway
            if not self._storage_failed(error):
                raise
        return cut

    def close(self) -> None:
        """Stop the store thread, close the store's connections and give up the lease."""
        if self._watch is not None:
            self._watch.cancel()
        self.db.close()
        try:
            with self.store.transaction() as tx:
                tx.forget_process(self.process_id)
        except Exception as error:  # a full disk: the row expires with the lease
            if not self._storage_failed(error):
                raise
