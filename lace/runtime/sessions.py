"""Session-level transactions the runtime and its front ends share: opening a session (for a
prompt, or for the person's first tasks), resuming the turns a dead process cut off, and whether
a session is quiet."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

from lace.core.agents import BUSY_STATUSES, session_status
from lace.core.assignee import ACP_PREFIX, HUMAN, NEW_PREFIX, parse_model
from lace.core.clock import iso_ago
from lace.core.ids import root_of
from lace.core.notifications import INTERRUPTED_TURN, LACE_SENDER
from lace.core.records import Event, Place, SessionSummary, Thread
from lace.core.text import valid_text
from lace.core.tool_sets import EVERY_TOOL
from lace.store import Store, Tx
from lace.store.retry import run_transaction
from lace.tools.base import ToolContext, ToolError
from lace.tools.registry import ToolRegistry
from lace.tools.spawning import parse_assignment
from lace.tools.workspace import DaemonThreads

WATCH_POLL_S = 0.5
"""How often a process looks at the database with no news from its change feed (the
scheduler's watch, `until_quiet`, `follow`)."""
COMMIT_LAG_S = 30.0
"""How far back `follow` looks again for events: on PostgreSQL an event can commit after one
with a higher id (ids are taken before commit), so ids alone would skip it. No lace
transaction stays open that long (none spans a model call)."""


def place_of(workspace: Path) -> Place:
    """The place of a process on this host whose tools act on `workspace`."""
    return Place(host=socket.gethostname(), workspace=str(workspace.resolve()))


def open_session(tx: Tx, prompt: str | None, model: str, place: Place | None, *,
                 title: str | None = None, root_id: str | None = None) -> Thread:
    """A new root thread (`root_id`, else a fresh id) whose inbox holds the person's prompt
    (`lace run`, `--detach` too), or nothing yet (an editor's session before its first prompt:
    `title` names it); its agents work in the workspace at `place`. The root has every lace
    tool (and the Python tools of whichever process runs it: `ToolRunner.own_tools`)."""
    provider, name = parse_model(model)
    prompt = None if prompt is None else valid_text(prompt)
    root = tx.threads.create_session(provider=provider, model=name,
                                     title=valid_text(title or prompt or "")[:80],
                                     tools=list(EVERY_TOOL), place=place, thread_id=root_id)
    if prompt is not None:
        tx.inbox.post(root.id, sender=HUMAN, kind="message", text=prompt)
    return root


def resume_cut_off(tx: Tx, root_id: str, process_id: str) -> list[str]:
    """Agents whose turn was cut off get a `resume` inbox row and become idle: those marked
    `interrupted`, and those marked running or waiting whose process has died."""
    resumed = tx.leases.cut_off_agents(root_id, alive={process_id})
    for thread_id in resumed:
        tx.agents.update(thread_id, status="idle", lease_holder=None)
        tx.approvals.orphan(thread_id)
        tx.inbox.post(thread_id, sender=LACE_SENDER, kind="resume", text=INTERRUPTED_TURN,
                      priority="high")
    return resumed


def quiet(tx: Tx, root_id: str) -> bool:
    """Whether a session is done as far as the database tells: no runnable inbox row waits
    and no agent of it is running, waiting or interrupted in any process (`lace run` with
    workers, `lace wait`)."""
    return not tx.inbox.runnable(root_id) and not tx.agents.count_in(root_id, BUSY_STATUSES)


def session_summaries(tx: Tx, text: str | None = None) -> list[SessionSummary]:
    """Every session, the newest first, with its status word, tokens and cost; only those whose
    id or title holds `text` (any case), when given."""
    wanted = (text or "").casefold()
    sessions = [thread for thread in tx.threads.sessions()
                if wanted in thread.id.casefold() or wanted in (thread.title or "").casefold()]
    statuses: dict[str, set[str]] = {}
    root_status: dict[str, str] = {}
    spent: dict[str, tuple[int, float]] = {}
    for root_id, status, is_root, tokens, cost in tx.agents.by_session():
        statuses.setdefault(root_id, set()).add(status)
        if is_root:
            root_status[root_id] = status
        before = spent.get(root_id, (0, 0.0))
        spent[root_id] = (before[0] + tokens, before[1] + cost)
    queued = {root_of(thread_id) for thread_id in tx.inbox.runnable_anywhere()}
    return [SessionSummary(
        id=thread.id, title=thread.title, created_at=thread.created_at,
        status=session_status(statuses.get(thread.id, set()), root_status.get(thread.id, ""),
                              thread.id in queued),
        tokens=spent.get(thread.id, (0, 0.0))[0], cost_usd=spent.get(thread.id, (0, 0.0))[1])
        for thread in sessions]


def start_session_for(store: Store, arguments: str | dict[str, Any] | None,
                      context: ToolContext, model: str) -> str:
    """A new session for the person's first `task_create` (`arguments`), titled after its first
    task; bad arguments are refused (ToolError) before anything is written. Its root has
    `model` (the settings' default) and no prompt, so it runs only when someone writes to it."""
    parsed = ToolRegistry().parse("task_create", arguments)
    items = getattr(parsed, "tasks", [])
    for item in items:
        if item.assigned_to and not item.assigned_to.startswith((NEW_PREFIX, ACP_PREFIX, HUMAN)):
            raise ToolError(f"No session yet, so {item.assigned_to!r} names no agent.")
        parse_assignment(item.assigned_to, context)
    provider, name = parse_model(model)
    return store.write(lambda tx: tx.threads.create_session(
        provider=provider, model=name, title=valid_text(items[0].title)).id)


class QuietLooks:
    """The looks of `until_quiet` under way, one per session at most: a wait that ended at its
    timeout while the server did not answer (paused, slow, a table locked) leaves its look
    running on a daemon thread, holding a connection or trying to make one; the next wait
    takes that look up instead of starting another, so `lace run`'s wait every LOOK_AGAIN_S
    costs one thread and one connection however long the server keeps silent, not one each."""

    def __init__(self) -> None:
        self._running: dict[str, Future[bool]] = {}

    def look(self, store: Store, root_id: str) -> tuple[Future[bool], bool]:
        """The look at whether `root_id` is quiet still under way (and False), or a new one
        (and True)."""
        running = self._running.get(root_id)
        if running is not None and not running.done():
            return running, False
        running = self._running[root_id] = DaemonThreads().submit(partial(
            run_transaction, store.database,
            lambda connection: quiet(Tx(connection), root_id), write=False))
        return running, True


async def until_quiet(store: Store, root_id: str, timeout: float | None,
                      on_wait: Callable[[], None] = lambda: None,
                      looks: QuietLooks | None = None) -> bool:
    """Whether the session went quiet (as `lace run` with workers decides it) within `timeout`
    seconds (None: however long it takes); `on_wait` is called once, when it has to wait
    (on a thread, within the timeout: it may read the board).
    Looks again whenever the change feed hears a commit, and at least as often as a worker
    looks for runnable threads; on a server that drops the connection, once it is back. A
    look that outlived an earlier wait of the same `looks` is taken up, not started again."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    looks = looks or QuietLooks()
    feed = store.database.change_feed()
    told = False
    try:
        while True:
            look, new = looks.look(store, root_id)
            try:  # a server paused or gone silent must not hold a wait past its timeout
                async with asyncio.timeout_at(deadline):
                    went_quiet = await asyncio.wrap_future(look)
            except TimeoutError:
                return False
            if went_quiet and new:
                return True
            if went_quiet:  # read before this wait began, maybe long before: read again
                continue
            if not told:
                told = True
                try:  # it may read the board (`lace wait`): off the loop, within the timeout
                    async with asyncio.timeout_at(deadline):
                        await loop.run_in_executor(DaemonThreads(), on_wait)
                except TimeoutError:
                    return False
            left = WATCH_POLL_S if deadline is None else min(WATCH_POLL_S,
                                                              deadline - loop.time())
            if left <= 0:
                return False
            await feed.wait(left)
    finally:
        feed.close()


def _quiet_and_events(connection: Any, *, root_id: str,
                      since: str | None) -> tuple[bool, list[Event]]:
    tx = Tx(connection)
    return quiet(tx, root_id), tx.events.of_session(root_id, since)


def _check_session(store: Store, root_id: str) -> None:
    """NotFoundError unless `root_id` is a session."""
    with store.reading() as tx:
        tx.threads.get_session(root_id)


async def follow(store: Store, root_id: str, on_event: Callable[[Event], None]) -> None:
    """Hand every event of a session's threads (the root and its helpers) to `on_event` as it
    is written, from the first, and return once the session is quiet. A session that no
    process runs yet is not quiet while its prompt waits: it is followed until it is."""
    feed = store.database.change_feed()
    seen: dict[int, str] = {}  # id -> created_at, of the events looked at again next time
    since: str | None = None
    try:
        await asyncio.to_thread(_check_session, store, root_id)  # off the loop, as below
        while True:
            looked_at = iso_ago(COMMIT_LAG_S)
            done, events = await asyncio.to_thread(  # quiet first: the events after hold its last
                run_transaction, store.database, partial(_quiet_and_events, root_id=root_id,
                                                         since=since), write=False)
            for event in events:
                if event.id not in seen:
                    on_event(event)
                seen[event.id] = event.created_at
            since = looked_at
            seen = {key: made for key, made in seen.items() if made >= since}
            if done:
                return
            await feed.wait(WATCH_POLL_S)
    finally:
        feed.close()
