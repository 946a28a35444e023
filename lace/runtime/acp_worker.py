"""A turn of an external ACP agent (a task assigned to `acp:NAME`): lace starts the command of
`[acp_agents.NAME]` in the workspace, sends the turn's inbox (the task notification) as the
prompt, records the agent's updates as the thread's events, answers its permission requests
through lace's approvals (within the tools its thread was given) and its `fs/*` requests within
the workspace's rules, and completes the task with its final text; any other end fails it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lace.config import AcpAgent
from lace.core.assignee import ACP_PROVIDER
from lace.core.secrets import mask
from lace.core.tool_sets import grants
from lace.llm.types import ModelError
from lace.paths import credential_values
from lace.runtime.acp_stdio import AgentStdio
from lace.runtime.conversation import Appended, TurnStart, tool_result_data
from lace.runtime.events import TurnEnded, TurnStarted
from lace.runtime.isolation import with_committed_work, workspace_of
from lace.runtime.turn_end import end_turn, open_task_of
from lace.store import Tx
from lace.store.leases import fenced
from lace.tools.base import ModelCheck, ToolError, ToolResult
from lace.tools.mcp.stderr_log import StderrLog
from lace.tools.process_groups import kept, signal_group, track_group, untrack_group
from lace.tools.workspace import Workspace, off_loop
from lace.tools.workspace_paths import open_regular, replace_file
from lace.tools.worktrees import NoWorkspace

if TYPE_CHECKING:
    from acp.interfaces import Client

    from lace.runtime.turns import TurnRunner

START_TIMEOUT_S = 60.0
"""How long an ACP agent may take to start and open its session."""
MAX_RECORDED_UPDATES = 500
"""Tool calls and their updates recorded per turn; later ones are counted, not recorded (an
agent that floods updates cannot fill the database)."""
MAX_TEXT_CHARACTERS = 200_000
"""The longest answer kept of one turn; the rest is counted."""
GRACE_S = 2.0
"""How long an agent has to end after its stdin closes, then after SIGTERM."""
MAX_FILE_BYTES = 8 * 2**20
"""The largest file an ACP agent may read through lace."""
LACE_TOOL_OF_KIND = {"read": "file_read", "search": "file_read", "think": "file_read",
                     "edit": "file_write", "delete": "file_write", "move": "file_write"}
"""The lace tool whose powers and policy an ACP tool call of each kind needs; any other kind
(execute, fetch, other, none given) needs `bash`'s."""


def acp_checked(check: ModelCheck, agents: Mapping[str, AcpAgent]) -> ModelCheck:
    """`check` for models, and for `acp:NAME`: NAME must be configured in `[acp_agents]`."""

    def checked(provider: str, model: str) -> str | None:
        if provider != ACP_PROVIDER:
            return check(provider, model)
        if model in agents:
            return None
        known = ", ".join(sorted(agents)) or "none is configured"
        return (f"No ACP agent {model!r} in [acp_agents] (configured: {known}; a project's "
                "lace.toml counts once the folder is trusted)")

    return checked


async def ended(process: Any, group: int) -> None:
    """End the agent: its stdin closed, then SIGTERM to its group after GRACE_S, SIGKILL after
    GRACE_S more (the SDK's own end waits for its pipes, which an agent that ignores the end of
    its stdin keeps open, below the keeper, for ever)."""
    with contextlib.suppress(Exception):
        process.stdin.close()
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), GRACE_S)
            return
        except TimeoutError:
            signal_group(group, signal_number)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.wait()), GRACE_S)


def refused(why: str) -> Exception:
    """The JSON-RPC error an ACP agent gets for a file request lace refuses, saying why."""
    from acp import RequestError

    return RequestError(-32602, f"Invalid params: {why}", {"reason": why})


