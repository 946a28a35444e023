"""lace as an ACP agent: an editor's session is a lace session (its `cwd` the workspace), a
prompt is a message to its root, answered once the session is quiet; approvals become
`session/request_permission`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lace.cli.acp_updates import SessionUpdates, arguments_of, text_content, tool_kind
from lace.cli.progress import progress_printer
from lace.config import McpServer, Settings, load_settings
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.version import __version__
from lace.runtime.events import ApprovalRequested, RuntimeEvent, Warned
from lace.runtime.public import GaveUpError, ToolError

if TYPE_CHECKING:
    from acp.interfaces import Client
    from acp.schema import (
        ClientCapabilities,
        InitializeResponse,
        LoadSessionResponse,
        NewSessionResponse,
        PromptResponse,
    )

    from lace.llm.types import ModelClient
    from lace.runtime import Runtime
    from lace.runtime.board import Board
    from lace.runtime.public import Tx

log = logging.getLogger("lace.acp")
PROTOCOL_VERSION = 1
"""The ACP version lace speaks (editors speak 1; `session/prompt` answers when the turn ends)."""
PERMISSION_OPTIONS = {"allow_once": ("Allow once", "approved"),
                      "allow_always": ("Allow for this session", "approved_session"),
                      "reject_once": ("Reject", "denied")}
"""Each option offered on an approval: its name, and the decision it records."""
CANCELLED = "cancelled in the editor"
EDITOR_FILE_TIMEOUT_S = 30.0
"""How long a file tool waits for the editor to read or write a file."""
MAX_PROMPT_CHARACTERS = 1_000_000
"""The longest prompt lace takes from an editor (a pasted file fits; more is refused)."""


def prompt_text(blocks: list[Any]) -> str:
    """The text of a prompt's content blocks: text as is, an embedded text resource or a
    link named by its URI."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(f"[{block.resource.uri}]\n{block.resource.text}")
        elif kind == "resource_link":
            parts.append(f"[{block.uri}]")
    return "\n\n".join(parts)


def client_servers(servers: list[Any] | None, settings: Settings) -> dict[str, McpServer]:
    """The MCP servers an editor passed, as lace's own entries (stdio and HTTP; an SSE one is
    left out with a warning), under names the settings do not already use."""
    chosen: dict[str, McpServer] = {}
    for server in servers or []:
        name = str(server.name)
        if name in settings.mcp_servers or name in chosen:
            log.warning("the editor's MCP server %r is left out: lace's settings name one so",
                        name)
            continue
        if getattr(server, "type", None) == "http":
            chosen[name] = McpServer(url=server.url, headers={
                header.name: header.value for header in server.headers})
        elif hasattr(server, "command"):
            chosen[name] = McpServer(command=server.command, args=list(server.args),
                                     env={variable.name: variable.value
                                          for variable in server.env})
        else:
            log.warning("the editor's MCP server %r is left out: lace speaks stdio and "
                        "streamable HTTP to MCP servers, not SSE", name)
    return chosen


def person_said(tx: Tx, root_id: str) -> tuple[list[Any], dict[int, str]]:
    """The root's events (NotFoundError for no session), and the text of each of the person's
    messages among them, as written."""
    tx.threads.get_session(root_id)
    events = tx.events.of_thread(root_id)
    return events, tx.inbox.texts([event.data["inbox_id"] for event in events
                                   if event.type == "user_message" and "inbox_id" in event.data])


@dataclass
class EditorBuffers:
    """The editor's files as lace's file tools see them (`lace.runtime.public.EditorFiles`):
    `fs/read_text_file` and `fs/write_text_file`, each used only when the editor offered it."""

    conn: Client
    reads: bool
    writes: bool
    session_id: str = ""
    """The session the requests name (set once the session exists)."""

    async def read(self, path: str) -> str:
        """The editor's text of the file at `path` (unsaved changes included)."""
        try:
            answer = await asyncio.wait_for(self.conn.read_text_file(
                session_id=self.session_id, path=path), EDITOR_FILE_TIMEOUT_S)
        except Exception as error:
            raise ToolError(f"The editor could not read {path}: {_why(error)}") from None
        return str(answer.content)

    async def write(self, path: str, content: str) -> None:
        """Have the editor replace the file at `path` with `content`."""
        try:
            await asyncio.wait_for(self.conn.write_text_file(
                session_id=self.session_id, path=path, content=content), EDITOR_FILE_TIMEOUT_S)
        except Exception as error:
            raise ToolError(f"The editor could not write {path}: {_why(error)}") from None


def _why(error: Exception) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {EDITOR_FILE_TIMEOUT_S:g} s"
    return str(error) or type(error).__name__


