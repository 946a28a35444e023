"""The one tool path. Every caller (an agent's turn, the CLI, the app) and every kind of tool
(board, waiting, workspace, MCP, Python) runs through `ToolRunner.call`: resolve and validate,
the approval policy, execute (each kind its own way: `tool_calls`), record the `tool_result`
event, publish it. A call's effects (agents woken, spawned or stopped) are acted on by the
runtime once the write commits (`AsyncStore`'s commit hook), so no caller collects them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lace.config import Budgets, Limits, Policy, Profile, ToolSettings, WorkspaceSettings
from lace.core.assignee import HUMAN
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Agent, Lease
from lace.core.tool_sets import grants, is_mcp_tool
from lace.llm.checks import quick_model_check
from lace.runtime.approvals import Approvals, denied_by_policy
from lace.runtime.board_changes import BoardChanges
from lace.runtime.conversation import Appended, PendingWait, own_tools, tool_result_data
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventBus
from lace.runtime.hook_points import HookPoints
from lace.runtime.isolation import with_committed_work, worktree_of
from lace.runtime.tool_calls import (
    BoardCall,
    Executed,
    PythonCall,
    ServerCall,
    ToolCall,
    WaitingCall,
    WorkspaceCall,
)
from lace.runtime.tracing import NO_TRACING, Tracing
from lace.store import Store, Tx
from lace.store.leases import fenced
from lace.tools.base import (
    BoardCondition,
    CommitWork,
    ModelCheck,
    Progress,
    ToolContext,
    ToolError,
    ToolResult,
    WaitingTool,
    no_model_check,
)
from lace.tools.delegation import settled
from lace.tools.mcp.servers import McpServers
from lace.tools.python_tools import PythonTool, check_python_tools
from lace.tools.registry import ToolRegistry
from lace.tools.workspace import Workspace, WorkspaceTool

POLL_S = 0.5
"""How often a waiting call looks at the board (other processes' commits are not signalled)."""
PROGRESS_S = 5.0
Arguments = str | dict[str, Any] | None
Recorded = Appended | None
T = TypeVar("T")
UNCONFIGURED = ToolSettings()
"""The policy of a runtime with no approvals (each tool's default)."""


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
    python_tools: Mapping[str, PythonTool] = field(default_factory=dict)
    """The person's Python functions (`python_tools([...])`): the root has them all, a helper
    those it was given."""
    waited: dict[str, float] = field(default_factory=dict)
    """Seconds each agent spent waiting on others this turn (not counted as turn time)."""
    progress_every_s: float = PROGRESS_S
    """How often a waiting call tells its `progress` (`ToolContext.progress`) it still waits."""
    hooks: HookPoints | None = None
    """The configured hooks (None when none is): PreToolUse and PostToolUse of every agent's
    calls run here."""
    changes: BoardChanges = field(default_factory=lambda: BoardChanges())
    """Told of every change this process commits; shared by the runners of one runtime
    (`Runtime.offering`), so a call waiting in one hears the changes the others made."""
    tracing: Tracing = NO_TRACING
    """Spans of the runtime's turns, model calls and tool calls (docs/tracing.md)."""

    def __post_init__(self) -> None:
        check_python_tools(self.python_tools, self.registry.names())

    def own_tools(self, agent: Agent) -> list[str]:
        """The tools an agent may call: its own list, and for a root every Python tool."""
        own = own_tools(agent)
        if agent.thread_id == root_of(agent.thread_id):
            own += [name for name in self.python_tools if not grants(own, name)]
        return own

    def context(self, agent: Agent, lease: Lease | None = None,
                worktree: bool = True) -> ToolContext:
        """The tool context of an agent in a turn under `lease`: its identity, its own tools,
        limits and profiles; with no `worktree` of its own (`TurnStart.worktree`), it has
        no work to commit (and no read to find that out)."""
        return self._context(agent.thread_id, root_of(agent.thread_id),
                             tuple(self.own_tools(agent)), lease,
                             functools.partial(with_committed_work, self.db) if worktree else None)

    def human_context(self, session_id: str) -> ToolContext:
        """The tool context of the person (`human`), who may hand out any tool."""
        return self._context(HUMAN, session_id, None, None)

    async def person_context(self, session_id: str) -> ToolContext:
        """`human_context`, with the model of the session's root, which a bare `new:` of the
        person takes: its check then runs before the write too (the first one may import
        litellm, seconds that would hold the write lock)."""
        root = await self.db.read(lambda tx: tx.agents.find(session_id))
        return self.human_context(session_id).with_creator(root)

    def _context(self, thread_id: str, session_id: str, tools: tuple[str, ...] | None,
                 lease: Lease | None, commit_work: CommitWork | None = None) -> ToolContext:
        return ToolContext(thread_id=thread_id, session_id=session_id,
                           check_model=self.check_model, quick_model_check=quick_model_check,
                           profiles=self.profiles, tools=tools,
                           limits=self.limits, budgets=self.budgets, lease=lease,
                           workspace=None if self.workspace is None else self.workspace.folder,
                           workspace_settings=self.workspace_settings,
                           python_tools=tuple(self.python_tools), commit_work=commit_work,
                           wait_until=self.wait_until)

    async def write(self, context: ToolContext, work: Callable[[Tx], T]) -> T:
        """A write for this caller: for an agent, only while its turn's lease holds."""
        return await self.db.write(fenced(context.lease, work))

    def changed(self, tasks: Collection[str] | None = None) -> None:
        """Something on the board changed: let the waiting tools look again (those waiting
        for tasks: when one of `tasks` changed; None: any task may have)."""
        self.changes.changed(tasks)

    def change_signal(self) -> asyncio.Event:
        """The event the next change sets."""
        return self.changes.next

    async def wait_until(self, over: BoardCondition, timeout_s: float,
                         progress: Progress | None = None,
                         tasks: Collection[str] | None = None) -> bool:
        """Wait until `over` holds on the board or `timeout_s` passed: looked at again after
        each change this process commits (when `over` depends only on `tasks`: each change of
        one of them), and every POLL_S for other processes' commits; `progress` is told the
        seconds waited every PROGRESS_S. Whether `over` held."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline, next_report = began + timeout_s, began + self.progress_every_s
        while True:
            with contextlib.ExitStack() as stack:  # watch before looking: no change is missed
                signal = (self.changes.next if tasks is None else
                          stack.enter_context(self.changes.watching(tasks)))
                if await self.db.read(over):
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                if progress is not None and loop.time() >= next_report:
                    next_report = loop.time() + self.progress_every_s
                    await progress(loop.time() - began, timeout_s)
                until_report = max(0.0, next_report - loop.time()) if progress else remaining
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(POLL_S, remaining, until_report)):
                        await signal.wait()

    async def definitions(self, agent: Agent, *, can_spawn: bool) -> list[dict[str, Any]]:
        """The function definitions of an agent's tools: lace's, its Python tools, then those
        of the running MCP servers it may use (the servers are started first, the first
        time); each kind in a fixed order (lace's as registered, the others by name), so the
        tools open every request of a session with the same bytes (a cacheable prefix)."""
        own = self.own_tools(agent)
        python = sorted((tool for name, tool in self.python_tools.items() if grants(own, name)),
                        key=lambda tool: tool.name)
        servers = [] if self.mcp is None else sorted(
            (tool for tool in await self.mcp.ready() if grants(own, tool.name)),
            key=lambda tool: tool.name)
        added = [tool.name for tool in python] + [tool.name for tool in servers]
        return self.registry.definitions(
            own, profiles=list(self.profiles), can_spawn=can_spawn, also_granted=added) + [
            tool.definition() for tool in python] + [tool.definition() for tool in servers]

    async def call(self, context: ToolContext, name: str, arguments: Arguments,
                   call_id: str | None = None) -> ToolResult:
        """Run one call of any kind (`_call`) in its `execute_tool` span."""
        async with self.tracing.tool_call(context, name, call_id, arguments) as span:
            result = await self._call(span.within(context), name, arguments, call_id)
            span.returned(result)
            return result

    async def _call(self, context: ToolContext, name: str, arguments: Arguments,
                    call_id: str | None = None) -> ToolResult:
        """Run one call of any kind. Inside an agent's turn (`call_id` given) the approval
        policy applies and the `tool_result` event is recorded: with the tool's effect for a
        tool that acts on the board, alone otherwise (or when the call failed)."""
        call: ToolCall | None = None
        try:
            call = await self._resolve(context, name, arguments, call_id)
            call.check_arguments()
            policy = "allow" if call_id is None else self._policy(call)  # the person approves
            if self.hooks is not None and call_id is not None:
                again = functools.partial(self._again, context, call, call_id)
                call, policy = await self.hooks.before_tool(context, call, policy, call_id, again)
            await self._approve(context, call, policy)
            executed = await call.execute(self, context, call_id)
        except LaceError as error:
            executed = Executed(ToolResult.failure(error))
        if self.hooks is not None and call_id is not None:
            executed = await self.hooks.after_tool(context, call, executed, call_id)
        recorded = executed.recorded if executed.recorded_with_effect else \
            await self._record_alone(context, call_id, name, executed.result, call,
                                     files_changed=executed.files_changed)
        self._publish(recorded)
        return executed.result

    async def _resolve(self, context: ToolContext, name: str, arguments: Arguments,
                       call_id: str | None) -> ToolCall:
        """The call's tool, which the caller must have, with its arguments validated; a
        waiting or workspace tool is its own kind only in an agent's turn (else its `run`
        says why it cannot run)."""
        if is_mcp_tool(name):
            return await self._resolve_server_tool(context, name, arguments)
        if not self._may_use(context, name):
            raise ToolError(self._unknown(context, name))
        python = self.python_tools.get(name)
        if python is not None:
            return PythonCall(python, python.validated(arguments))
        if name not in self.registry.tools:
            raise ToolError(self._unknown(context, name))
        tool = self.registry.parse(name, arguments)
        if call_id is not None and isinstance(tool, WaitingTool):
            text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            return WaitingCall(tool, text)
        if call_id is not None and isinstance(tool, WorkspaceTool):
            if self.workspace is None:
                raise ToolError(f"{tool.name} needs a workspace, and this runtime has none.")
            return WorkspaceCall(tool, self.workspace,
                                 await worktree_of(self.db, context.thread_id))
        return BoardCall(tool)

    async def _resolve_server_tool(self, context: ToolContext, name: str,
                                   arguments: Arguments) -> ToolCall:
        """An MCP tool: the caller must have it and its server must be running."""
        tool = None if self.mcp is None else await self.mcp.find(name)
        if not self._may_use(context, name):
            raise ToolError(self._unknown(context, name))
        if tool is None or self.mcp is None:
            raise ToolError("No MCP server is configured." if self.mcp is None
                            else self.mcp.unavailable(name))
        return ServerCall(self.mcp, tool, arguments)

    async def _again(self, context: ToolContext, call: ToolCall, call_id: str,
                     arguments: dict[str, Any]) -> tuple[ToolCall, Policy]:
        """`call` with other arguments (a hook's `updatedInput`): the same tool, validated as
        the model's arguments are, and its policy."""
        again = await self._resolve(context, call.name, arguments, call_id)
        again.check_arguments()
        return again, self._policy(again)

    def _policy(self, call: ToolCall) -> Policy:
        """The policy for an agent's call: `[tools.policy]`, else the tool's default (allow,
        but ask for a tool that writes); no database read."""
        settings = UNCONFIGURED if self.approvals is None else self.approvals.settings
        return settings.policy_for(call.name, read_only_hint=call.read_only_hint)

    async def _approve(self, context: ToolContext, call: ToolCall, policy: Policy) -> None:
        """Raise a ToolError unless the call may run: denied, or asked and refused."""
        if policy == "allow":
            return
        if policy == "deny":
            raise ToolError(denied_by_policy(call.name))
        if self.approvals is None:
            raise ToolError(f"{call.name} needs an approval policy, and this runtime has none.")
        denial = await self.approvals.decide(context.thread_id, call.name,
                                             call.shown_arguments, policy, context.lease)
        if denial is not None:
            raise ToolError(denial)

    def _may_use(self, context: ToolContext, name: str) -> bool:
        return context.tools is None or grants(context.tools, name)

    def _unknown(self, context: ToolContext, name: str) -> str:
        """The error for a call of a tool the caller does not have: lace's, Python and MCP
        tools it has are listed."""
        others = [known for known in self.python_tools if self._may_use(context, known)]
        if self.mcp is not None and is_mcp_tool(name):
            others += [known for known in self.mcp.tools if self._may_use(context, known)]
        return self.registry.unknown(name, context.tools, others)

    async def resume(self, context: ToolContext, wait: PendingWait) -> ToolResult:
        """Finish a waiting call persisted before a crash: wait for its tasks, then record its
        answer."""
        tool = self.registry.parse(wait.tool_name, wait.arguments, context.tools)
        assert isinstance(tool, WaitingTool)
        result, recorded = await self.await_tasks(context, tool, wait)
        self._publish(recorded)
        return result

    async def await_tasks(self, context: ToolContext, tool: WaitingTool,
                          wait: PendingWait) -> tuple[ToolResult, Recorded]:
        """Wait for the tasks of a waiting call, then take its answer and record it (with the
        notices of those tasks consumed) in one transaction; to publish."""
        began = time.monotonic()
        await self.wait_until(lambda tx: settled(tx, wait.task_ids),
                              self.limits.delegate_timeout_s, tasks=wait.task_ids)
        self.waited[context.thread_id] = self.waited.get(context.thread_id, 0.0) + \
            time.monotonic() - began

        def finish(tx: Tx) -> tuple[ToolResult, Recorded]:
            tx.inbox.consume_notices(context.thread_id, wait.task_ids)
            result = ToolResult(tool.finish(tx, context, wait.task_ids))
            return result, self.record(tx, context, wait.call_id, wait.tool_name, result,
                                       waited_for=wait.task_ids, running=True)

        return await self.write(context, finish)

    async def _record_alone(self, context: ToolContext, call_id: str | None, name: str,
                            result: ToolResult, call: ToolCall | None, *,
                            files_changed: Sequence[str] = ()) -> Recorded:
        """Record a result that no tool transaction recorded (a failure, a workspace, MCP or
        Python call); to publish."""
        if call_id is None:
            return None
        running = call is not None and call.back_to_running
        server = None if call is None else call.server
        return await self.write(context, lambda tx: self.record(
            tx, context, call_id, name, result, files_changed=files_changed,
            running=running, server=server))

    def record(self, tx: Tx, context: ToolContext, call_id: str | None, name: str,
               result: ToolResult, *, waited_for: Sequence[str] = (),
               files_changed: Sequence[str] = (), running: bool = False,
               server: str | None = None) -> Recorded:
        """The `tool_result` event of an agent's call (the person's calls have none), and the
        agent back to `running` after a wait; to publish once the transaction commits."""
        if call_id is None:
            return None
        data = tool_result_data(call_id, name, result, waited_for=waited_for,
                                files_changed=files_changed, server=server)
        appended = Appended.of(tx, context.thread_id, [("tool_result", data)])
        if running:
            tx.agents.set_status(context.thread_id, "running")
        return appended

    def _publish(self, recorded: Recorded) -> None:
        for event in [] if recorded is None else recorded.events():
            self.bus.publish(event)


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

