"""The kinds of tool call the one tool path runs. A call, once resolved and validated, says what
the approval policy is asked about and how it executes; the path (`ToolRunner.call`) does the
rest the same way for every kind, so hooks and tracing have one place to go."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from lace.core.text import valid_text
from lace.core.worktrees import Worktree
from lace.runtime.conversation import Appended, PendingWait
from lace.runtime.crash import crash_point
from lace.runtime.isolation import workspace_in
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolResult, WaitingTool
from lace.tools.mcp.results import ServerTool
from lace.tools.mcp.servers import McpServers
from lace.tools.python_tools import PythonTool
from lace.tools.registry import decoded_arguments
from lace.tools.workspace import Workspace, WorkspaceTool

if TYPE_CHECKING:
    from lace.runtime.tool_runner import ToolRunner


@dataclass(frozen=True)
class Executed:
    """What a call's execution gave: its result, and either the `tool_result` event its own
    transaction wrote with its effect (`recorded_with_effect`) or what the path records."""

    result: ToolResult
    recorded: Appended | None = None
    recorded_with_effect: bool = False
    files_changed: Sequence[str] = ()


class ToolCall(ABC):
    """One call resolved to its tool, its arguments valid."""

    name: str
    read_only_hint: bool = False
    """Whether the tool says it only reads (an MCP server's may), which the policy heeds."""
    back_to_running: ClassVar[bool] = False
    """Whether recording the result sets the agent back to `running` (after a wait)."""
    server: str | None = None

    def check_arguments(self) -> None:
        """Raise a ToolError the model can act on when the arguments are not valid (most kinds
        validate them as they are resolved; an MCP tool once its server is known, so a
        refusal names the server)."""
        return

    @abstractmethod
    def shown_arguments(self) -> dict[str, Any]:
        """The arguments as the person is shown them when asked to approve the call."""

    @abstractmethod
    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        """Run the call; a LaceError is a tool error the path records."""


class BoardCall(ToolCall):
    """A tool that acts on the board: it runs in one transaction that also records its
    result, so the effect and the `tool_result` event commit together."""

    def __init__(self, tool: Tool) -> None:
        self.tool, self.name = tool, tool.name

    def shown_arguments(self) -> dict[str, Any]:
        return self.tool.model_dump()

    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        tool = await self.tool.prepared(context)

        def run(tx: Tx) -> tuple[ToolResult, Appended | None]:
            answer = tool.run(tx, context)
            text, values = (answer, None) if isinstance(answer, str) else \
                (answer.text, answer.values)
            result = ToolResult(text, values=values,
                                ends_work=call_id is not None and tool.ends_work(tx, context))
            return result, runner.record(tx, context, call_id, self.name, result)

        result, recorded = await runner.write(context, run)
        if call_id is not None:
            crash_point("after_tool_effect")
        return Executed(result, recorded, recorded_with_effect=True)


class WaitingCall(ToolCall):
    """An agent's call that waits for tasks to settle (without holding a model slot): its
    start is recorded as a wait, so a crash resumes it, and its answer when they settled."""

    back_to_running = True

    def __init__(self, tool: WaitingTool, arguments: str) -> None:
        self.tool, self.name, self.arguments = tool, tool.name, arguments

    def shown_arguments(self) -> dict[str, Any]:
        return self.tool.model_dump()

    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        assert call_id is not None, "only an agent's call waits"
        tool = await self.tool.prepared(context)

        def start(tx: Tx) -> list[str]:
            task_ids = tool.start(tx, context)
            tx.events.mark_waiting(context.thread_id, call_id, task_ids)
            tx.agents.set_status(context.thread_id, "waiting")
            return task_ids

        task_ids = await runner.write(context, start)
        wait = PendingWait(call_id, self.name, self.arguments, task_ids)
        result, recorded = await runner.await_tasks(context, tool, wait)
        return Executed(result, recorded, recorded_with_effect=True)


class WorkspaceCall(ToolCall):
    """An agent's call that acts on its workspace (the worktree it works in, if any, read as
    the call was resolved: refused then when a person pruned it), off the database; the result
    is recorded with the files it changed."""

    back_to_running = True

    def __init__(self, tool: WorkspaceTool, workspace: Workspace,
                 worktree: Worktree | None) -> None:
        self.tool, self.name, self.workspace = tool, tool.name, workspace
        self.worktree = worktree

    def shown_arguments(self) -> dict[str, Any]:
        return self.tool.model_dump()

    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        try:
            workspace = await workspace_in(self.workspace, self.worktree)
            performed = await self.tool.perform(workspace)
        except OSError as error:
            return Executed(ToolResult.failure(error))
        return Executed(ToolResult(performed.text, is_error=performed.is_error),
                        files_changed=[valid_text(path) for path in performed.files_changed])


class ServerCall(ToolCall):
    """A call of an MCP server's tool; the server's read-only hint informs the policy."""

    back_to_running = True

    def __init__(self, servers: McpServers, tool: ServerTool, sent: str | dict[str, Any] | None,
                 ) -> None:
        self.servers, self.tool, self.sent = servers, tool, sent
        self.name, self.server = tool.name, tool.server
        self.read_only_hint = tool.read_only
        self.arguments: dict[str, Any] = {}

    def check_arguments(self) -> None:
        self.arguments = decoded_arguments(self.name, self.sent)

    def shown_arguments(self) -> dict[str, Any]:
        return self.arguments

    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        return Executed(await self.servers.call(self.tool, self.arguments))


class PythonCall(ToolCall):
    """A call of one of the person's Python functions (in this process)."""

    def __init__(self, tool: PythonTool, arguments: dict[str, Any]) -> None:
        self.tool, self.name, self.arguments = tool, tool.name, arguments

    def shown_arguments(self) -> dict[str, Any]:
        return self.arguments

    async def execute(self, runner: ToolRunner, context: ToolContext,
                      call_id: str | None) -> Executed:
        return Executed(ToolResult(await self.tool.invoke(self.arguments,
                                                          runner.limits.turn_timeout_s)))
