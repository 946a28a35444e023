"""The one tool path. Every caller (an agent's turn, the CLI, the app) runs a call through
`ToolRunner.call`: validate, check the policy (asking for approval), execute, record the
`tool_result` event, and report any error in one shape. A call's effects (agents woken,
spawned or stopped) are acted on by the runtime once the write commits (`AsyncStore`'s commit
hook), so no caller collects them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lace.config import Budgets, Limits, Profile, WorkspaceSettings
from lace.core.assignee import HUMAN
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Agent, Lease
from lace.core.text import valid_text
from lace.core.tool_sets import grants, is_mcp_tool
from lace.runtime.approvals import Approvals
from lace.runtime.conversation import PendingWait, own_tools, tool_result_data
from lace.runtime.crash import crash_point
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventAppended, EventBus
from lace.runtime.isolation import with_committed_work, workspace_of
from lace.store import Store, Tx
from lace.store.leases import fenced
from lace.tools.base import (
    ModelCheck,
    ToolContext,
    ToolError,
    ToolResult,
    WaitingTool,
    no_model_check,
)
from lace.tools.delegation import settled
from lace.tools.mcp.servers import McpServers
from lace.tools.registry import ToolRegistry, decoded_arguments
from lace.tools.task_tools import TaskComplete
from lace.tools.workspace import Workspace, WorkspaceTool

POLL_S = 0.5
Arguments = str | dict[str, Any] | None
Recorded = EventAppended | None
T = TypeVar("T")


@dataclass
class ToolRunner:
    """Runs tool calls for every caller of the process."""

    db: AsyncStore
    bus: EventBus = field(default_factory=EventBus)
    check_model: ModelCheck = no_model_check
    limits: Limits = field(default_factory=Limits)
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    workspace: Workspace | None = None
    workspace_settings: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    approvals: Approvals | None = None
    mcp: McpServers | None = None
    """The process's MCP servers (None when none is configured)."""
    waited: dict[str, float] = field(default_factory=dict)
    """Seconds each agent spent waiting on others this turn (not counted as turn time)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def context(self, agent: Agent, lease: Lease | None = None) -> ToolContext:
        """The tool context of an agent in a turn under `lease`: its identity, its own tools,
        limits and profiles."""
        return self._context(agent.thread_id, root_of(agent.thread_id), tuple(own_tools(agent)),
                             lease)

    def human_context(self, session_id: str) -> ToolContext:
        """The tool context of the person (`human`), who may hand out any tool."""
        return self._context(HUMAN, session_id, None, None)

    def _context(self, thread_id: str, session_id: str, tools: tuple[str, ...] | None,
                 lease: Lease | None) -> ToolContext:
        return ToolContext(thread_id=thread_id, session_id=session_id,
                           check_model=self.check_model, profiles=self.profiles, tools=tools,
                           limits=self.limits, budgets=self.budgets, lease=lease,
                           workspace=None if self.workspace is None else self.workspace.folder,
                           workspace_settings=self.workspace_settings)

    async def _write(self, context: ToolContext, work: Callable[[Tx], T]) -> T:
        """A write for this caller: for an agent, only while its turn's lease holds."""
        return await self.db.write(fenced(context.lease, work))

    def changed(self) -> None:
        """Something on the board changed: let every waiting tool look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def change_signal(self) -> asyncio.Event:
        """The event the next change sets."""
        return self._changed

    async def definitions(self, agent: Agent, *, can_spawn: bool) -> list[dict[str, Any]]:
        """The function definitions of an agent's tools: lace's, then those of the running MCP
        servers it may use (the servers are started first, the first time)."""
        own = own_tools(agent)
        servers = [] if self.mcp is None else [
            tool for tool in await self.mcp.ready() if grants(own, tool.name)]
        return self.registry.definitions(
            own, profiles=list(self.profiles), can_spawn=can_spawn,
            also_granted=[tool.name for tool in servers]) + [
            tool.definition() for tool in servers]

    async def call(self, context: ToolContext, name: str, arguments: Arguments,
                   call_id: str | None = None) -> ToolResult:
        """Run one call. Inside an agent's turn (`call_id` given) its `tool_result` event
        commits with the tool's effect, or alone when the call failed; a waiting tool waits
        without holding a model slot, and a workspace or MCP tool runs after the approval
        policy."""
        if is_mcp_tool(name):
            return await self._call_server(context, name, arguments, call_id)
        try:
            tool = self.registry.parse(name, arguments, context.tools)
        except LaceError as error:
            return await self._record_alone(context, call_id, name, ToolResult.failure(error))
        if call_id is not None and isinstance(tool, WaitingTool):
            text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            return await self._start_wait(context, tool, PendingWait(call_id, name, text, []))
        if call_id is not None and isinstance(tool, WorkspaceTool):
            return await self._perform(context, tool, call_id)
        if call_id is not None and isinstance(tool, TaskComplete):
            tool = tool.model_copy(update={"message": await with_committed_work(
                self.db, context.thread_id, tool.task_id, tool.message)})

        def run(tx: Tx) -> tuple[ToolResult, Recorded]:
            result = ToolResult(tool.run(tx, context))
            return result, self._record(tx, context, call_id, name, result)

        try:
            result, recorded = await self._write(context, run)
        except LaceError as error:
            return await self._record_alone(context, call_id, name, ToolResult.failure(error))
        if call_id is not None:
            crash_point("after_tool_effect")
        self._publish(recorded)
        return result

    async def _start_wait(self, context: ToolContext, tool: WaitingTool,
                          wait: PendingWait) -> ToolResult:
        def start(tx: Tx) -> list[str]:
            task_ids = tool.start(tx, context)
            tx.events.mark_waiting(context.thread_id, wait.call_id, task_ids)
            tx.agents.set_status(context.thread_id, "waiting")
            return task_ids

        try:
            task_ids = await self._write(context, start)
        except LaceError as error:
            return await self._record_alone(context, wait.call_id, wait.tool_name,
                                            ToolResult.failure(error), running=True)
        return await self.resume(context, PendingWait(wait.call_id, wait.tool_name,
                                                      wait.arguments, task_ids))

    async def resume(self, context: ToolContext, wait: PendingWait) -> ToolResult:
        """Wait for the tasks of a waiting call (new, or persisted before a crash), then record
        its answer."""
        tool = self.registry.parse(wait.tool_name, wait.arguments, context.tools)
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
        self.waited[context.thread_id] = self.waited.get(context.thread_id, 0.0) + \
            time.monotonic() - began

        def finish(tx: Tx) -> tuple[ToolResult, Recorded]:
            tx.inbox.consume_notices(context.thread_id, wait.task_ids)
            result = ToolResult(tool.finish(tx, context, wait.task_ids))
            return result, self._record(tx, context, wait.call_id, wait.tool_name, result,
                                        waited_for=wait.task_ids, running=True)

        result, recorded = await self._write(context, finish)
        self._publish(recorded)
        return result

    async def _perform(self, context: ToolContext, tool: WorkspaceTool,
                       call_id: str) -> ToolResult:
        """Ask the approval policy, act on the workspace off the database, then record the
        result with the files it changed (so a person sees which agent changed what)."""
        files_changed: Sequence[str] = ()
        try:
            if self.approvals is None or self.workspace is None:
                raise ToolError(f"{tool.name} needs a workspace, and this runtime has none.")
            denial = await self.approvals.check(context.thread_id, tool.name, tool.model_dump(),
                                                context.lease)
            if denial is not None:
                raise ToolError(denial)
            workspace = await workspace_of(self.db, self.workspace, context.thread_id)
            performed = await tool.perform(workspace)
            result = ToolResult(performed.text, is_error=performed.is_error)
            files_changed = [valid_text(path) for path in performed.files_changed]
        except (LaceError, OSError) as error:
            result = ToolResult.failure(error)
        return await self._record_alone(context, call_id, tool.name, result,
                                        files_changed=files_changed, running=True)

    async def _call_server(self, context: ToolContext, name: str, arguments: Arguments,
                           call_id: str | None) -> ToolResult:
        """An MCP tool: the caller must have it and its server must be running; the approval
        policy (with the server's read-only hint) decides, then the server answers."""
        server = None
        try:
            tool = None if self.mcp is None else await self.mcp.find(name)
            if context.tools is not None and not grants(context.tools, name):
                servers = [] if self.mcp is None else [
                    known for known in self.mcp.tools if grants(context.tools, known)]
                raise ToolError(self.registry.unknown(name, context.tools, servers))
            if tool is None:
                raise ToolError("No MCP server is configured." if self.mcp is None
                                else self.mcp.unavailable(name))
            server = tool.server
            decoded = decoded_arguments(name, arguments)
            if call_id is not None:
                if self.approvals is None:
                    raise ToolError(f"{name} needs an approval policy, and this runtime has "
                                    "none.")
                denial = await self.approvals.check(context.thread_id, name, decoded,
                                                    context.lease, read_only_hint=tool.read_only)
                if denial is not None:
                    raise ToolError(denial)
            assert self.mcp is not None
            result = await self.mcp.call(tool, decoded)
        except LaceError as error:
            result = ToolResult.failure(error)
        return await self._record_alone(context, call_id, name, result, running=True,
                                        server=server)

    async def _record_alone(self, context: ToolContext, call_id: str | None, name: str,
                            result: ToolResult, *, files_changed: Sequence[str] = (),
                            running: bool = False, server: str | None = None) -> ToolResult:
        """Record a result that no tool transaction recorded (a failure, a workspace or MCP
        call)."""
        if call_id is not None:
            self._publish(await self._write(context, lambda tx: self._record(
                tx, context, call_id, name, result, files_changed=files_changed,
                running=running, server=server)))
        return result

    def _record(self, tx: Tx, context: ToolContext, call_id: str | None, name: str,
                result: ToolResult, *, waited_for: Sequence[str] = (),
                files_changed: Sequence[str] = (), running: bool = False,
                server: str | None = None) -> Recorded:
        """The `tool_result` event of an agent's call (the person's calls have none), and the
        agent back to `running` after a wait; to publish once the transaction commits."""
        if call_id is None:
            return None
        data = tool_result_data(call_id, name, result, waited_for=waited_for,
                                files_changed=files_changed, server=server)
        event_id = tx.events.append(context.thread_id, "tool_result", data)
        if running:
            tx.agents.set_status(context.thread_id, "running")
        return EventAppended(context.thread_id, event_id, "tool_result", data)

    def _publish(self, recorded: Recorded) -> None:
        if recorded is not None:
            self.bus.publish(recorded)


def call_tool(store: Store, context: ToolContext, name: str, arguments: Arguments,
              ) -> ToolResult:
    """Run one call from synchronous code (the command line, scripts) through the one tool
    path, with no runtime in this process: the agents it notifies run when a runtime (`lace
    run --continue`, the app) next looks at the session."""

    async def run() -> ToolResult:
        db = AsyncStore(store)
        try:
            return await ToolRunner(db=db, limits=context.limits).call(context, name, arguments)
        finally:
            db.close()

    return asyncio.run(run())

