"""What an editor is shown of a lace session over ACP: the runtime's past-tense events turned
into `session/update` notifications (the root's text, its tool calls, one tool call per helper,
the board's tasks as a plan), sent in order by one pump. What waits for an editor that is slow
to read is bounded: the root's text coalesced into one chunk, one look at the plan, and at most
MAX_HELD_BYTES in all (an editor that leaves more unread is gone)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lace.core.ids import root_of
from lace.core.secrets import mask
from lace.paths import credential_values
from lace.runtime.events import (
    EventAppended,
    RuntimeEvent,
    TasksChanged,
    TextStreamed,
    ThreadSpawned,
    TurnEnded,
    TurnFailed,
)

if TYPE_CHECKING:
    from acp.interfaces import Client
    from acp.schema import PlanEntry, ToolCallProgress, ToolCallStart

    from lace.core.records import Task
    from lace.runtime import Runtime

log = logging.getLogger("lace.acp")
TOOL_KINDS = {"file_read": "read", "file_list": "read", "file_search": "search",
              "file_write": "edit", "file_edit": "edit", "bash": "execute"}
"""The ACP kind of each lace tool that has one (an editor picks its icon); others: `other`."""
PLAN_STATUS = {"pending": "pending", "in_progress": "in_progress", "blocked": "pending",
               "completed": "completed", "archived": "completed"}
SHOWN_CHARACTERS = 4000
"""How much of one tool result an editor is shown (the whole result is in `lace show`)."""
BROKE_OFF = "\n[lace: the reply broke off; the model is asked again]"
"""After the part of the root's reply a failed model call had streamed (`_restarted`)."""
MAX_HELD_BYTES = 16 * 2**20
"""What lace holds at most for one session's editor, not yet written: sixteen replies at
lace's cap of 1,000,000 characters. A model streams a few kilobytes a second and an editor
that reads takes them as they come, so only one that stopped reading comes near it."""
HELD_ITEM_BYTES = 1024
"""What one queued update counts for besides its text or JSON (the objects that hold it)."""


def tool_kind(tool: str) -> Any:
    """The ACP tool kind of a lace tool."""
    return TOOL_KINDS.get(tool, "other")


def helper_call_id(thread_id: str) -> str:
    """The id of the tool call that stands for a helper in the editor."""
    return f"helper:{thread_id}"


def arguments_of(text: Any) -> Any:
    """A tool call's arguments as JSON when they are JSON, else as sent (masked)."""
    if isinstance(text, str):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(mask(text, credential_values()))
        return mask(text, credential_values())
    return text


def text_content(text: str) -> Any:
    """One text block as a tool call's content, cut to SHOWN_CHARACTERS."""
    from acp import text_block, tool_content

    cut = text if len(text) <= SHOWN_CHARACTERS else \
        text[:SHOWN_CHARACTERS] + f"… [{len(text) - SHOWN_CHARACTERS:,} more characters]"
    return tool_content(text_block(mask(cut, credential_values())))


@dataclass
class Helper:
    """A helper as the editor sees it: its tool call and the task it works."""

    thread_id: str
    task_id: str | None
    status: str = "in_progress"


@dataclass
class Text:
    """The root's text waiting for the editor: the chunks that came while it was not taken,
    sent as one."""

    parts: list[str]


@dataclass
class Held:
    """One thing waiting for the pump: an update, a `Text`, a callable that makes updates when
    their turn comes, or a future set once everything before it was sent; its size in bytes."""

    item: Any
    size: int


