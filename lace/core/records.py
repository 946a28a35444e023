"""Plain values the store returns: never ORM rows, so callers cannot touch the session."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from lace.core.worktrees import WorktreeOrigin

EVENT_TYPES: Final = ("system_prompt", "user_message", "agent_message", "tool_call", "tool_result",
                      "notification", "error")
APPROVAL_STATUSES: Final = ("pending", "approved", "approved_session", "denied")
APPROVED_STATUSES: Final = ("approved", "approved_session")
"""The person allowed the call (this once, or for the rest of the session)."""


@dataclass(frozen=True)
class Thread:
    """One conversation; a root thread is a session."""

    id: str
    parent_id: str | None
    root_id: str
    title: str | None
    created_at: str
    updated_at: str
    trace_parent: str | None = None
    """The W3C `traceparent` its agent's turns are traced under (docs/tracing.md): the span
    of the call that spawned it, for a root its first turn's; None while tracing was off."""

    @property
    def trace_id(self) -> str | None:
        """The id of the trace its agent's spans belong to, if any."""
        return self.trace_parent.split("-")[1] if self.trace_parent else None


@dataclass(frozen=True)
class SessionSummary:
    """One line of `lace sessions`: a session, its title (its prompt's start), its status word
    (`session_status`), when it started and what its agents cost."""

    id: str
    title: str | None
    status: str
    created_at: str
    cost_usd: float
    tokens: int


@dataclass(frozen=True)
class Agent:
    """The `agent_metadata` row of a thread: who runs it, with what, for which task."""

    thread_id: str
    name: str
    provider: str
    model: str
    profile: str | None
    type: str
    status: str
    created_for_task: str | None
    parent_thread_id: str | None
    current_task: str | None
    tools: list[str] | None
    instructions: str | None
    stop_reason: str | None
    budget: dict[str, float] | None
    turns: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    created_at: str
    updated_at: str
    lease_holder: str | None = None
    lease_epoch: int = 0
    stopped_by_person: bool = False
    host: str | None = None
    workspace: str | None = None
    inert: bool = False
    """Imported, and no person has resumed its session yet: no process runs a turn of it."""

    @property
    def model_name(self) -> str:
        """`provider/model`, as litellm takes it."""
        return f"{self.provider}/{self.model}"

    def runs_at(self, place: Place | None) -> bool:
        """Whether a process at `place` may run this agent: one whose tools act on a
        workspace runs only on its host, for its folder. A process with no workspace (lace
        used as a library) declares no place and runs any agent."""
        return place is None or self.workspace is None \
            or (self.host, self.workspace) == (place.host, place.workspace)


@dataclass(frozen=True)
class Place:
    """Where a process runs agents: its host, and the workspace folder its tools act on."""

    host: str
    workspace: str


@dataclass(frozen=True)
class NewAgent:
    """An `agent_metadata` row to write: its place is `place`, else its parent's; none when its
    tools do not act on a workspace (it may run anywhere)."""

    thread_id: str
    name: str
    provider: str
    model: str
    parent_thread_id: str | None = None
    profile: str | None = None
    type: str = "persistent"
    status: str = "idle"
    created_for_task: str | None = None
    current_task: str | None = None
    tools: list[str] | None = None
    instructions: str | None = None
    budget: dict[str, float] | None = None
    place: Place | None = None


@dataclass(frozen=True)
class Lease:
    """A process's claim on an agent for one turn: every write of the turn checks it."""

    thread_id: str
    holder: str
    epoch: int


@dataclass(frozen=True)
class Note:
    """One note on a task."""

    id: int
    task_id: str
    author: str
    content: str
    created_at: str


@dataclass(frozen=True)
class Task:
    """One task on the board."""

    id: str
    title: str
    description: str | None
    prompt: str
    status: str
    priority: str
    assigned_to: str | None
    created_by: str
    thread_id: str
    created_at: str
    updated_at: str
    note_count: int = 0
    notes: tuple[Note, ...] = field(default=())
    blocked_by: tuple[str, ...] = ()
    """Every task this one depends on (read with the task's edges, else empty)."""
    waits_for: tuple[str, ...] = ()
    """Its blockers not completed yet: while one is left the task waits, pending, and its
    assignment is held."""
    blocks: tuple[str, ...] = ()
    """Tasks that wait for this one."""

    @property
    def waited_for(self) -> tuple[str, ...]:
        """Its blockers already completed."""
        return tuple(blocker for blocker in self.blocked_by if blocker not in self.waits_for)


@dataclass(frozen=True)
class Event:
    """One row of a conversation."""

    id: int
    thread_id: str
    type: str
    data: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class InboxItem:
    """A message waiting for an agent."""

    id: int
    thread_id: str
    sender: str
    task_id: str | None
    kind: str
    text: str
    priority: str
    created_at: str
    consumed_at: str | None
    wakes: bool = True
    """False for progress (an assignee's notes and status changes to its creator): delivered
    with the thread's next turn, never starting one."""


@dataclass(frozen=True)
class SpawnLimits:
    """The `[limits]` a spawn must respect, carried by its plan so that a spawn held until a
    task's blockers are completed is checked then, under the limits in force when planned."""

    max_depth: int
    max_children: int
    spawns_per_minute: int


@dataclass(frozen=True)
class AgentPlan:
    """Everything needed to create an agent: its creator (the parent thread), model, profile,
    tools and type. Made by one planner (`lace.tools.spawning.plan_spawn`); the store applies
    it."""

    parent_id: str
    provider: str
    model: str
    profile: str | None = None
    tools: tuple[str, ...] | None = None
    type: str = "persistent"
    instructions: str | None = None
    budget: dict[str, float] | None = None
    topics: tuple[str, ...] = ()
    limits: SpawnLimits | None = None
    """Checked when the agent is spawned; None spawns unchecked."""
    worktree: WorktreeOrigin | None = None
    """Where the agent's own git worktree starts; None: it works in its creator's folder."""
    trace_parent: str | None = None
    """The `traceparent` of the call that planned it: its turns are traced under that span."""

    @property
    def model_name(self) -> str:
        """`provider/model`."""
        return f"{self.provider}/{self.model}"

    @property
    def assignee(self) -> str:
        """The `new:` assignee that names this plan, as a waiting task shows it."""
        profile = f"{self.profile}:" if self.profile else ""
        return f"new:{profile}{self.model_name}"

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON, to hold it in the database."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentPlan:
        """A plan held by `to_json`."""
        tools, limits, worktree = data.get("tools"), data.get("limits"), data.get("worktree")
        return cls(**{**data, "tools": None if tools is None else tuple(tools),
                      "topics": tuple(data.get("topics") or ()),
                      "limits": None if limits is None else SpawnLimits(**limits),
                      "worktree": None if worktree is None else WorktreeOrigin(**worktree)})

    @property
    def name(self) -> str:
        """The agent's display name: its profile, else the last part of its model."""
        return self.profile or self.model.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Approval:
    """A request to run a tool whose policy is `ask`, and the decision on it."""

    id: int
    thread_id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    decided_by: str | None
    created_at: str
    decided_at: str | None
