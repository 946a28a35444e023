"""The shape of a session export (`lace export --format json`, `lace import`): one JSON
document, checked whole (fields, values, and that every reference names a row of the document)
before anything is written. docs/export.md describes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from lace.core.agents import AgentStatus, AgentType
from lace.core.assignee import HUMAN, NEW_PREFIX, parse_model
from lace.core.clock import iso
from lace.core.dependencies import any_cycle
from lace.core.errors import LaceError
from lace.core.ids import TASK_ID_RE, THREAD_ID_RE
from lace.core.notifications import INBOX_KINDS, INBOX_PRIORITIES
from lace.core.records import APPROVAL_STATUSES, EVENT_TYPES
from lace.core.tasks import Priority, Status
from lace.core.tool_names import ALL_TOOL_NAMES, unknown_tool_problem
from lace.core.usage import MAX_CALL_COST_USD, MAX_CALL_TOKENS, MAX_LATENCY_MS

FORMAT = "lace-session"
VERSION = 1


def _one_of(values: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return value

    return AfterValidator(check)


def _time(value: str) -> str:
    """An ISO 8601 time, written as lace writes it; one after now is now: a file's clock is
    not believed past this one's (a session from the future would stay the latest for ever,
    and its budget of seconds would never run out)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("not a time as lace writes it (2026-11-23T01:57:30.055994Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso(min(moment, datetime.now(UTC)))


ThreadId = Annotated[str, StringConstraints(pattern=THREAD_ID_RE.pattern)]
TaskId = Annotated[str, StringConstraints(pattern=TASK_ID_RE.pattern)]
Count = Annotated[int, Field(ge=0, le=2**62)]
"""A whole number a total can reach (SQLite and PostgreSQL hold up to 2**63 - 1)."""
CallCount = Annotated[int, Field(ge=0, le=MAX_CALL_TOKENS)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
CallCost = Annotated[float, Field(ge=0, le=MAX_CALL_COST_USD, allow_inf_nan=False)]
Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)]
Time = Annotated[str, AfterValidator(_time)]


class Row(BaseModel):
    """A row: exactly these fields."""

    model_config = ConfigDict(extra="forbid")


class ThreadRow(Row):
    id: ThreadId
    parent_id: ThreadId | None
    root_id: ThreadId
    title: str | None
    created_at: Time
    updated_at: Time


class AgentRow(Row):
    thread_id: ThreadId
    name: str
    provider: str
    model: str
    profile: str | None
    type: AgentType
    status: AgentStatus
    created_for_task: TaskId | None
    parent_thread_id: ThreadId | None
    current_task: TaskId | None
    tools: list[str] | None
    instructions: str | None
    stop_reason: str | None
    budget: dict[str, float] | None
    turns: Count
    stopped_by_person: bool
    tokens_in: Count = Field(description="its calls' totals: recomputed from llm_calls")
    tokens_out: Count
    cost_usd: Cost
    created_at: Time
    updated_at: Time


class NoteRow(Row):
    author: str
    content: str
    created_at: Time


class TaskRow(Row):
    id: TaskId
    title: str
    description: str | None
    prompt: str
    status: Status
    priority: Priority
    assigned_to: str | None
    created_by: str
    thread_id: ThreadId
    created_at: Time
    updated_at: Time
    held_assignment: dict[str, Any] | None = Field(
        default=None, description="what the task's assignment does when its last blocker is "
        "completed: {\"agent\": plan} spawns, {\"thread\": id} tells")
    batch: str | None = Field(
        default=None, max_length=100, description="the batch of tasks its creator made in one "
        "model reply: they tell it once, when the last of them settles")
    notes: list[NoteRow]


class DependencyRow(Row):
    task_id: TaskId
    blocked_by: TaskId
    created_at: Time
    satisfied_at: Time | None


class HeldLimits(Row):
    max_depth: Count
    max_children: Count
    spawns_per_minute: Count


class HeldWorktree(Row):
    """Where the planned helper's own git worktree starts (`lace.core.worktrees`)."""

    repository: str
    base_branch: str
    base_commit: str
    folders: str


class HeldPlan(Row):
    """The agent a waiting task spawns when released (`lace.core.records.AgentPlan`)."""

    parent_id: ThreadId
    provider: str
    model: str
    profile: str | None
    tools: list[str] | None
    type: AgentType
    instructions: str | None
    budget: dict[str, float] | None
    topics: list[str]
    limits: HeldLimits | None
    worktree: HeldWorktree | None = None


class HeldAssignment(Row):
    agent: HeldPlan | None = None
    thread: ThreadId | None = None


class EventRow(Row):
    id: int
    thread_id: ThreadId
    type: Annotated[str, _one_of(EVENT_TYPES)]
    data: dict[str, Any]
    created_at: Time


