"""The Runtime: the one object every front end (the command line, the app, the web page, the
MCP server, `lace run`, `lace worker`, the Python API) talks to. It owns the board, the scheduler
and the model seam; `lace.runtime.assembly.open_runtime` builds it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from lace.config import Settings
from lace.core import ids
from lace.core.assignee import HUMAN
from lace.core.records import Lease, Place, Thread
from lace.core.text import valid_text
from lace.llm.types import ModelClient
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventBus, RuntimeEvent
from lace.runtime.scheduler import Scheduler
from lace.runtime.sessions import open_session
from lace.runtime.tool_runner import Arguments, ToolRunner
from lace.store import Store, Tx
from lace.store.engines import ChangeFeed
from lace.store.engines.reconnect import is_retried
from lace.store.failures import storage_error
from lace.tools.base import ToolResult
from lace.tools.registry import ToolRegistry

T = TypeVar("T")


@dataclass
class Runtime:
    """One process's runtime: sessions, the person's calls, and the agents' turns."""

    store: Store
    """The database, for front ends that read it (`store.reading()`)."""
    db: AsyncStore
    settings: Settings
    client: ModelClient
    bus: EventBus
    tools: ToolRunner
    scheduler: Scheduler
    workspace: Path | None = None
    place: Place | None = None
    """Where this process runs agents (None: wherever the session was started)."""
    _closed: bool = field(default=False, repr=False)

    # what a front end watches

    @property
    def process_id(self) -> str:
        """This process's id in the `processes` table (its lease on the agents it runs)."""
        return self.scheduler.process_id

    @property
    def running(self) -> frozenset[str]:
        """The threads whose turn runs in this process now."""
        return frozenset(self.scheduler.running)

    def subscribe(self, handler: Callable[[RuntimeEvent], None]) -> None:
        """Call `handler` with every event the runtime publishes (past tense, in order)."""
        self.bus.subscribe(handler)

    def watch(self, *thread_ids: str) -> None:
        """Stream these threads' model replies as they arrive (`TextStreamed`): the ones a
        person is looking at; other threads' replies arrive whole."""
        self.scheduler.runner.watched = set(thread_ids)

    def change_feed(self) -> ChangeFeed:
        """Hears every commit to the database, this process's and others' (close it when
        done): a front end that redraws on changes follows it."""
        return self.store.database.change_feed()

    async def read(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one read transaction, off the writers' way."""
        return await self.db.read(work)

    def offering(self, registry: ToolRegistry) -> ToolRunner:
        """The tool path of this runtime offering only `registry`'s tools (the MCP server
        serves the person's tools, not the agents')."""
        return dataclasses.replace(self.tools, registry=registry)

    # sessions and the person's acts

    async def start_session(self, prompt: str, model: str) -> Thread:
        """A new root thread whose inbox holds the person's prompt (UserPromptSubmit hooks
        run first: one may refuse it, and then nothing is written; then SessionStart)."""
        self.scheduler.reopen()
        root_id, hooks = ids.new_root_thread_id(), self.tools.hooks
        if hooks is not None:
            prompt = await hooks.prompt_submitted(root_id, prompt)
            prompt = "\n\n".join([prompt, *await hooks.session_started(root_id, "startup")])
        return await self.db.write(lambda tx: open_session(tx, prompt, model, self.place,
                                                           root_id=root_id))

    async def open_empty_session(self, title: str, model: str) -> Thread:
        """A new root thread with nothing in its inbox: it runs once someone writes to it
        (`send`), as an editor's session does at its first prompt."""
        self.scheduler.reopen()
        return await self.db.write(
            lambda tx: open_session(tx, None, model, self.place, title=title))

    def serve_session(self, root_id: str) -> None:
        """Run this session's agents here from now on (a session the MCP server started)."""
        self.scheduler.sessions.add(root_id)

    async def send(self, thread_id: str, text: str) -> None:
        """A person's message to any thread (through its inbox, so it works mid-turn), once
        the UserPromptSubmit hooks let it through."""
        if self.tools.hooks is not None:
            text = await self.tools.hooks.prompt_submitted(thread_id, text)
        await self.db.write(lambda tx: tx.inbox.post(thread_id, sender=HUMAN, kind="message",
                                                     text=valid_text(text)))

    async def act_as_human(self, root_id: str, tool: str, arguments: Arguments,
                           ) -> ToolResult:
        """Call a tool as the person (`human`) through the one tool path."""
        return await self.tools.call(await self.tools.person_context(root_id), tool, arguments)

    async def decide(self, approval_id: int, status: str) -> None:
        """The person's answer to an approval request (the app's prompt)."""
        await self.db.write(lambda tx: tx.approvals.decide(approval_id, status, HUMAN))
        self.tools.changed()

    async def resume(self, root_id: str) -> list[str]:
        """A person resumes the session (`lace run --continue`, the app): its imported agents
        may run from now on, here, and those whose turn was cut off are resumed; from now on
        this process also takes over the session's agents if their holder dies."""
        place = self.scheduler.claims_at
        if self.tools.hooks is not None:
            await self.tools.hooks.session_started(root_id, "resume")
        await self.db.write(lambda tx: tx.lifecycle.release_imported(root_id, place))
        return await self.scheduler.resume(root_id)

    async def stop_agent(self, thread_id: str, reason: str, *, by_person: bool = False,
                         lease: Lease | None = None) -> list[str]:
        """Stop an agent and its subtree (by a person it lasts until a person resumes it)."""
        return await self.scheduler.stop_agent(thread_id, reason, by_person=by_person,
                                               lease=lease)

    async def resume_agent(self, thread_id: str) -> bool:
        """Resume a stopped agent: it continues its conversation."""
        return await self.db.write(lambda tx: tx.lifecycle.resume(thread_id))

    # running agents

    def wake(self, thread_id: str) -> None:
        """Run `thread_id`'s pending inbox rows soon."""
        self.scheduler.wake(thread_id)

    def cancel(self, thread_ids: Sequence[str]) -> None:
        """Cancel the running turns of these agents at once."""
        self.scheduler.cancel(list(thread_ids))

    async def run_until_quiet(self, root_id: str) -> None:
        """Run every agent of the session until none is running and no runnable row waits."""
        await self.scheduler.run_until_quiet(root_id)

    async def serve(self) -> None:
        """Run the agents of the sessions served until cancelled, then stop."""
        await self.scheduler.serve()

    async def stop(self) -> list[str]:
        """Cancel running turns (their agents become `interrupted`, resumable) and stop the
        MCP servers; returns the threads cut off."""
        return await self.scheduler.stop()

    async def stop_servers(self) -> None:
        """Stop the process's MCP servers (every exit path of lace comes here)."""
        await self.scheduler.stop_servers()

    def close(self) -> None:
        """Stop watching, close the store's connections and give up the lease."""
        if self._closed:
            return
        self._closed = True
        self.tools.tracing.close()  # the last spans leave (a bounded wait)
        self.scheduler.close()
        self.db.close()
        try:
            self.store.write(lambda tx: tx.processes.forget(self.process_id),
                             stopping=lambda: True)  # tried once
        except Exception as error:  # a full disk, a server away: the row expires with the lease
            if storage_error(error, self.store.database.path) is None and not is_retried(error):
                raise
