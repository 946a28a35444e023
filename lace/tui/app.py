"""The main screen: the thread tree, the selected conversation, an input line and a status bar.
The runtime runs agents in this event loop; the app listens to its events and to the database's
change feed, so it also shows sessions that another process is running. Every read it makes runs
on its reader thread (`lace.tui.reader`): a read that grows with the database never stalls the
loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.widgets import Footer, Header, Input, Static, Tree

from lace.core.errors import LaceError
from lace.core.records import Approval
from lace.core.text import printable
from lace.runtime import Runtime
from lace.runtime.events import (
    EventAppended,
    ModelAnswered,
    ModelCalled,
    RuntimeEvent,
    TextStreamed,
    Warned,
)
from lace.runtime.public import Tx
from lace.tui.board import BoardScreen
from lace.tui.literal import literal
from lace.tui.reader import Reader
from lace.tui.session_view import SessionView, load_session_view
from lace.tui.widgets.approval_modal import ApprovalModal
from lace.tui.widgets.conversation import SHOWN_EVENTS, Conversation
from lace.tui.widgets.prompt_modal import PromptModal
from lace.tui.widgets.thread_tree import ThreadTree
from lace.tui.widgets.trust_modal import TrustModal
from lace.tui.widgets.welcome import ModelReadiness, Welcome

REFRESH_S = 0.5
"""The longest the app goes without reading the board: it reads at once when the change feed
hears a commit (another process's too: LISTEN on PostgreSQL, `data_version` on SQLite)."""
MAIN_SCREEN_ACTIONS = frozenset({"next_thread", "previous_thread", "parent_thread", "board",
                                 "new_session", "focus_input", "leave_input", "stop_agent",
                                 "resume_agent", "end_session"})
STREAM_FLUSH_S = 0.1


@dataclass(frozen=True)
class AppStart:
    """What the app runs on: its runtime, the root's model and what the first screen says."""

    runtime: Runtime
    model: str
    readiness: ModelReadiness


@dataclass(frozen=True)
class TrustOffer:
    """A workspace's own configuration the person has not trusted: shown whole, and `accept`
    trusts it and builds the app's start again from the settings it makes."""

    folder: str
    lines: list[str]
    accept: Callable[[], AppStart]


class LaceApp(App[None]):
    """Lives with one session of many agents."""

    CSS_PATH = "lace.tcss"
    TITLE = "lace"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "next_thread", "Next"),
        Binding("p", "previous_thread", "Prev"),
        Binding("u", "parent_thread", "Parent"),
        Binding("b", "board", "Board"),
        Binding("N", "new_session", "New session"),
        Binding("s", "stop_agent", "Stop"),
        Binding("r", "resume_agent", "Resume"),
        Binding("E", "end_session", "End session"),
        Binding("i", "focus_input", "Type"),
        Binding("escape", "leave_input", "Leave input"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, runtime: Runtime, *, model: str, readiness: ModelReadiness,
                 session_id: str | None = None, trust: TrustOffer | None = None) -> None:
        super().__init__()
        self.runtime, self.model, self.session_id = runtime, model, session_id
        self.readiness, self.trust = readiness, trust
        self.reader = Reader(runtime.store)
        self.view_lock = asyncio.Lock()  # one refresh or switch reads and draws at a time
        self.session_view: SessionView | None = None
        self.pending_approvals: list[Approval] = []
        self.selected: str | None = session_id
        self.streamed: dict[str, str] = {}
        self.calling: dict[str, str] = {}  # thread id -> the model whose answer it awaits
        self.calls_changed = False
        self.pending_refresh = True
        self.shown_thread: str | None = None
        self.following: asyncio.Task[None] | None = None  # `_follow_changes`, once mounted

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield ThreadTree()
            with Vertical(id="main"):
                yield Conversation()
                yield Input(placeholder="Type a request for the selected agent and press Enter",
                            id="message")
        yield Static("", id="status")
        yield Footer()

    async def on_mount(self) -> None:
        if self.trust is not None:  # nothing runs before the answer
            self.push_screen(TrustModal(self.trust.folder, self.trust.lines), self._trusted)
            return
        await self._start()

    async def _trusted(self, answer: bool | None) -> None:
        """The answer to the trust question: a yes rebuilds the runtime on the settings it
        makes (the one built before had started nothing); then the app starts."""
        offer, self.trust = self.trust, None
        if answer and offer is not None:
            try:
                start = offer.accept()
            except LaceError as error:
                self.notify(str(error), title="Trusted, but not used", severity="error")
            else:
                previous, self.runtime = self.runtime, start.runtime
                self.model, self.readiness = start.model, start.readiness
                await previous.stop_servers()
                previous.close()
        await self._start()

    async def _start(self) -> None:
        self.runtime.subscribe(self._on_runtime_event)
        self.set_interval(STREAM_FLUSH_S, self.flush_updates)
        # a task, not a Textual worker: tests wait for every worker to complete
        self.following = asyncio.create_task(self._follow_changes(), name="lace-app-changes")
        if (session_id := self.session_id) is not None:
            resumed = await self.runtime.resume(session_id)
            if resumed:
                self.notify(f"Resuming {len(resumed)} interrupted agent(s): "
                            f"{', '.join(resumed)}", title="Interrupted turns")
            for thread_id in await self.reader.read(lambda tx: tx.inbox.runnable(session_id)):
                self.runtime.wake(thread_id)
        self.query_one(Input).focus()
        self._show_welcome()
        await self.refresh_view()

    def _show_welcome(self) -> None:
        """The first screen, while no session is open."""
        self.sub_title = "new session"
        if self.session_id is None:
            keys = [("Enter", "send")] + [
                (self.get_key_display(binding), binding.description)
                for binding in self.BINDINGS if isinstance(binding, Binding) and binding.show]
            self.query_one(Conversation).mount(Welcome(self.readiness, keys))

    def on_ready(self) -> None:
        """After the first frame: import litellm on a thread if the model needs it, so the
        first call is quick."""
        from lace.llm.client import needs_litellm

        warm_up = getattr(self.runtime.client, "warm_up", None)
        if warm_up is not None:
            self.run_worker(functools.partial(warm_up, litellm_too=needs_litellm(self.model)),
                            thread=True, group="warm-up")

    # runtime events arrive on this loop; they only mark work for the next flush

    def _on_runtime_event(self, event: RuntimeEvent) -> None:
        if isinstance(event, Warned):
            self.notify(event.text, title="MCP", severity="warning")
            return
        if isinstance(event, ModelCalled | ModelAnswered):
            if isinstance(event, ModelCalled):
                self.calling[event.thread_id] = event.model
            else:
                self.calling.pop(event.thread_id, None)
            self.calls_changed = True  # shown at the next flush
            return
        if isinstance(event, TextStreamed):
            before = "" if event.restart else self.streamed.get(event.thread_id, "")
            self.streamed[event.thread_id] = before + event.delta
            return
        if isinstance(event, EventAppended) and event.type == "agent_message" \
                and event.thread_id != self.selected:
            self.streamed.pop(event.thread_id, None)  # the answer is written; nothing is live
        self.pending_refresh = True

    def request_refresh(self) -> None:
        self.pending_refresh = True

    async def _follow_changes(self) -> None:
        """Mark a refresh whenever the database changed, and every REFRESH_S at the latest."""
        feed = self.runtime.change_feed()
        try:
            while True:
                await feed.wait(REFRESH_S)
                self.request_refresh()
        finally:
            feed.close()

    async def flush_updates(self) -> None:
        if not self.is_running:
            return
        if self.selected in self.streamed:
            self.query_one(Conversation).stream(self.streamed[self.selected])
        if self.calls_changed:
            self.calls_changed = False
            self._update_status()
        if self.pending_refresh:
            await self.refresh_view()

    async def refresh_view(self) -> None:
        """Read the session and update the tree, conversation, status bar and board; what is
        drawn was read after this call began."""
        if not self.is_running:  # ending: the widgets are going
            return
        if self.session_id is None:
            self._update_status()
            return
        async with self.view_lock:
            await self._refresh()

    async def _refresh(self) -> None:
        session_id, on_board = self.session_id, isinstance(self.screen, BoardScreen)
        if session_id is None or not self.is_running:
            return
        self.pending_refresh = False

        def read(tx: Tx) -> tuple[SessionView, list[Approval]]:
            return (load_session_view(tx, session_id, with_tasks=on_board),
                    tx.approvals.pending(session_id))

        view, approvals = await self.reader.read(read)
        if not self.is_running or self.session_id != session_id:  # quit or left meanwhile
            return
        self.session_view, self.pending_approvals = view, approvals
        self._drop_answered_prompt(approvals)
        self.sub_title = printable(f"session {view.root.id} · {view.root.title or ''}",
                                   one_line=True)
        self.query_one(ThreadTree).sync(view)
        if self.selected is None or view.row(self.selected) is None:
            self.selected = session_id
        await self._show_selected()
        if not self.is_running:  # ending meanwhile: the widgets are going
            return
        self._update_status()
        self._ask_next_approval()
        if on_board and isinstance(self.screen, BoardScreen):
            self.screen.show_tasks(view.tasks)

    async def _show_selected(self) -> None:
        """Show the selected thread's latest events, or append its new ones."""
        thread_id = self.selected
        if thread_id is None:
            return
        conversation = self.query_one(Conversation)
        self.runtime.watch(thread_id)
        if self.shown_thread != thread_id:
            events, hidden = await self.reader.read(
                lambda tx: tx.events.latest(thread_id, SHOWN_EVENTS))
            if self.selected != thread_id or not self.is_running:  # another one was picked
                return
            conversation.show(thread_id, events, hidden)
            self.shown_thread = thread_id
            self.query_one(ThreadTree).select_thread(thread_id)
        else:
            after = conversation.last_event_id
            events = await self.reader.read(lambda tx: tx.events.of_thread(thread_id, after))
            if conversation.thread_id != thread_id or not self.is_running:
                return
            if any(event.type == "agent_message" for event in events):
                self.streamed.pop(thread_id, None)
            conversation.append(events)

    def _drop_answered_prompt(self, pending: list[Approval]) -> None:
        """Close the approval prompt on screen once its request waits no more (answered from
        another terminal or process, or timed out), and say so."""
        screen = self.screen
        if not isinstance(screen, ApprovalModal) or \
                screen.approval.id in {approval.id for approval in pending}:
            return
        screen.dismiss(None)
        approval_id = screen.approval.id

        async def tell() -> None:
            decided = await self.reader.read(lambda tx: tx.approvals.get(approval_id))
            self.notify(f"Approval #{approval_id} was answered elsewhere: {decided.status} "
                        f"by {decided.decided_by}.", title="Approval")

        self.run_worker(tell(), group="approvals")

    def _ask_next_approval(self) -> None:
        """Show the oldest waiting request, one at a time, in order."""
        if not self.pending_approvals or isinstance(self.screen, ApprovalModal):
            return
        approval = self.pending_approvals[0]

        def answer(status: str | None) -> None:
            if status:
                self.run_worker(self._answer(approval.id, status), group="approvals")

        self.push_screen(ApprovalModal(approval, len(self.pending_approvals)), answer)

    async def _answer(self, approval_id: int, status: str) -> None:
        try:
            await self.runtime.decide(approval_id, status)
        except LaceError as error:
            self.notify(str(error), severity="warning")
        await self.refresh_view()

    def _update_status(self) -> None:
        view = self.session_view
        if view is None:
            text = f"new session · model {self.model} · type a request and press Enter"
        else:
            text = (f"session {view.root.id} · {len(view.rows)} agents · {view.running} running · "
                    f"{view.tokens:,} tokens · ${view.cost_usd:.4f}")
            if self.pending_approvals:
                text += f" · {len(self.pending_approvals)} approval(s) waiting"
        if self.calling:
            calls = ", ".join(f"{thread} ({model})" for thread, model in self.calling.items())
            text += f" · ⋯ waiting for a model: {calls}"
        self.query_one("#status", Static).update(literal(text))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """A toast that shows its text exactly (it often comes from a tool or a model), however
        `markup` is asked for."""
        super().notify(printable(message), title=printable(title), severity=severity,
                       timeout=timeout, markup=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Thread keys apply on the main screen only."""
        return not (isinstance(self.screen, BoardScreen) and action in MAIN_SCREEN_ACTIONS)

    # input

    @on(Input.Submitted, "#message")
    async def send_message(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text and self.session_id is None and self.readiness.problem:
            self.notify(self.readiness.problem, title="Cannot start", severity="error")
            return
        event.input.clear()
        if not text:
            return
        try:
            if self.session_id is None:
                root = await self.runtime.start_session(text, self.model)
                self.session_id = self.selected = root.id
            else:
                assert self.selected is not None
                await self.runtime.send(self.selected, text)
        except LaceError as error:  # a UserPromptSubmit hook refused it: nothing was sent
            self.notify(str(error), title="Not sent", severity="error")
            event.input.value = text
            return
        await self.refresh_view()

    def human_tool(self, tool: str, arguments: dict[str, Any]) -> None:
        """Act on the board as the person; errors are shown, not raised."""
        if self.session_id is None:
            self.notify("Start a session first: type a request.", severity="warning")
            return
        session_id = self.session_id

        async def act() -> None:
            result = await self.runtime.act_as_human(session_id, tool, arguments)
            self.notify(result.text, severity="error" if result.is_error else "information")
            await self.refresh_view()

        self.run_worker(act(), group="human")

    # switching

    @on(Tree.NodeSelected, "#threads")
    @on(Tree.NodeHighlighted, "#threads")
    async def pick_thread(self, event: Tree.NodeSelected[str]) -> None:
        if event.node.data and event.node.data != self.selected:
            await self.switch_to(event.node.data)

    async def switch_to(self, thread_id: str) -> None:
        """Show another thread of the session."""
        self.selected = thread_id
        async with self.view_lock:
            await self._show_selected()

    async def _step(self, offset: int) -> None:
        order = self.query_one(ThreadTree).ordered_threads()
        if order and self.selected in order:
            await self.switch_to(order[(order.index(self.selected) + offset) % len(order)])

    async def action_next_thread(self) -> None:
        await self._step(1)

    async def action_previous_thread(self) -> None:
        await self._step(-1)

    async def action_parent_thread(self) -> None:
        if self.selected and "." in self.selected:
            await self.switch_to(self.selected.rsplit(".", 1)[0])

    def action_board(self) -> None:
        def jump(thread_id: str | None) -> None:
            if thread_id:
                self.run_worker(self.switch_to(thread_id), group="switch")

        self.push_screen(BoardScreen(), jump)

    def action_new_session(self) -> None:
        self.session_id = self.selected = self.shown_thread = None
        self.session_view = None
        self.query_one(ThreadTree).clear()
        self.query_one(ThreadTree).session_id = None
        self.query_one(Conversation).remove_children()
        self._show_welcome()
        self._update_status()
        self.query_one(Input).focus()

    def action_stop_agent(self) -> None:
        """Stop the selected agent and its subtree, with a reason."""
        if self.selected is not None:
            self._ask_stop(self.selected, f"Why stop {self.selected} and its helpers?")

    def _ask_stop(self, thread_id: str, question: str, prefix: str = "") -> None:
        def stop(reason: str | None) -> None:
            if reason:
                self.run_worker(self._stop(thread_id, prefix + reason), group="stop")

        self.push_screen(PromptModal(question), stop)

    def action_end_session(self) -> None:
        """Stop every agent of the session, with a reason; nothing is deleted."""
        if self.session_id is not None:
            self._ask_stop(self.session_id, f"Why end session {self.session_id}?",
                           "session ended: ")

    async def _stop(self, thread_id: str, reason: str) -> None:
        stopped = await self.runtime.stop_agent(thread_id, f"{reason} (by human)",
                                                by_person=True)
        self.notify(f"Stopped {len(stopped)} agent(s)." if stopped else "Already stopped.")
        await self.refresh_view()

    async def action_resume_agent(self) -> None:
        """Resume the selected agent if it was stopped (not one whose worktree was pruned)."""
        if not self.selected:
            return
        try:
            resumed = await self.runtime.resume_agent(self.selected)
        except LaceError as error:
            self.notify(str(error), severity="warning")
            return
        if resumed:
            self.notify(f"Resumed {self.selected}.")
            await self.refresh_view()

    def action_focus_input(self) -> None:
        self.query_one(Input).focus()

    def action_leave_input(self) -> None:
        self.query_one(ThreadTree).focus()

    async def on_unmount(self) -> None:
        """However the app ends (a browser page closed sends no key): running turns are marked
        interrupted, as `q` does; nothing is drawn meanwhile (the widgets are going)."""
        if self.following is not None:
            self.following.cancel()
        async with self.view_lock:  # a refresh under way finishes first
            await self.runtime.stop()
        self.reader.close()

    async def action_quit(self) -> None:
        """Stop running turns (marked interrupted, resumable) and leave."""
        await self.runtime.stop()
        self.exit()