@dataclass
class WorkerClient:
    """The ACP client lace is to the agent it started: every request goes to its turn, a
    file's read once no other file's answer is held."""

    turn: AcpTurn
    stdio: AgentStdio

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        await self.turn.heard(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **_: Any) -> Any:
        return await self.turn.permission(tool_call, options)

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **_: Any) -> Any:
        await self.stdio.one_file_at_a_time()
        return await self.turn.read_file(path, line, limit)

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **_: Any) -> Any:
        return await self.turn.write_file(path, content)


@dataclass
class AcpTurn:
    """One turn of an `acp:NAME` agent."""

    runner: TurnRunner
    start: TurnStart
    config: AcpAgent | None
    workspace: Workspace | None = None
    """Where it works: the session's workspace, or its own worktree (`isolation`)."""
    text: list[str] = field(default_factory=list)
    text_size: int = 0
    recorded: int = 0
    dropped: int = 0

    @property
    def thread_id(self) -> str:
        return self.start.agent.thread_id

    @property
    def name(self) -> str:
        return self.start.agent.model

    async def run(self) -> str:
        """Start the agent, prompt it, record what it does; the answer, or ModelError."""
        runner, thread_id = self.runner, self.thread_id
        runner.bus.publish(TurnStarted(thread_id))
        for event in self.start.appended.events():
            runner.bus.publish(event)
        base = runner.tools.workspace
        if self.config is None or base is None:
            raise ModelError(f"ACP agent {self.name!r} cannot run here: " + (
                "[acp_agents] does not name it" if self.config is None else
                "this process has no workspace"), transient=False)
        try:
            self.workspace = await workspace_of(runner.db, base, thread_id)  # its worktree
        except NoWorkspace as error:  # never the creator's or the person's in its place
            raise ModelError(f"ACP agent {self.name!r} cannot run: {error}",
                             transient=False) from None
        # the SDK's schema takes a second or more to import: never on the event loop
        await asyncio.to_thread(importlib.import_module, "acp")
        stop_reason = await self._prompted(self.config, self.workspace.folder)
        if stop_reason != "end_turn":
            raise ModelError(f"ACP agent {self.name!r} ended its turn with {stop_reason!r}",
                             transient=False)
        final = "".join(self.text).strip() or "(no answer)"
        if self.text_size > MAX_TEXT_CHARACTERS or self.dropped:
            final += (f"\n[lace: {self.text_size:,} characters of answer, "
                      f"{self.dropped:,} updates not recorded]")
        task_id = self.start.agent.current_task
        if task_id is not None:  # its worktree's work committed on its branch, and named
            final = await with_committed_work(runner.db, thread_id, task_id, final)
        appended = await self._write(lambda tx: self._finish(tx, final))
        for event in appended.events():  # once committed: an undone attempt publishes none
            runner.bus.publish(event)
        runner.tools.changed()
        runner.bus.publish(TurnEnded(thread_id, final))
        return final

    def _finish(self, tx: Tx, final: str) -> Appended:
        """Record the answer, complete its task and end the turn; the answer's row, to
        publish once the transaction committed."""
        appended = Appended.of(tx, self.thread_id, [
            ("agent_message", {"message": {"role": "assistant", "content": final}})])
        task = open_task_of(tx, tx.agents.get(self.thread_id))
        if task is not None:
            tx.board.complete_task(task.id, session_id=task.thread_id, actor=self.thread_id,
                                   message=final)
        end_turn(tx, self.thread_id, final)
        return appended

    def _prompt(self) -> str:
        return "\n\n".join(str((data.get("message") or {}).get("content") or "")
                           for type, data in self.start.appended.rows
                           if type in ("notification", "user_message"))

    async def _prompted(self, config: AcpAgent, folder: Path) -> str:
        """Run the agent through one prompt; its stop reason (ModelError when it fails)."""
        from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, text_block
        from acp.schema import ClientCapabilities, FileSystemCapabilities
        from acp.transports import spawn_stdio_transport

        capabilities = ClientCapabilities(fs=FileSystemCapabilities(
            read_text_file=True, write_text_file=True), terminal=False)
        path = (config.env.get("PATH") or os.environ.get("PATH")) if "/" not in \
            config.command else None
        if shutil.which(config.command, path=path) is None:
            raise ModelError(f"could not start ACP agent {self.name!r} ({config.command}): "
                             "no such command", transient=False)
        stderr = StderrLog(self.name, folder="acp-logs")  # rotated, at most 10 MB an agent
        group: int | None = None
        try:
            # WorkerClient has the methods lace answers; the SDK answers the others "Method
            # not found" (its Client protocol lists every method, terminals included). The
            # agent runs under lace's keeper, in a process group of its own that ends with
            # lace, even when lace is killed.
            async with spawn_stdio_transport(
                    *kept([config.command, *config.args]), env=config.env, cwd=folder,
                    stderr=cast("int", stderr.writer)) as (out, into, process):
                group = process.pid  # the keeper leads its own session: its pid names it
                track_group(group)
                stderr.started()
                stdio = AgentStdio(out, into, lambda: signal_group(group, signal.SIGKILL),
                                   self.runner.limits.stall_timeout_s)
                conn = connect_to_agent(cast("Client", WorkerClient(self, stdio)), stdio)
                try:
                    await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION,
                                                           client_capabilities=capabilities),
                                           START_TIMEOUT_S)
                    session = await asyncio.wait_for(
                        conn.new_session(cwd=str(folder), mcp_servers=[]), START_TIMEOUT_S)
                    try:
                        answer = await asyncio.wait_for(conn.prompt(
                            session_id=session.session_id,
                            prompt=[text_block(self._prompt())]),
                            self.runner.limits.turn_timeout_s)
                    except asyncio.CancelledError:  # stopped: tell the agent first
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(conn.cancel(session_id=session.session_id),
                                                   1)
                        raise
                    return str(answer.stop_reason)
                except (RequestError, ConnectionError):
                    if stdio.failure is not None:
                        raise ModelError(f"ACP agent {self.name!r} {stdio.failure}",
                                         transient=False) from None
                    raise
                finally:
                    try:
                        await ended(process, group)
                    finally:  # cancelled again meanwhile: the SDK's handlers still end
                        await conn.close()
        except TimeoutError:  # before OSError, of which it is a kind
            raise ModelError(f"ACP agent {self.name!r} did not answer in time",
                             transient=False) from None
        except (RequestError, ConnectionError) as error:  # ConnectionError: an OSError too
            raise ModelError(f"ACP agent {self.name!r} failed: {error or 'it exited'}",
                             transient=False) from None
        except OSError as error:
            why = error.strerror or str(error) or type(error).__name__
            raise ModelError(f"could not start ACP agent {self.name!r} ({config.command}): "
                             f"{why}", transient=False) from None
        finally:
            stderr.started()
            if group is not None:  # the SDK ended the keeper; what is left of its group too
                signal_group(group, signal.SIGKILL)
                untrack_group(group)

    async def _write(self, work: Any) -> Any:
        return await self.runner.db.write(fenced(self.start.lease, work))

    # what the agent sends

    async def heard(self, update: Any) -> None:
        """Keep its text; record its tool calls and their ends as the thread's events."""
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk":
            text = str(getattr(update.content, "text", ""))
            if self.text_size < MAX_TEXT_CHARACTERS:
                self.text.append(text[:MAX_TEXT_CHARACTERS - self.text_size])
            self.text_size += len(text)
            return
        if kind not in ("tool_call", "tool_call_update"):
            return
        if self.recorded >= MAX_RECORDED_UPDATES:
            self.dropped += 1
            return
        self.recorded += 1
        call_id = f"acp_{str(update.tool_call_id)[:100]}"
        name = f"acp:{str(update.title or update.kind or 'tool')[:100]}"
        if kind == "tool_call":
            data = {"call_id": call_id, "tool_name": name, "arguments": mask(
                json.dumps(update.raw_input, default=str)[:10_000], credential_values())}
            await self._append("tool_call", data)
        elif update.status in ("completed", "failed"):
            said = json.dumps([block.model_dump(mode="json", exclude_none=True)
                               for block in update.content or []])[:10_000]
            result = ToolResult(mask(said, credential_values()),
                                is_error=update.status == "failed")
            await self._append("tool_result", tool_result_data(call_id, name, result))

    async def _append(self, type: str, data: dict[str, Any]) -> None:
        appended = await self._write(lambda tx: Appended.of(tx, self.thread_id, [(type, data)]))
        for event in appended.events():
            self.runner.bus.publish(event)

    async def permission(self, tool_call: Any, options: list[Any]) -> Any:
        """Allowed when its thread has the lace tool the call's kind needs and lace's policy
        (or the person) allows it; else rejected."""
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        tool = LACE_TOOL_OF_KIND.get(str(tool_call.kind), "bash")
        arguments = {"acp_agent": self.name, "title": str(tool_call.title or "")[:500],
                     "kind": str(tool_call.kind), "input": tool_call.raw_input}
        allowed = await self._allowed(tool, arguments)
        wanted = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        for kind in wanted:
            for option in options:
                if option.kind == kind:
                    return RequestPermissionResponse(outcome=AllowedOutcome(
                        outcome="selected", option_id=option.option_id))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def _may_use(self, tool: str) -> bool:
        """Whether the agent's thread has `tool`, and its `[acp_agents]` entry grants it."""
        granted = self.config.tools if self.config is not None else []
        return grants(self.runner.tools.own_tools(self.start.agent), tool) and (
            granted is None or grants(granted, tool))

    async def _allowed(self, tool: str, arguments: dict[str, Any]) -> bool:
        approvals = self.runner.tools.approvals
        if not self._may_use(tool) or approvals is None:
            return False
        shown = json.loads(mask(json.dumps(arguments, default=str), credential_values()))
        return await approvals.check(self.thread_id, tool, shown, self.start.lease) is None

    async def read_file(self, path: str, line: int | None, limit: int | None) -> Any:
        """A file of the workspace, read as `file_read` may read it."""
        from acp.schema import ReadTextFileResponse

        workspace = self._workspace("file_read")
        relative = self._relative(workspace, path)

        def read() -> str:
            with workspace.reading(relative) as place:
                fd, info = open_regular(place, relative)
                with os.fdopen(fd, "rb") as stream:
                    if info.st_size > MAX_FILE_BYTES:
                        raise ToolError(f"{path} is over {MAX_FILE_BYTES:,} bytes")
                    return stream.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")

        text = await self._file_work(read)
        if line is not None or limit is not None:
            first = max(1, line or 1) - 1
            lines = text.splitlines(keepends=True)
            text = "".join(lines[first:None if limit is None else first + max(0, limit)])
        return ReadTextFileResponse(content=text)

    async def write_file(self, path: str, content: str) -> Any:
        """Write a file of the workspace as `file_write` may, under its policy."""
        from acp.schema import WriteTextFileResponse

        workspace = self._workspace("file_write")
        relative = self._relative(workspace, path)
        if not await self._allowed("file_write", {"path": relative,
                                                  "content": content[:2000]}):
            raise refused(f"writing {path} was not allowed")

        def write() -> None:
            with workspace.writing(relative) as place:
                replace_file(place, content.encode("utf-8", errors="replace"), relative)

        await self._file_work(write)
        return WriteTextFileResponse()

    def _workspace(self, tool: str) -> Workspace:

        workspace = self.workspace
        if workspace is None or not self._may_use(tool):
            raise refused(f"this agent may not use {tool}")
        return workspace

    @staticmethod
    def _relative(workspace: Workspace, path: str) -> str:

        try:
            relative = Path(path).relative_to(workspace.folder.resolve())
        except ValueError:
            raise refused(f"{path} is not an absolute path inside the workspace") from None
        return str(relative)

    @staticmethod
    async def _file_work(work: Any) -> Any:

        try:
            return await off_loop(work)
        except ToolError as error:
            raise refused(str(error)) from None
