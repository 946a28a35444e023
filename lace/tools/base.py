"""The tool contract: a pydantic model per tool, the context it runs in, and its result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict

from lace.config import Budgets, Limits, Profile, WorkspaceSettings
from lace.config import ModelCheck as ModelCheck
from lace.core.errors import LaceError
from lace.core.records import Agent, Lease
from lace.core.text import valid_text
from lace.store import Tx


class ToolError(LaceError):
    """A tool failure whose message goes back to the model so it can try again."""


CommitWork = Callable[[str, str, str], Awaitable[str]]
"""`(thread_id, task_id, result)` → the result naming the helper's worktree once its work is
committed there (the runtime's `with_committed_work`)."""


BoardCondition = Callable[[Tx], bool]
Progress = Callable[[float, float], Awaitable[None]]
"""Told the seconds a call has waited so far and the most it waits (a client that times calls
out resets its clock on it)."""
WaitUntil = Callable[[BoardCondition, float, "Progress | None"], Awaitable[bool]]
"""`(over, timeout_s, progress)` → whether `over` held on the board before the timeout (the
runtime's `ToolRunner.wait_until`)."""


def no_model_check(_provider: str, _model: str) -> str | None:
    """A model check that accepts everything (for contexts with no LLM at all)."""
    return None


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: who is calling with which tools, the limits and profiles in
    force, and ports to the rest of lace (the transaction comes with each call)."""

    thread_id: str
    session_id: str
    check_model: ModelCheck = no_model_check
    quick_model_check: Callable[[str], bool] | None = None
    """Whether `check_model` answers at once now for a provider (None: not known, so the tools
    that check a model check it in a thread before their write transaction, as when not)."""
    creator_model: tuple[str, str] | None = None
    """`provider, model` a bare `new:` of this caller takes, when known before its write (the
    person's: the session root's), so that its check too runs before the write."""
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    tools: tuple[str, ...] | None = None
    """The caller's own tools; None for the person, who may hand out any tool."""
    limits: Limits = field(default_factory=Limits)
    budgets: Budgets = field(default_factory=Budgets)
    lease: Lease | None = None
    """An agent's claim on its turn: every write of the call checks it (None for the person)."""
    workspace: Path | None = None
    """The folder the runtime's tools act in (a helper with a worktree acts in that instead)."""
    workspace_settings: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    python_tools: tuple[str, ...] = ()
    """The Python tools of this process (the person may hand them to a helper)."""
    commit_work: CommitWork | None = None
    """Commits a helper's worktree before it completes its task (an agent's calls only)."""
    wait_until: WaitUntil | None = None
    """Waits for a condition on the board (None with no runtime: the call answers at once)."""
    progress: Progress | None = None
    """Told how long a waiting call has waited (the MCP server's clients)."""
    trace_parent: str | None = None
    """The `traceparent` of this call's span (None untraced): a helper it plans is traced
    under it."""
    batch: str | None = None
    """The model reply the call belongs to: the tasks it creates for agents tell their
    creator once, when the last of them settles (`TaskBoard.create_tasks`); None outside a
    turn (the person)."""

    def with_creator(self, creator: Agent | None) -> ToolContext:
        """This context, where a `new:` of no model of its own takes `creator`'s (the
        person's: the session root's), known now so its check runs before the write too."""
        if creator is None:
            return self
        return replace(self, creator_model=(creator.provider, creator.model))


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returns to the model; `is_error` marks a failure it can act on, and
    `kind` names it (the LaceError subclass, e.g. `NotFoundError`). `ends_work`: the call left
    its agent, a `new:` helper, with nothing to do, so a reply of only such calls ends the turn
    (the model would only say it is done)."""

    text: str
    is_error: bool = False
    kind: str | None = None
    ends_work: bool = False
    values: Mapping[str, Any] | None = None
    """What the call made, as values for code that reads them (`Board.create_tasks`); the
    model gets only `text`."""

    def __post_init__(self) -> None:  # a lone surrogate from a tool must not wedge the thread
        object.__setattr__(self, "text", valid_text(self.text))

    @classmethod
    def failure(cls, error: Exception) -> ToolResult:
        """The tool error a failed call returns: the error's message, named by its class."""
        return cls(str(error), is_error=True, kind=type(error).__name__)


@dataclass(frozen=True)
class Answer:
    """A tool's answer: the text for the model, and values for code that reads them."""

    text: str
    values: Mapping[str, Any]


class Tool(BaseModel):
    """Base of every tool: the class docstring is the description, the fields are the arguments."""

    model_config = ConfigDict(extra="forbid")
    name: ClassVar[str]

    async def prepared(self, context: ToolContext) -> Self:
        """The call as it will run, after the work it needs done first, outside the database
        transaction (default: nothing, itself)."""
        return self

    def run(self, tx: Tx, context: ToolContext) -> str | Answer:
        """Do the work inside the caller's transaction and return the text for the model (or
        an `Answer` that also carries values)."""
        raise NotImplementedError

    def ends_work(self, tx: Tx, context: ToolContext) -> bool:
        """Whether the agent's call just run in `tx` left it with nothing to do (default: no)."""
        return False


class WaitingTool(Tool):
    """A tool whose answer waits for tasks to settle: the runtime calls `start` (in the
    caller's transaction), waits without holding a model slot, then calls `finish`."""

    def start(self, tx: Tx, context: ToolContext) -> list[str]:
        """Create or pick the tasks to wait for; returns their ids."""
        raise NotImplementedError

    def finish(self, tx: Tx, context: ToolContext, task_ids: list[str]) -> str:
        """The answer, once the tasks settled or the wait timed out."""
        raise NotImplementedError

    def run(self, tx: Tx, context: ToolContext) -> str:
        raise ToolError(f"{self.name} waits for other agents and runs only inside an agent's turn.")


def refuse_deadlock(tx: Tx, context: ToolContext, assignees: set[str]) -> None:
    """Refuse a wait on agents that (at any distance) wait on the caller. The waits are read
    from the database in this transaction (every waiting call records what it waits for), so
    the check sees other processes' waits and waits resumed after a restart, and a wait that
    rolls back leaves nothing behind. Only the waits reachable from `assignees` are read, one
    query per step away (new helpers wait on nobody: one query in all)."""
    caller, session_id = context.thread_id, context.session_id
    if caller not in _waited_on(tx, session_id, assignees):
        return
    for assignee in sorted(assignees):  # which one: for the message
        if caller in _waited_on(tx, session_id, {assignee}):
            raise ToolError(f"Refused: {assignee} is waiting (directly or through others) on "
                            f"you, so waiting on it would deadlock. Do that part yourself.")


def _waited_on(tx: Tx, session_id: str, starts: set[str]) -> set[str]:
    """Every agent one of `starts` waits on, at any distance (`starts` included)."""
    seen, frontier = set(starts), set(starts)
    while frontier:
        edges = tx.agents.wait_edges(session_id, frontier)
        frontier = {target for targets in edges.values() for target in targets} - seen
        seen |= frontier
    return seen
