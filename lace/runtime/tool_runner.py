"""Running an agent's tool calls: a tool's effect and its `tool_result` event commit together;
a waiting tool (delegate, spawn_await) waits for its tasks without holding a model slot."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.config import Budgets, Limits, Profile
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Agent
from lace.runtime.approvals import Approvals
from lace.runtime.conversation import PendingWait, own_tools, tool_result_data
from lace.runtime.crash import crash_point
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventAppended, EventBus, TasksChanged, ThreadSpawned
from lace.store import Tx
from lace.tools.base import (
    ModelCheck,
    ToolContext,
    ToolError,
    ToolResult,
    WaitGraph,
    WaitingTool,
)
from lace.tools.delegation import settled
from lace.tools.registry import Recorder, ToolRegistry
from lace.tools.workspace import WorkspaceTool

POLL_S = 0.5


@dataclass
class Effects:
    """What a committed transaction did that the runtime must act on."""

    woken: set[str] = field(default_factory=set)
    spawned: list[tuple[str, str, str | None]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)

    def collect(self, tx: Tx) -> None:
        """Remember who was notified, spawned or stopped in `tx`."""
        self.woken.update(tx.woken)
        self.stopped.extend(tx.stopped)
        for child in tx.spawned:
            agent = tx.get_agent(child)
            self.spawned.append((child, agent.model_name, agent.current_task))


@dataclass
class ToolRunner:
    """Runs tool calls for every agent of the process."""

    db: AsyncStore
    bus: EventBus
    wake: Callable[[str], None]
    cancel: Callable[[list[str]], None]
    check_model: ModelCheck
    limits: Limits
    profiles: Mapping[str, Profile]
    budgets: Budgets = field(default_factory=Budgets)
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    waits: WaitGraph = field(default_factory=WaitGraph)
    workspace: Path | None = None
    approvals: Approvals | None = None
    waited: dict[str, float] = field(default_factory=dict)
    """Seconds each agent spent waiting on others this turn (not counted as turn time)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def context(self, agent: Agent) -> ToolContext:
        """The tool context of an agent: its identity, its own tools, limits and profiles."""
        return ToolContext(
            store=self.db.store, thread_id=agent.thread_id,
            session_id=root_of(agent.thread_id), check_model=self.check_model,
            profiles=self.profiles, limits=self.limits, budgets=self.budgets, waits=self.waits,
            tools=tuple(own_tools(agent)))

    def changed(self) -> None:
        """Something on the board changed: let every waiting tool look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def change_signal(self) -> asyncio.Event:
        """The event the next change sets."""
        return self._changed

    async def run(self, agent: Agent, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        """Run one call and return the tool message for the model."""
        tool_class = self.registry.tools.get(name)
        if tool_class is not None and issubclass(tool_class, WaitingTool):
            text = await self._run_waiting(agent, call_id, name, arguments)
        elif tool_class is not None and issubclass(tool_class, WorkspaceTool):
            text = await self._run_workspace(agent, call_id, name, arguments)
        else:
            text = await self._run_plain(agent, call_id, name, arguments)
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    async def _run_workspace(self, agent: Agent, call_id: str, name: str,
                             arguments: str) -> str:
        """Parse, ask the approval policy, act on the workspace, then record the result (with
        the files it changed, so a person sees which agent changed what)."""
        try:
            tool = self.registry.parse(name, arguments, agent.tools)
            assert isinstance(tool, WorkspaceTool)
            if self.approvals is None or self.workspace is None:
                raise ToolError(f"{name} needs a workspace, and this runtime has none.")
            denial = await self.approvals.check(agent.thread_id, name, tool.model_dump())
            if denial is not None:
                raise ToolError(denial)
            result = await tool.perform(self.workspace)
        except (LaceError, OSError) as error:
            message = str(error)
            return await self._finish(agent, call_id, name, lambda tx: (message, True))
        return await self._finish(agent, call_id, name, lambda tx: (result.text, result.is_error),
                                  extra={"files_changed": list(result.files_changed)})

    async def _run_plain(self, agent: Agent, call_id: str, name: str, arguments: str) -> str:
        effects = Effects()
        recorded: list[tuple[int, dict[str, Any]]] = []

        def record(tx: Tx, result: ToolResult) -> None:
            data = tool_result_data(call_id, name, result.text, result.is_error)
            recorded.append((tx.append_event(agent.thread_id, "tool_result", data), data))
            effects.collect(tx)

        result = await self.execute(name, arguments, self.context(agent), allowed=agent.tools,
                                    record=record)
        crash_point("after_tool_effect")
        self._after(agent, recorded, effects, board_changed=name.startswith("task_"))
        return result.text

    async def execute(self, name: str, arguments: str | dict[str, Any], context: ToolContext,
                      *, allowed: list[str] | None = None,
                      record: Recorder | None = None) -> ToolResult:
        """Run a board tool's call: its effect and `record` commit together; an error writes
        only `record` (what `ToolRegistry.execute` does, through the async store)."""
        try:
            tool = self.registry.parse(name, arguments, allowed)
            return await self.db.write(lambda tx: self.registry.run(tx, tool, context, record))
        except LaceError as error:
            failure = self.registry.failure(error)
            if record is not None:
                await self.db.write(lambda tx: record(tx, failure))
            return failure

    async def _run_waiting(self, agent: Agent, call_id: str, name: str, arguments: str) -> str:
        context, effects = self.context(agent), Effects()
        try:
            tool = self.registry.parse(name, arguments, agent.tools)
            assert isinstance(tool, WaitingTool)

            def start(tx: Tx) -> list[str]:
                task_ids = tool.start(tx, context)
                tx.mark_waiting(agent.thread_id, call_id, task_ids)
                tx.set_status(agent.thread_id, "waiting")
                effects.collect(tx)
                return task_ids

            task_ids = await self.db.write(start)
        except LaceError as error:
            message = str(error)
            self.waits.remove(agent.thread_id)
            return await self._finish(agent, call_id, name, lambda tx: (message, True))
        self._after(agent, [], effects, board_changed=True)
        return await self.resume(agent, PendingWait(call_id, name, arguments, task_ids))

    async def resume(self, agent: Agent, wait: PendingWait) -> str:
        """Wait for the tasks of a waiting call (new, or persisted before a crash), then finish."""
        context = self.context(agent)
        tool = self.registry.parse(wait.tool_name, wait.arguments, agent.tools)
        assert isinstance(tool, WaitingTool)
        began = time.monotonic()
        deadline = began + self.limits.delegate_timeout_s
        while not await self.db.read(lambda tx: settled(tx, wait.task_ids)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(POLL_S, remaining)):
                    await self._changed.wait()
        self.waits.remove(agent.thread_id)
        self.waited[agent.thread_id] = self.waited.get(agent.thread_id, 0.0) + \
            time.monotonic() - began

        def finish(tx: Tx) -> tuple[str, bool]:
            tx.consume_notices(agent.thread_id, wait.task_ids)
            return tool.finish(tx, context, wait.task_ids), False

        return await self._finish(agent, wait.call_id, wait.tool_name, finish,
                                  waited_for=wait.task_ids)

    async def _finish(self, agent: Agent, call_id: str, name: str,
                      outcome: Callable[[Tx], tuple[str, bool]],
                      waited_for: list[str] | None = None,
                      extra: dict[str, Any] | None = None) -> str:
        recorded: list[tuple[int, dict[str, Any]]] = []

        def write(tx: Tx) -> str:
            text, is_error = outcome(tx)
            data = {**tool_result_data(call_id, name, text, is_error),
                    "waited_for": waited_for or [], **(extra or {})}
            recorded.append((tx.append_event(agent.thread_id, "tool_result", data), data))
            tx.set_status(agent.thread_id, "running")
            return text

        text = await self.db.write(write)
        self._after(agent, recorded, Effects(), board_changed=False)
        return text

    def _after(self, agent: Agent, recorded: list[tuple[int, dict[str, Any]]], effects: Effects,
               *, board_changed: bool) -> None:
        for event_id, data in recorded:
            self.bus.publish(EventAppended(agent.thread_id, event_id, "tool_result", data))
        for child, model, task_id in effects.spawned:
            self.bus.publish(ThreadSpawned(child, agent.thread_id, model, task_id))
        if effects.woken or board_changed:
            self.bus.publish(TasksChanged(agent.thread_id))
            self.changed()
        if effects.stopped:
            self.cancel(effects.stopped)
        for thread_id in effects.woken - {agent.thread_id}:
            self.wake(thread_id)
