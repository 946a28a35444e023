"""The Board: one database's tasks and threads for code that runs no agents (the command
line's reads and the person's calls, and `lace.open_board` in Python). A call changes the board
through the one tool path; the agents it wakes run in whichever process runs the session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lace.config import Settings, load_settings
from lace.core import ids
from lace.core.agents import HALTED_STATUSES
from lace.core.assignee import HUMAN
from lace.core.errors import LaceError, NotFoundError
from lace.core.ids import root_of
from lace.core.records import Agent, Event, Note, SessionSummary, Task, Thread
from lace.core.usage import CallGroup, Usage
from lace.runtime.acp_worker import acp_checked
from lace.runtime.hook_points import submitted_alone
from lace.runtime.outcome import Outcome, read_outcome
from lace.runtime.sessions import (
    QuietLooks,
    follow,
    open_session,
    place_of,
    session_summaries,
    start_session_for,
    until_quiet,
)
from lace.runtime.tool_runner import call_tool
from lace.store import Store, Tx, open_database
from lace.store.engines import ChangeFeed
from lace.store.export_format import SessionDocument
from lace.store.transfer import Imported, export_session, import_session
from lace.tools.base import ToolContext, ToolResult
from lace.tools.spawning import parse_assignment

NO_SESSION = "No session yet: start one with lace run \"...\" or lace task add \"...\"."


@dataclass(frozen=True)
class TaskPage:
    """Some of a session's tasks, and how many it has in all."""

    session: Thread
    tasks: list[Task]
    total: int


@dataclass(frozen=True)
class ThreadView:
    """A thread with its agent (None for a thread no agent runs) and its subtree's usage."""

    thread: Thread
    agent: Agent | None
    subtree: Usage


@dataclass(frozen=True)
class SessionUsage:
    """A session's model calls summed per thread, model and day, its threads in tree order
    and each agent's model."""

    session: Thread
    groups: list[CallGroup]
    threads: list[str]
    models: dict[str, str]


def person_context(settings: Settings, workspace: Path, session_id: str) -> ToolContext:
    """The person's tool context with no runtime: the configured limits, profiles and
    `[workspace]` settings, acting in `workspace`."""
    from lace.llm.checks import check_model

    return ToolContext(thread_id=HUMAN, session_id=session_id,
                       check_model=acp_checked(check_model, settings.acp_agents),
                       profiles=settings.profiles, limits=settings.limits,
                       budgets=settings.budgets, workspace=workspace,
                       workspace_settings=settings.workspace)


def check_assignment(assigned_to: str, settings: Settings, workspace: Path) -> None:
    """Refuse (LaceError, the tool call's own words) an `assigned_to` the person's task call
    would refuse for its form, its profile, its model or its ACP agent, before anything is
    written; an existing thread is left to the call."""
    parse_assignment(assigned_to, person_context(settings, workspace, ""))


def pick_session(tx: Tx, session_id: str | None) -> Thread:
    """The named session, else the latest; NotFoundError when there is none."""
    if session_id:
        return tx.threads.get_session(session_id)
    latest = tx.threads.latest_session()
    if latest is None:
        raise NotFoundError(NO_SESSION)
    return latest