@dataclass
class EditorSession:
    """One ACP session: a lace session and the runtime that runs it in the editor's folder."""

    runtime: Runtime
    root_id: str
    updates: SessionUpdates
    prompting: asyncio.Task[Any] | None = None
    cancelled: bool = False
    asking: set[asyncio.Task[None]] = field(default_factory=set)
    """The permission requests in flight."""


@dataclass
class LaceAgent:
    """The ACP agent side: answers an editor's requests on the lace board."""

    board: Board
    client: ModelClient
    model: str
    flags: Any
    """The command line (`--yes`, `--read-only`) applied to every session's settings."""
    editor_gone: Callable[[str], object]
    """Called (with why) when the editor leaves too much unread: lace ends its side."""
    stopping: Callable[[], bool] = field(default=lambda: False)
    """Whether a signal asked the process to stop: a runtime's registration stops waiting out
    a server's outage then (it waits in a request's handler, on the event loop, which holds
    the signal's stop back)."""
    conn: Client | None = None
    capabilities: ClientCapabilities | None = None
    sessions: dict[str, EditorSession] = field(default_factory=dict)

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **_: Any) -> InitializeResponse:
        """Protocol version 1; lace loads its sessions, takes text and embedded text in a
        prompt, and uses stdio and HTTP MCP servers the editor gives it."""
        from acp.schema import (
            AgentCapabilities,
            Implementation,
            InitializeResponse,
            McpCapabilities,
            PromptCapabilities,
        )

        self.capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=False, audio=False,
                                                       embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=False)),
            agent_info=Implementation(name="lace", title="lace", version=__version__),
            auth_methods=[])

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None,
                          **_: Any) -> NewSessionResponse:
        """A new lace session working in `cwd`."""
        from acp.schema import NewSessionResponse

        buffers = self._buffers()
        runtime = self._runtime(cwd, mcp_servers, buffers)
        try:
            root = await runtime.open_empty_session(f"editor session in {Path(cwd).name}",
                                                    self.model)
        except BaseException:
            await self._close_runtime(runtime)
            raise
        buffers.session_id = root.id
        self._serve(runtime, root.id)
        return NewSessionResponse(session_id=root.id)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           **_: Any) -> LoadSessionResponse:
        """Continue a lace session in `cwd`: its conversation is replayed to the editor."""
        from acp import RequestError
        from acp.schema import LoadSessionResponse

        if session_id in self.sessions:
            raise RequestError.invalid_params({"sessionId": "this session is open already"})
        runtime = self._runtime(cwd, mcp_servers, self._buffers(session_id))
        try:
            events, asked = await runtime.read(lambda tx: person_said(tx, session_id))
        except LaceError as error:
            await self._close_runtime(runtime)
            raise RequestError.resource_not_found(session_id) from error
        session = self._serve(runtime, session_id)
        await self._replay(session, events, asked)
        await runtime.resume(session_id)
        return LoadSessionResponse()

    async def _replay(self, session: EditorSession, events: list[Any],
                      asked: dict[int, str]) -> None:
        """The root's conversation as the editor first saw it: the person's prompts and the
        root's answers."""
        from acp import update_user_message_text

        answering = False  # a reply to the last prompt was replayed: the next after a blank line
        for event in events:
            message = event.data.get("message") or {}
            if event.type == "user_message" and event.data.get("inbox_id") in asked:
                await session.updates.deliver(
                    update_user_message_text(asked[event.data["inbox_id"]]))
                answering = False
            elif event.type == "agent_message" and message.get("content"):
                text = ("\n\n" if answering else "") + str(message["content"])
                await session.updates.deliver(session.updates.message(text))
                answering = True
        await session.updates.settled()

    def _buffers(self, session_id: str = "") -> EditorBuffers:
        """The editor's files, as far as it offered them at `initialize`."""
        assert self.conn is not None
        fs = getattr(self.capabilities, "fs", None)
        return EditorBuffers(self.conn, reads=bool(getattr(fs, "read_text_file", False)),
                             writes=bool(getattr(fs, "write_text_file", False)),
                             session_id=session_id)

    def _runtime(self, cwd: str, mcp_servers: list[Any] | None,
                 buffers: EditorBuffers) -> Runtime:
        """A runtime whose agents work in `cwd`, with the workspace's settings (its trusted
        `lace.toml`) and the editor's MCP servers."""
        from acp import RequestError

        from lace.cli.invocation import with_tool_flags
        from lace.llm.checks import check_model
        from lace.runtime import open_runtime

        folder = Path(cwd)
        if not folder.is_absolute() or not folder.is_dir():
            raise RequestError.invalid_params({"cwd": "must be the absolute path of a folder"})
        try:
            settings = with_tool_flags(load_settings(check_model=check_model,
                                                     workspace=folder.resolve()), self.flags)
            servers = {**settings.mcp_servers, **client_servers(mcp_servers, settings)}
            settings = settings.model_copy(update={"mcp_servers": servers})
            editor = buffers if buffers.reads or buffers.writes else None
            return open_runtime(self.board.store, settings, self.client,
                                check_model=check_model, workspace=folder.resolve(),
                                editor=editor, stopping=self.stopping)
        except LaceError as error:
            raise RequestError.invalid_params({"cwd": str(error)}) from None
        except GaveUpError:  # stopped waiting for the server, as the signal asked
            raise asyncio.CancelledError from None

    def _serve(self, runtime: Runtime, root_id: str) -> EditorSession:
        assert self.conn is not None
        updates = SessionUpdates(runtime, root_id, self.conn, self.editor_gone)
        session = EditorSession(runtime, root_id, updates)
        self.sessions[root_id] = session
        runtime.subscribe(progress_printer(root_reported=True))
        runtime.subscribe(lambda event: self._heard(session, event))
        updates.start()
        return session

    def _heard(self, session: EditorSession, event: RuntimeEvent) -> None:
        if isinstance(event, ApprovalRequested) and root_of(event.thread_id) == session.root_id:
            asking = asyncio.create_task(self._ask(session, event))
            session.asking.add(asking)
            asking.add_done_callback(session.asking.discard)
        elif isinstance(event, Warned):
            log.warning("%s", event.text)

    async def _ask(self, session: EditorSession, event: ApprovalRequested) -> None:
        """Ask the editor about an approval and record its answer (none, or an error: denied)."""
        from acp.schema import PermissionOption, ToolCallUpdate

        assert self.conn is not None
        call_id = session.updates.call_waiting(event.thread_id, event.tool) \
            if event.thread_id == session.root_id else None
        where = "" if event.thread_id == session.root_id else f" (helper {event.thread_id})"
        call = ToolCallUpdate(
            tool_call_id=call_id or f"approval:{event.approval_id}",
            title=f"{event.tool}{where}", kind=tool_kind(event.tool), status="pending",
            raw_input=arguments_of(event.arguments),
            content=[text_content(f"{event.thread_id} wants to run {event.tool} with "
                                  f"{arguments_of(event.arguments)}")])
        options = [PermissionOption(option_id=option, name=name, kind=option)  # type: ignore[arg-type]
                   for option, (name, _) in PERMISSION_OPTIONS.items()]
        decision = "denied"
        try:
            answer = await self.conn.request_permission(session_id=session.root_id,
                                                        tool_call=call, options=options)
            chosen = getattr(answer.outcome, "option_id", None)
            decision = PERMISSION_OPTIONS.get(str(chosen), ("", "denied"))[1]
        except asyncio.CancelledError:  # the prompt was cancelled: the call does not run
            decision = "denied"
        except Exception as error:  # a client that fails to answer has not allowed it
            log.warning("approval #%s: the editor did not answer (%s); denied",
                        event.approval_id, error)
        with contextlib.suppress(LaceError):  # decided meanwhile (a timeout, `lace deny`)
            await session.runtime.decide(event.approval_id, decision)

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        """Send the prompt to the session's root and answer once the session is quiet."""
        from acp import RequestError
        from acp.schema import PromptResponse

        session = self._session(session_id)
        if session.prompting is not None:
            raise RequestError.invalid_request({"sessionId": "a prompt is running already"})
        text = prompt_text(prompt)
        if not text.strip() or len(text) > MAX_PROMPT_CHARACTERS:
            raise RequestError.invalid_params({"prompt": (
                f"give some text, at most {MAX_PROMPT_CHARACTERS:,} characters")})
        session.cancelled = False
        session.prompting = asyncio.current_task()
        runtime = session.runtime
        session.updates.new_prompt()
        try:
            await runtime.send(session.root_id, text)
            await runtime.resume_agent(session.root_id)  # stopped by a cancel: goes on
            await runtime.run_until_quiet(session.root_id)
            if session.cancelled:
                await session.updates.fail_open_helpers(CANCELLED)
            await session.updates.settled()
        finally:
            session.prompting = None
        return PromptResponse(stop_reason="cancelled" if session.cancelled else "end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        """Stop the session's running turn and its helpers; the prompt answers `cancelled`."""
        session = self.sessions.get(session_id)
        if session is None or session.prompting is None:
            return
        session.cancelled = True
        for asking in list(session.asking):
            asking.cancel()
        await session.runtime.stop_agent(session.root_id, CANCELLED, by_person=True)

    def _session(self, session_id: str) -> EditorSession:
        from acp import RequestError

        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        return session

    async def close(self) -> None:
        """Stop every session's turns (marked interrupted: resumable) and its MCP servers."""
        for session in self.sessions.values():
            await session.updates.close()
            await self._close_runtime(session.runtime)
        self.sessions.clear()

    @staticmethod
    async def _close_runtime(runtime: Runtime) -> None:
        try:
            await runtime.stop()
        finally:
            runtime.close()