class InboxRow(Row):
    id: int
    thread_id: ThreadId
    sender: str
    task_id: TaskId | None
    kind: Annotated[str, _one_of(INBOX_KINDS)]
    text: str
    priority: Annotated[str, _one_of(INBOX_PRIORITIES)]
    created_at: Time
    consumed_at: Time | None
    wakes: bool
    held_for: str | None = Field(
        default=None, max_length=100, description="the batch this notice is held for: it is "
        "delivered inside the batch's one notice when the last of its tasks settles")


class CallRow(Row):
    thread_id: ThreadId
    model: str
    prompt_tokens: CallCount
    completion_tokens: CallCount
    cost_usd: CallCost | None = Field(description="None: the model has no known price")
    latency_ms: Latency | None
    error: str | None
    created_at: Time
    cache_read_tokens: CallCount | None = None
    cache_write_tokens: CallCount | None = None
    reasoning_tokens: CallCount | None = None


class SubscriptionRow(Row):
    thread_id: ThreadId
    topic: str
    created_at: Time


class ApprovalRow(Row):
    thread_id: ThreadId
    tool: str
    arguments: dict[str, Any]
    status: Annotated[str, _one_of(APPROVAL_STATUSES)]
    decided_by: str | None
    created_at: Time
    decided_at: Time | None


class SessionDocument(Row):
    """A whole session: its threads, agents, board, conversations, inboxes and usage."""

    format: Literal["lace-session"]
    version: int
    session: ThreadId
    exported_at: Time
    lace_version: str | None = None
    threads: list[ThreadRow] = Field(min_length=1)
    agents: list[AgentRow]
    tasks: list[TaskRow]
    events: list[EventRow]
    inbox: list[InboxRow]
    llm_calls: list[CallRow]
    subscriptions: list[SubscriptionRow]
    approvals: list[ApprovalRow]
    task_dependencies: list[DependencyRow] = Field(default_factory=list)
    usage: dict[str, float] = Field(default_factory=dict,
                                    description="totals for a reader; not imported")


def is_new_spec(assigned_to: str | None) -> bool:
    """Whether `assigned_to` names a planned agent (`new:...`), as a waiting task shows it."""
    return assigned_to is not None and assigned_to.startswith(NEW_PREFIX)


def _unique(kind: str, ids: list[Any]) -> None:
    seen: set[Any] = set()
    for value in ids:
        if value in seen:
            raise ValueError(f"{kind} {value!r} appears twice")
        seen.add(value)


def reference_problem(document: SessionDocument) -> str | None:
    """The first reference that names no row of the document (or breaks the thread tree),
    or None when every one holds."""
    try:
        _check_references(document)
    except ValueError as error:
        return str(error)
    return None


def _check_references(document: SessionDocument) -> None:
    root = document.session
    threads = {thread.id: thread for thread in document.threads}
    _unique("thread", [thread.id for thread in document.threads])
    _unique("task", [task.id for task in document.tasks])
    _unique("agent", [agent.thread_id for agent in document.agents])
    _unique("event id", [event.id for event in document.events])
    _unique("inbox id", [item.id for item in document.inbox])
    if root not in threads or threads[root].parent_id is not None:
        raise ValueError(f"session {root} is not a root thread of the document")
    for thread in document.threads:
        expected_parent = thread.id.rpartition(".")[0] or None
        if thread.root_id != root or thread.parent_id != expected_parent:
            raise ValueError(f"thread {thread.id} does not belong under {root}")
        if thread.parent_id is not None and thread.parent_id not in threads:
            raise ValueError(f"thread {thread.id} names parent {thread.parent_id}, which is not "
                             "in the document")
    tasks, thread_ids = {task.id for task in document.tasks}, set(threads)
    actors = {*threads, HUMAN}

    def need(kind: str, value: str | None, known: set[str], where: str) -> None:
        if value is not None and value not in known:
            raise ValueError(f"{where} names {kind} {value!r}, which is not in the document")

    agents = {agent.thread_id: agent for agent in document.agents}
    for agent in document.agents:
        _check_agent(agent, agents)
        need("thread", agent.thread_id, thread_ids, "an agent")
        need("thread", agent.parent_thread_id, thread_ids, f"agent {agent.thread_id}")
        need("task", agent.created_for_task, tasks, f"agent {agent.thread_id}")
        need("task", agent.current_task, tasks, f"agent {agent.thread_id}")
    for task in document.tasks:
        need("session", task.thread_id, {root}, f"task {task.id}")
        if task.held_assignment is None or not is_new_spec(task.assigned_to):
            need("assignee", task.assigned_to, actors, f"task {task.id}")
        need("creator", task.created_by, actors, f"task {task.id}")
        if task.held_assignment is not None:
            _check_held(task, agents, thread_ids)
    _check_dependencies(document.task_dependencies, tasks)
    inbox_ids = {item.id for item in document.inbox}
    for event in document.events:
        need("thread", event.thread_id, thread_ids, f"event {event.id}")
        for inbox_id in _inbox_ids(event.data):
            if inbox_id not in inbox_ids:
                raise ValueError(f"event {event.id} names inbox row {inbox_id!r}, which is not "
                                 "in the document")
    for item in document.inbox:
        need("thread", item.thread_id, thread_ids, f"inbox row {item.id}")
        need("task", item.task_id, tasks, f"inbox row {item.id}")
    for kind, rows in (("llm_calls", document.llm_calls),
                       ("subscriptions", document.subscriptions),
                       ("approvals", document.approvals)):
        for row in rows:
            need("thread", row.thread_id, thread_ids, f"a row of {kind}")


