"""The board as an MCP server (the SDK's low-level `Server`): the task tools and the person's
tools of one session, each call made as `human` through the one tool path, and the board and
its threads as resources. The low-level server, not `MCPServer`, because `MCPServer` derives a
tool's schema from a Python signature and words its own validation errors, and a client's model
must see the agents' schemas and errors."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.secrets import mask, mask_data
from lace.core.version import __version__
from lace.paths import credential_values
from lace.runtime import Runtime
from lace.runtime.events import EventAppended, RuntimeEvent, TasksChanged, ThreadSpawned
from lace.runtime.public import Arguments, ToolError, ToolResult, Tx
from lace.runtime.served import served_tools, session_thread
from lace.runtime.sessions import start_session_for

BOARD_URI = "lace://board"
THREAD_PREFIX = "lace://thread/"
RESOURCE_EVENTS = 500
"""The most events a thread resource holds (the newest); `lace show` prints them all."""
READ_ONLY = frozenset({"task_list", "task_view", "task_wait", "threads_list", "thread_read"})
NO_SESSION = ("No session yet: create a task with task_create to start one (or start lace "
              "mcp serve with --session ID).")
INSTRUCTIONS = (
    "lace is a task board for LLM agents. You act on it as the person ('human'). Create tasks "
    "with task_create; a task assigned to new:provider/model spawns an agent that works on it "
    "in the lace server's process. Wait for results with task_wait, follow the agents with "
    "threads_list and thread_read, stop one with agent_stop.")
Context = ServerRequestContext[Any, Any]
Progress = Callable[[float, float, str], Awaitable[None]]
"""Reports a waiting call's progress: seconds waited, the most it waits, a message."""


def served(text: str) -> str:
    """Text as it leaves the server: credential values masked."""
    return mask(text, credential_values())


