"""The selected thread's conversation: messages, collapsed tool calls, styled notifications, and
the answer being streamed; only the latest events are mounted, so switching stays instant."""

from __future__ import annotations

import json
from typing import cast

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static

from lace.core.records import Event
from lace.core.text import MAX_NESTING, json_nesting, printable
from lace.tui.literal import literal

SHOWN_EVENTS = 120


def _short(text: str, width: int = 90) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _arguments(raw: str) -> str:
    """Arguments pretty-printed, or as sent when they are not JSON or too deep to decode."""
    if json_nesting(raw) > MAX_NESTING:
        return raw
    try:
        return json.dumps(json.loads(raw or "{}"), ensure_ascii=False, indent=2)
    except json.JSONDecodeError:
        return raw


def _title(text: str) -> str:
    """A collapsible's title shown exactly: Collapsible parses a str title as markup, and takes
    Content as it is (typed str only)."""
    return cast(str, literal(text))


class ToolCallView(Collapsible):
    """One tool call, one line until expanded; its result fills in when it arrives."""

    def __init__(self, name: str, arguments: str) -> None:
        self.call_name, self.arguments = name, arguments
        self.body = Static(literal(_arguments(arguments)), classes="tool-body")
        super().__init__(self.body, title=_title(f"→ {name}({_short(arguments, 70)})"),
                         collapsed=True, classes="tool-call")

    def show_result(self, text: str, is_error: bool, files_changed: list[str]) -> None:
        """Fill in the result and mark the line ✓ or ✗ (and name the files it changed)."""
        mark = "✗" if is_error else "✓"
        changed = f" [changed {', '.join(files_changed)}]" if files_changed else ""
        self.title = _title(f"{mark} {self.call_name}({_short(self.arguments, 50)}) → "
                            f"{_short(text, 50)}{changed}")
        self.body.update(literal(f"{_arguments(self.arguments)}\n\n{text}"))
        self.set_class(is_error, "tool-error")


class Conversation(VerticalScroll):
    """Renders events; `append` adds new ones, `stream` shows the answer in progress."""

    def __init__(self) -> None:
        super().__init__(id="conversation")
        self.thread_id: str | None = None
        self.last_event_id = 0
        self.calls: dict[str, ToolCallView] = {}
        self.live: Markdown | None = None

    def show(self, thread_id: str, events: list[Event], hidden: int = 0) -> None:
        """Replace the view with `thread_id`'s latest events."""
        self.thread_id, self.last_event_id, self.live = thread_id, 0, None
        self.calls.clear()
        self.remove_children()
        if hidden:
            self.mount(Static(literal(f"… {hidden} earlier events (lace show {thread_id})"),
                              classes="hidden-count"))
        self.append(events)

    def append(self, events: list[Event]) -> None:
        """Add events newer than the last one shown."""
        fresh = [event for event in events if event.id > self.last_event_id]
        if not fresh:
            return
        at_bottom = self.scroll_y >= self.max_scroll_y - 1
        widgets = [widget for event in fresh if (widget := self._widget(event)) is not None]
        if self.live is not None and any(e.type == "agent_message" for e in fresh):
            self.live.remove()
            self.live = None
        if widgets:
            self.mount_all(widgets, before=self.live)
        self.last_event_id = fresh[-1].id
        if at_bottom:
            self.scroll_end(animate=False)

    def stream(self, text: str) -> None:
        """Show the answer being written, below everything else."""
        if self.live is None:
            self.live = Markdown(printable(text), classes="agent streaming")
            self.mount(self.live)
        else:
            self.live.update(printable(text))
        self.scroll_end(animate=False)

    def _widget(self, event: Event) -> Widget | None:
        data = event.data
        message = data.get("message") or {}
        content = str(message.get("content") or "")
        if event.type == "system_prompt":
            return Collapsible(Static(literal(content)), title="system prompt",
                               collapsed=True, classes="system")
        if event.type == "user_message":
            return Static(literal(f"you: {content}"), classes="user")
        if event.type == "notification":
            sender = data.get("sender", "")
            return Static(literal(f"[{data.get('kind')} from {sender}]\n{content}"),
                          classes="notification")
        if event.type == "agent_message":
            return Markdown(printable(content), classes="agent") if content else None
        if event.type == "tool_call":
            view = ToolCallView(str(data.get("tool_name")), str(data.get("arguments") or ""))
            self.calls[str(data.get("call_id"))] = view
            return view
        if event.type == "tool_result":
            pending = self.calls.get(str(data.get("call_id")))
            if pending is not None:
                pending.show_result(content, bool(data.get("is_error")),
                                    list(data.get("files_changed") or []))
                return None
            return Static(literal(f"result: {_short(content)}"), classes="tool-call")
        if event.type == "error":
            return Static(literal(f"error: {data.get('error')}"), classes="error")
        return None