class Board:
    """The board of one database, read and changed as the person (`human`)."""

    def __init__(self, store: Store, settings: Settings | None = None,
                 workspace: Path | None = None) -> None:
        self.store = store
        self._settings = settings
        self.workspace = workspace or Path.cwd()
        self._looks = QuietLooks()  # a look a wait's timeout left running: the next takes it up

    @property
    def settings(self) -> Settings:
        """The settings the person's calls use, loaded when first needed (reading the board
        needs none)."""
        if self._settings is None:
            self._settings = load_settings(workspace=self.workspace)
        return self._settings

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database's connections."""
        self.store.close()

    @property
    def url(self) -> str:
        """The database's URL (with its password: give it to child processes, never print it)."""
        return self.store.database.url

    def change_feed(self) -> ChangeFeed:
        """Hears other processes' commits to this database (close it when done)."""
        return self.store.database.change_feed()

    # reading

    def latest_session(self) -> Thread | None:
        """The newest session, or None when the database has none."""
        with self.store.reading() as tx:
            return tx.threads.latest_session()

    def session(self, session_id: str | None = None) -> Thread:
        """The named session (a root thread id), else the latest; NotFoundError if none."""
        with self.store.reading() as tx:
            return pick_session(tx, session_id)

    def persons_agent(self, session_id: str | None = None) -> str | None:
        """The root of the named session (else the latest) once the person has written to it:
        the agent that speaks for the session and hears of the person's tasks; else None, and
        None for a root stopped or failed (a task given to it would resume a root the person
        stopped, or sit on one that runs no turn) or imported and not resumed yet (inert: the
        messages it holds are its file's author's, not this person's)."""
        with self.store.reading() as tx:
            root = pick_session(tx, session_id).id
            agent = tx.agents.find(root)
            halted = agent is None or agent.inert or agent.status in HALTED_STATUSES
            return root if not halted and tx.inbox.person_wrote_to(root) else None

    def tasks(self, session_id: str | None = None, *, include_closed: bool = False,
              limit: int | None = None) -> TaskPage:
        """A session's tasks (open ones unless `include_closed`), each with what it waits for
        and blocks, oldest first."""
        with self.store.reading() as tx:
            session = pick_session(tx, session_id)
            tasks, total = tx.tasks.query(session.id, include_closed=include_closed,
                                          limit=limit)
            return TaskPage(session, tx.edges.attach(tasks, session.id), total)

    def task(self, task_id: str) -> Task:
        """One task; NotFoundError for an unknown id."""
        with self.store.reading() as tx:
            return tx.edges.attach([tx.tasks.get(task_id)])[0]

    def notes(self, task_id: str) -> list[Note]:
        """A task's notes, oldest first."""
        with self.store.reading() as tx:
            tx.tasks.get(task_id)
            return tx.notes.of_task(task_id)

    def threads(self, session_id: str | None = None) -> list[ThreadView]:
        """Every thread of a session with its agent and its subtree's usage."""
        with self.store.reading() as tx:
            session = pick_session(tx, session_id)
            agents = {agent.thread_id: agent for agent in tx.agents.of_session(session.id)}
            return [ThreadView(thread, agents.get(thread.id), tx.usage.subtree(thread.id))
                    for thread in tx.threads.of_session(session.id)]

    def current_tasks(self, views: list[ThreadView]) -> dict[str, Task]:
        """The task each agent of `views` works on, by task id."""
        ids = [view.agent.current_task for view in views
               if view.agent is not None and view.agent.current_task]
        with self.store.reading() as tx:
            return {task.id: task for task in tx.tasks.by_ids(ids)}

    def get_thread(self, thread_id: str) -> Thread:
        """One thread; NotFoundError for an unknown id."""
        with self.store.reading() as tx:
            return tx.threads.get(thread_id)

    def usage(self, session_id: str | None = None) -> SessionUsage:
        """The model calls of a session (the latest by default), grouped for `lace cost`."""
        with self.store.reading() as tx:
            session = pick_session(tx, session_id)
            groups = tx.usage.call_groups(session.id)
            threads = [thread.id for thread in tx.threads.of_session(session.id)]
            models = {agent.thread_id: agent.model_name
                      for agent in tx.agents.of_session(session.id)}
        return SessionUsage(session, groups, threads, models)

    def export(self, session_id: str) -> dict[str, Any]:
        """A session as one JSON-ready document (`lace export`)."""
        with self.store.reading() as tx:
            return export_session(tx, session_id)

    def outcome(self, root_id: str) -> Outcome:
        """How the session stands: its root's last answer, its agents and its tasks."""
        return read_outcome(self.store, root_id)

    async def until_quiet(self, root_id: str, timeout: float | None,
                          waiting: Callable[[], None]) -> bool:
        """Whether the session went quiet within `timeout` seconds (None: however long it
        takes), running no agent (`sessions.until_quiet`); calls `waiting` once, when it
        first has to wait."""
        return await until_quiet(self.store, root_id, timeout, waiting, self._looks)

    async def follow(self, root_id: str, on_event: Callable[[Event], None]) -> None:
        """Hand each event of the session's threads to `on_event` as it is written, from the
        first, until the session is quiet (`sessions.follow`)."""
        await follow(self.store, root_id, on_event)

    def sessions(self, text: str | None = None) -> list[SessionSummary]:
        """Every session (those whose id or title holds `text`), the newest first."""
        with self.store.reading() as tx:
            return session_summaries(tx, text)

    def models(self) -> list[str]:
        """Every `provider/model` the board's agents were given, the latest first."""
        with self.store.reading() as tx:
            return tx.agents.models()

    def unserved(self, session_id: str) -> list[str]:
        """The session's agents that have work to start while no lace process runs this board
        (none when one runs: it picks them up)."""
        with self.store.reading() as tx:
            if tx.processes.live():
                return []
            return tx.inbox.runnable(session_id)

    def thread(self, thread_id: str) -> tuple[Thread, Agent | None, list[Event]]:
        """A thread, its agent and its whole conversation."""
        with self.store.reading() as tx:
            thread = tx.threads.get(thread_id)
            return thread, tx.agents.find(thread.id), tx.events.of_thread(thread.id)

    # changing, as the person

    def context(self, session_id: str) -> ToolContext:
        """The person's tool context in a session, on this board."""
        return person_context(self.settings, self.workspace, session_id)

    def call(self, tool: str, arguments: dict[str, Any],
             session_id: str | None = None) -> ToolResult:
        """Call one of lace's tools as the person in a session (the latest by default, the
        task's own when the arguments name a task)."""
        with self.store.reading() as tx:
            if session_id is None and "task_id" in arguments:
                session_id = tx.tasks.get(arguments["task_id"]).thread_id
            session = pick_session(tx, session_id).id
            root = tx.agents.find(session)
        return call_tool(self.store, self.context(session).with_creator(root), tool, arguments)

    def start_session(self, prompt: str, model: str, workspace: Path,
                      warn: Callable[[str], None] = lambda _text: None) -> Thread:
        """A new session whose inbox holds the prompt, run by no agent here: a worker on this
        host in `workspace` runs it (`lace run --detach`); the UserPromptSubmit hooks run
        first (a refusal writes nothing; `warn` shows a hook's error)."""
        root_id = ids.new_root_thread_id()
        prompt = submitted_alone(self.settings, workspace, root_id, prompt, warn)
        place = place_of(workspace)
        return self.store.write(lambda tx: open_session(tx, prompt, model, place,
                                                        root_id=root_id))

    def start_session_for(self, arguments: Any) -> str:
        """A new session for the person's first `task_create`, titled after its first task
        (bad arguments refused, ToolError, before anything is written)."""
        return start_session_for(self.store, arguments, self.context(""), self.settings.model)

    def import_session(self, document: SessionDocument) -> Imported:
        """Write an exported session in one transaction: its id here (new ids when its own
        were taken), inert until a person resumes it, and the approvals left out."""
        return self.store.write(lambda tx: import_session(tx, document))

    def create_tasks(self, tasks: list[dict[str, Any]],
                     session_id: str | None = None) -> list[Task]:
        """Create tasks as the person, each a `task_create` item (`title`, `prompt`,
        `assigned_to`: `new:provider/model` spawns a helper, `blocked_by`, `priority`,
        `description`), in the named session, else the latest; with no session yet, one is
        started (as `lace task add` does). The created tasks; LaceError when refused."""
        arguments = {"tasks": tasks}
        if session_id is None and self.latest_session() is None:
            session_id = self.start_session_for(arguments)
        result = _checked(self.call("task_create", arguments, session_id))
        task_ids = (result.values or {}).get("task_ids", [])
        with self.store.reading() as tx:
            created = {task.id: task for task in tx.edges.attach(tx.tasks.by_ids(task_ids))}
        return [created[task_id] for task_id in task_ids]

    def create_task(self, title: str, prompt: str | None = None, *,
                    assigned_to: str | None = None, session_id: str | None = None,
                    **fields: Any) -> Task:
        """One task (`create_tasks` with one item): `prompt` defaults to the title."""
        item = {"title": title, "prompt": prompt or title, "assigned_to": assigned_to, **fields}
        return self.create_tasks([{key: value for key, value in item.items()
                                   if value is not None}], session_id)[0]

    def merge_worktree(self, thread_id: str, strategy: str) -> ToolResult:
        """Merge a helper's worktree branch (`worktree_merge` as the person, in the helper's
        session); the tool's own refusal when the thread has no worktree."""
        arguments = {"thread_id": thread_id, "strategy": strategy}
        return call_tool(self.store, self.context(root_of(thread_id)), "worktree_merge",
                         arguments)

    def add_note(self, task_id: str, note: str) -> None:
        """A note on a task, as the person; LaceError when the board refuses it."""
        _checked(self.call("task_add_note", {"task_id": task_id, "note": note}))

    def complete_task(self, task_id: str, message: str) -> None:
        """Complete a task with its result, as the person (its creator is told)."""
        _checked(self.call("task_complete", {"task_id": task_id, "message": message}))


def _checked(result: ToolResult) -> ToolResult:
    if result.is_error:
        raise LaceError(result.text)
    return result


def open_board(db: str | Path | None = None, *, settings: Settings | None = None,
               workspace: str | Path | None = None) -> Board:
    """The board of the database at `db` (a file path or URL; by default $LACE_DB, else
    lace's own file), migrated to the current schema."""
    return Board(Store(open_database(None if db is None else str(db))), settings,
                 None if workspace is None else Path(workspace).expanduser().resolve())