def _check_agent(agent: AgentRow, agents: dict[str, AgentRow]) -> None:
    """An agent's model is a name lace accepts, and its tools are lace's and never more than
    its creator's (tools only shrink, in an imported session too)."""
    _check_model_and_tools(f"agent {agent.thread_id}", agent.provider, agent.model,
                           agent.tools, agents.get(agent.parent_thread_id or ""))


def _check_model_and_tools(who: str, provider: str, model: str, tools: list[str] | None,
                           creator: AgentRow | None) -> None:
    try:
        parse_model(f"{provider}/{model}")
    except LaceError as error:
        raise ValueError(f"{who}: {error}") from None
    for tool in tools or []:
        if problem := unknown_tool_problem(tool):
            raise ValueError(f"{who}: {problem}")
    if creator is not None and creator.tools is not None:
        extra = sorted(set(tools if tools is not None else ALL_TOOL_NAMES) - set(creator.tools))
        if extra:
            raise ValueError(f"{who} has tools its creator lacks: {', '.join(extra)}")


def _check_held(task: TaskRow, agents: dict[str, AgentRow], threads: set[str]) -> None:
    """A held assignment tells an agent of the document, or plans one under a thread of it
    the way a spawn would: a model lace accepts, tools never more than its creator's."""
    try:
        held = HeldAssignment.model_validate(task.held_assignment)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"task {task.id}: held_assignment.{where}: {problem['msg']}") from None
    if (held.agent is None) == (held.thread is None):
        raise ValueError(f"task {task.id}: held_assignment holds one of agent or thread")
    if held.thread is not None and held.thread not in agents:
        raise ValueError(f"task {task.id} holds agent {held.thread!r}, which is not in the "
                         "document")
    if held.agent is not None:
        plan = held.agent
        if plan.parent_id not in threads:
            raise ValueError(f"task {task.id} plans an agent under {plan.parent_id!r}, which "
                             "is not in the document")
        _check_model_and_tools(f"the agent task {task.id} plans", plan.provider, plan.model,
                               plan.tools, agents.get(plan.parent_id))


def _check_dependencies(edges: list[DependencyRow], tasks: set[str]) -> None:
    """Each edge ties two tasks of the document, once, and no task waits for itself."""
    _unique("dependency", [(edge.task_id, edge.blocked_by) for edge in edges])
    blockers: dict[str, list[str]] = {}
    for edge in edges:
        for task_id in (edge.task_id, edge.blocked_by):
            if task_id not in tasks:
                raise ValueError(f"a dependency names task {task_id!r}, which is not in the "
                                 "document")
        blockers.setdefault(edge.task_id, []).append(edge.blocked_by)
    cycle = any_cycle(blockers)
    if cycle is not None:
        raise ValueError(f"the dependencies make a cycle: {' → '.join(cycle)}")


def _inbox_ids(data: dict[str, Any]) -> list[Any]:
    """The inbox rows an event delivered (`inbox_id`, or `inbox_ids` for a progress block)."""
    single = [data["inbox_id"]] if "inbox_id" in data else []
    many = data.get("inbox_ids")
    return single + (list(many) if isinstance(many, list) else [])


def parse_document(value: Any) -> SessionDocument:
    """A decoded export checked whole, or LaceError naming the first problem."""
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise LaceError(f'not a lace session export (it has no "format": "{FORMAT}")')
    if value.get("version") != VERSION:
        raise LaceError(f"a version {value.get('version')!r} export; this lace reads version "
                        f"{VERSION}")
    try:
        document = SessionDocument.model_validate(value)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"]) or "the document"
        raise LaceError(f"{where}: {problem['msg']}") from None
    problem_text = reference_problem(document)
    if problem_text:
        raise LaceError(problem_text)
    return document