class BoardServer:
    """One session's board served over MCP, on the runtime of this process."""

    def __init__(self, runtime: Runtime, session_id: str | None) -> None:
        self.runtime, self.session_id = runtime, session_id
        self.runner = served_tools(runtime)
        self.updates = InMemorySubscriptionBus()
        self._starting = asyncio.Lock()
        self._sending: set[asyncio.Task[None]] = set()
        self._subscribed: dict[str, set[ServerSession]] = {}
        runtime.subscribe(self._announce)
        self.server: Server[Any] = Server(
            "lace", version=__version__, title="lace task board", instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource, on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=ListenHandler(self.updates))

    # tools

    async def _list_tools(self, _context: Context,
                          _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tool_list())

    def tool_list(self) -> list[types.Tool]:
        """The served tools with the agents' schemas and descriptions."""
        return [types.Tool(name=definition["function"]["name"],
                           description=definition["function"]["description"],
                           input_schema=definition["function"]["parameters"],
                           annotations=types.ToolAnnotations(
                               read_only_hint=definition["function"]["name"] in READ_ONLY))
                for definition in self.runner.registry.definitions()]

    async def _call_tool(self, context: Context,
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        token = (context.meta or {}).get("progress_token")

        async def progress(done: float, total: float, message: str) -> None:
            assert token is not None
            with contextlib.suppress(Exception):  # a client gone is told nothing
                await context.session.send_progress_notification(
                    token, done, total, message, related_request_id=str(context.request_id))

        result = await self.call(params.name, params.arguments or {},
                                 None if token is None else progress)
        return types.CallToolResult(content=[types.TextContent(text=served(result.text))],
                                    is_error=result.is_error)

    async def call(self, name: str, arguments: Arguments,
                   progress: Progress | None = None) -> ToolResult:
        """One call as the person: a tool error (the text an agent would get) when it fails.
        A waiting call reports `progress` now and then (clients that time calls out reset
        their clock on it)."""
        try:
            session_id = await self._session_for(name, arguments)
        except LaceError as error:
            return ToolResult.failure(error)

        async def report(waited: float, most: float) -> None:
            if progress is not None:
                await progress(waited, most, f"waited {waited:.0f} s")

        context = dataclasses.replace(await self.runner.person_context(session_id),
                                      progress=report)
        return await self.runner.call(context, name, arguments)

    async def _session_for(self, name: str, arguments: Arguments) -> str:
        """The served session; the first task_create starts one when there is none."""
        if self.session_id is not None:
            return self.session_id
        if name != "task_create":
            self.runner.registry.parse(name, arguments)  # the call's own error comes first
            raise ToolError(NO_SESSION)
        async with self._starting:
            if self.session_id is None:
                self.session_id = await asyncio.to_thread(
                    start_session_for, self.runtime.store, arguments,
                    self.runner.human_context(""), self.runtime.settings.model)
                self.runtime.serve_session(self.session_id)
            return self.session_id

    # resources

    async def _list_resources(self, _context: Context, _params: types.PaginatedRequestParams |
                              None) -> types.ListResourcesResult:
        board = types.Resource(uri=BOARD_URI, name="board", mime_type="application/json",
                               description="The session's tasks, closed ones too.")
        threads = [] if self.session_id is None else await self.runtime.read(
            lambda tx: tx.threads.of_session(str(self.session_id)))
        return types.ListResourcesResult(resources=[board, *(
            types.Resource(uri=f"{THREAD_PREFIX}{thread.id}", name=thread.id,
                           title=thread.title, mime_type="application/json")
            for thread in threads)])

    async def _list_templates(self, _context: Context, _params: types.PaginatedRequestParams |
                              None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            uri_template=f"{THREAD_PREFIX}{{thread_id}}", name="thread",
            mime_type="application/json",
            description="A thread's agent and conversation (its newest 500 events).")])

    async def _read_resource(self, _context: Context, params: types.ReadResourceRequestParams
                             ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            if uri == BOARD_URI:
                value = await self.runtime.read(self._board)
            elif uri.startswith(THREAD_PREFIX):
                thread_id = uri.removeprefix(THREAD_PREFIX)
                value = await self.runtime.read(lambda tx: self._thread(tx, thread_id))
            else:
                raise ToolError(f"Unknown resource {uri!r}: lace serves {BOARD_URI} and "
                                f"{THREAD_PREFIX}{{thread_id}}.")
        except LaceError as error:
            raise MCPError(code=types.INVALID_PARAMS, message=served(str(error))) from None
        text = json.dumps(mask_data(value, credential_values()), ensure_ascii=False, default=str)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, text=text, mime_type="application/json")])

    def _board(self, tx: Tx) -> dict[str, Any]:
        if self.session_id is None:
            return {"session": None, "tasks": []}
        tasks, _ = tx.tasks.query(self.session_id, include_closed=True)
        tasks = tx.edges.attach(tasks, self.session_id)  # what each waits for and blocks
        return {"session": self.session_id, "tasks": [asdict(task) for task in tasks]}

    def _thread(self, tx: Tx, thread_id: str) -> dict[str, Any]:
        if self.session_id is None:
            raise ToolError(NO_SESSION)
        thread = session_thread(tx, self.runner.human_context(self.session_id), thread_id)
        agent = tx.agents.find(thread.id)
        events, earlier = tx.events.latest(thread.id, RESOURCE_EVENTS)
        return {"thread": asdict(thread), "agent": asdict(agent) if agent else None,
                "earlier_events": earlier, "events": [asdict(event) for event in events]}

    # change notifications

    def _announce(self, event: RuntimeEvent) -> None:
        """Tell listening clients which resources of the session a runtime event changed."""
        if self.session_id is None:
            return
        uris = []
        if isinstance(event, TasksChanged | ThreadSpawned):
            uris.append(BOARD_URI)
        if isinstance(event, EventAppended | ThreadSpawned) and \
                root_of(event.thread_id) == self.session_id:
            uris.append(f"{THREAD_PREFIX}{event.thread_id}")
        for uri in uris:
            sending = asyncio.get_running_loop().create_task(self._send_update(uri))
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)

    async def _send_update(self, uri: str) -> None:
        """`notifications/resources/updated` for `uri`: on the listen streams of clients of
        the 2026 protocol, and to each earlier client that subscribed to it."""
        await self.updates.publish(ResourceUpdated(uri=uri))
        for session in list(self._subscribed.get(uri, ())):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # the client has gone: forget it
                self._subscribed[uri].discard(session)

    async def _subscribe(self, context: Context,
                         params: types.SubscribeRequestParams) -> types.EmptyResult:
        self._subscribed.setdefault(str(params.uri), set()).add(context.session)
        return types.EmptyResult()

    async def _unsubscribe(self, context: Context,
                           params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self._subscribed.get(str(params.uri), set()).discard(context.session)
        return types.EmptyResult()