@dataclass
class SessionUpdates:
    """Turns the runtime's events for one session into ACP updates, sent in order. `gone` is
    called (once) when the editor leaves more than MAX_HELD_BYTES unread."""

    runtime: Runtime
    root_id: str
    client: Client
    gone: Callable[[str], object]
    pending: deque[Held] = field(default_factory=deque)
    held_bytes: int = 0
    helpers: dict[str, Helper] = field(default_factory=dict)
    open_calls: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Per thread, its tool calls without a result yet: (call id, tool)."""
    streamed: bool = False
    """The root's current reply was streamed (so its whole text is not sent again)."""
    replying: bool = False
    """Text of the root's current reply was queued."""
    replied: bool = False
    """A reply of the root's to this prompt had text: the next one starts after a blank line
    (an editor joins the chunks of one prompt's answer into one message)."""
    plan: list[tuple[str, str, str]] = field(default_factory=list)
    plan_waiting: bool = False
    """A look at the plan is queued and not yet taken (one suffices: it reads the board)."""
    overflowed: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _pump: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Subscribe to the runtime and start sending."""
        self.runtime.subscribe(self.heard)
        self.runtime.watch(self.root_id)
        self._pump = asyncio.create_task(self._send_all(), name="lace-acp-updates")

    def heard(self, event: RuntimeEvent) -> None:
        """A runtime event (called by the bus, on the loop): queue what the editor shows."""
        if isinstance(event, TasksChanged):
            self._refresh()
            return
        thread_id = getattr(event, "thread_id", None)
        if thread_id is None or root_of(thread_id) != self.root_id:
            return
        if isinstance(event, TextStreamed) and thread_id == self.root_id and event.restart:
            self._restarted()
        elif isinstance(event, TextStreamed) and thread_id == self.root_id:
            self.streamed = True
            self.reply_text(event.delta)
        elif isinstance(event, EventAppended):
            self._appended(event)
        elif isinstance(event, ThreadSpawned):
            self.helpers[thread_id] = Helper(thread_id, event.task_id)
            self.put(lambda: self._helper_started(thread_id, event.model))
        elif isinstance(event, TurnFailed) and thread_id == self.root_id:
            self.text(f"\n[lace: the turn failed: {event.error}]")
        elif isinstance(event, TurnFailed | TurnEnded) and thread_id in self.helpers:
            self._refresh()

    def new_prompt(self) -> None:
        """The person sent a prompt: the root's answer to it starts a new message."""
        self.replying = self.replied = False

    def reply_text(self, text: str) -> None:
        """Queue text of the root's current reply, after a blank line if it is not the first
        reply with text to this prompt."""
        if not self.replying and self.replied:
            text = "\n\n" + text
        self.replying = True
        self.text(text)

    def _restarted(self) -> None:
        """The root's model call broke off and is made again: the part of its reply already
        sent stays (an editor cannot take text back), marked as such, and the reply made
        again starts a paragraph of its own, sent whole if it is not streamed."""
        if self.replying:
            self.text(BROKE_OFF)
            self.replied, self.replying = True, False
        self.streamed = False

    def put(self, item: Any) -> None:
        """Queue an update, or a callable making updates, for the editor."""
        self._hold(Held(item, HELD_ITEM_BYTES + _json_size(item)))

    def text(self, text: str) -> None:
        """Queue the root's text for the editor: with the text already waiting, if any."""
        tail = self.pending[-1] if self.pending else None
        if tail is not None and isinstance(tail.item, Text) and not self.overflowed:
            tail.item.parts.append(text)
            tail.size += len(text)
            self.held_bytes += len(text)
            self._check_room()
        else:
            self._hold(Held(Text([text]), HELD_ITEM_BYTES + len(text)))

    async def deliver(self, item: Any) -> None:
        """Queue an update once there is room for it (for a sender that can wait)."""
        held = Held(item, HELD_ITEM_BYTES + _json_size(item))
        while self.pending and self.held_bytes + held.size > MAX_HELD_BYTES:
            self._changed.clear()
            await self._changed.wait()
        self._hold(held)

    def _refresh(self) -> None:
        if not self.plan_waiting:
            self.plan_waiting = True
            self.put(self._refresh_plan)

    def _hold(self, held: Held) -> None:
        if self.overflowed:
            return
        self.pending.append(held)
        self.held_bytes += held.size
        self._changed.set()
        self._check_room()

    def _check_room(self) -> None:
        if self.held_bytes > MAX_HELD_BYTES and not self.overflowed:
            self.overflowed = True  # nothing more is queued; what is waits for the end
            self.gone(f"the editor has left over {MAX_HELD_BYTES // 2**20} MB of updates "
                      "unread")

    def _appended(self, event: EventAppended) -> None:
        data, thread_id = event.data, event.thread_id
        if event.type == "tool_call":
            self.open_calls.setdefault(thread_id, []).append(
                (str(data.get("call_id")), str(data.get("tool_name"))))
        if thread_id != self.root_id:
            return
        from acp import start_tool_call, update_tool_call

        if event.type == "agent_message":
            content = (data.get("message") or {}).get("content")
            if content and not self.streamed:
                self.reply_text(str(content))
            self.streamed = False
            self.replied = self.replied or self.replying
            self.replying = False
        elif event.type == "tool_call":
            tool = str(data.get("tool_name"))
            self.put(start_tool_call(str(data.get("call_id")), tool, kind=tool_kind(tool),
                                     status="in_progress",
                                     raw_input=arguments_of(data.get("arguments"))))
        elif event.type == "tool_result":
            call_id = str(data.get("call_id"))
            self.open_calls[thread_id] = [call for call in self.open_calls.get(thread_id, [])
                                          if call[0] != call_id]
            text = str((data.get("message") or {}).get("content") or "")
            self.put(update_tool_call(call_id, status="failed" if data.get("is_error")
                                      else "completed", content=[text_content(text)]))

    def call_waiting(self, thread_id: str, tool: str) -> str | None:
        """The id of the thread's latest call of `tool` still without a result."""
        calls = [call_id for call_id, name in self.open_calls.get(thread_id, [])
                 if name == tool]
        return calls[-1] if calls else None

    @staticmethod
    def message(text: str) -> Any:
        """The root's text as an `agent_message_chunk` (credential values masked)."""
        from acp import update_agent_message_text

        return update_agent_message_text(mask(text, credential_values()))

    async def _helper_started(self, thread_id: str, model: str) -> ToolCallStart | None:
        from acp import start_tool_call

        helper = self.helpers[thread_id]
        title = f"helper {thread_id} ({model})"
        if helper.task_id is not None:
            task = await self.runtime.read(lambda tx: tx.tasks.get(str(helper.task_id)))
            title += f": {task.title}"
        return start_tool_call(helper_call_id(thread_id), title, kind="think",
                               status="in_progress",
                               raw_input={"thread_id": thread_id, "task_id": helper.task_id})

    async def _refresh_plan(self) -> list[Any]:
        """The board's tasks as a plan (when it changed), and the helpers whose work ended."""
        from acp import plan_entry, update_plan

        def read(tx: Any) -> tuple[list[Task], dict[str, str]]:
            tasks, _ = tx.tasks.query(self.root_id, include_closed=True)
            statuses = {agent.thread_id: agent.status
                        for agent in tx.agents.by_ids(list(self.helpers))}
            return tasks, statuses

        tasks, statuses = await self.runtime.read(read)
        updates: list[Any] = []
        plan = [(task.title, task.priority, PLAN_STATUS.get(task.status, "pending"))
                for task in sorted(tasks, key=lambda task: task.created_at)]
        if plan != self.plan:
            self.plan = plan
            entries: list[PlanEntry] = [plan_entry(title, priority=priority,  # type: ignore[arg-type]
                                                   status=status)  # type: ignore[arg-type]
                                        for title, priority, status in plan]
            updates.append(update_plan(entries))
        by_id = {task.id: task for task in tasks}
        for helper in self.helpers.values():
            update = self._helper_ended(helper, by_id.get(helper.task_id or ""),
                                        statuses.get(helper.thread_id))
            if update is not None:
                updates.append(update)
        return updates

    def _helper_ended(self, helper: Helper, task: Task | None,
                      agent_status: str | None) -> ToolCallProgress | None:
        """The update that brings a helper's call to `completed` or `failed`, once."""
        from acp import update_tool_call

        if helper.status != "in_progress":
            return None
        if task is not None and task.status in ("completed", "archived"):
            helper.status = "completed"
        elif (task is not None and task.status == "blocked") or agent_status in (
                "error", "stopped"):
            helper.status = "failed"
        elif task is None and agent_status == "idle":
            helper.status = "completed"
        else:
            return None
        said = f"{helper.thread_id}: task {task.status}" if task is not None else \
            f"{helper.thread_id}: {agent_status}"
        return update_tool_call(helper_call_id(helper.thread_id), status=helper.status,  # type: ignore[arg-type]
                                content=[text_content(said)])

    async def fail_open_helpers(self, why: str) -> None:
        """Bring every helper still shown running to `failed` (the prompt was cancelled)."""
        from acp import update_tool_call

        for helper in self.helpers.values():
            if helper.status == "in_progress":
                helper.status = "failed"
                self.put(update_tool_call(helper_call_id(helper.thread_id), status="failed",
                                          content=[text_content(why)]))

    async def settled(self) -> None:
        """Wait until every update queued so far has been sent (the plan looked at once more);
        for ever once the editor is gone (lace is then ending)."""
        self._refresh()
        done = asyncio.get_running_loop().create_future()
        self.put(done)
        await done

    async def _send_all(self) -> None:
        while True:
            while not self.pending:
                self._changed.clear()
                await self._changed.wait()
            held = self.pending.popleft()
            self.held_bytes -= held.size
            self._changed.set()  # room for a waiting `deliver`
            item = held.item
            try:
                if isinstance(item, asyncio.Future):
                    item.set_result(None)
                    continue
                for update in await self._updates_of(item):
                    if update is not None:
                        await self.client.session_update(session_id=self.root_id,
                                                         update=update)
            except ConnectionError:
                return
            except Exception:  # one update that cannot be sent must not stop the others
                log.exception("could not send an update to the editor")

    async def _updates_of(self, item: Any) -> list[Any]:
        """What a queued item sends: its updates, made now if it makes them."""
        if isinstance(item, Text):
            return [self.message("".join(item.parts))]
        if not callable(item):
            return [item]
        if item == self._refresh_plan:
            self.plan_waiting = False  # a change from now on needs another look
        made = await item()
        return made if isinstance(made, list) else [made]

    async def close(self) -> None:
        """Stop sending."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump


def _json_size(item: Any) -> int:
    """The length of an update's JSON (0 for what is not an update)."""
    dump = getattr(item, "model_dump_json", None)
    return len(dump()) if dump is not None else 0
