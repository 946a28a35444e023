"""Turning inbox rows and events into the conversation a model sees (inside one transaction)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lace.config import Profile
from lace.core.agents import NOT_RUNNABLE
from lace.core.assignee import HUMAN
from lace.core.notifications import INTERRUPTED_CALL, LACE_SENDER, progress_block
from lace.core.records import Agent, Event, InboxItem, Lease, Place
from lace.core.tasks import ACTIVE_STATUSES
from lace.core.tool_sets import EVERY_TOOL
from lace.runtime.events import EventAppended
from lace.runtime.prompt import system_prompt
from lace.store import Later, Tx
from lace.tools.base import ToolResult

INTERRUPTED = ToolResult(INTERRUPTED_CALL, is_error=True, kind="Interrupted")


@dataclass(frozen=True)
class PendingWait:
    """A waiting tool call cut off mid-wait: the resumed turn waits for the same tasks."""

    call_id: str
    tool_name: str
    arguments: str
    task_ids: list[str]


@dataclass(frozen=True)
class Appended:
    """Rows (type, data) a transaction appended to a thread's conversation, to publish once it
    commits: on PostgreSQL their ids arrive with its last round trip (`Later`)."""

    thread_id: str
    event_ids: Later[list[int]]
    rows: list[tuple[str, dict[str, Any]]]

    @classmethod
    def of(cls, tx: Tx, thread_id: str, rows: list[tuple[str, dict[str, Any]]]) -> Appended:
        """Append `rows` to the thread in `tx`."""
        return cls(thread_id, tx.events.append_all(thread_id, rows), rows)

    def events(self) -> list[EventAppended]:
        """What to publish, once the transaction committed."""
        return [EventAppended(self.thread_id, event_id, type, data) for event_id, (type, data)
                in zip(self.event_ids.value, self.rows, strict=True)]


@dataclass(frozen=True)
class TurnStart:
    """What a turn begins with: the agent, its whole conversation, the rows just added (their
    ids once the transaction committed), and any waits to finish before the model is called
    again."""

    agent: Agent
    lease: Lease
    messages: list[dict[str, Any]]
    appended: Appended
    waits: list[PendingWait]
    worktree: bool
    """Whether the agent has its own worktree (to commit before it completes its task)."""


def dangling_calls(events: list[Event]) -> list[tuple[str, str]]:
    """Tool calls (id, name) that have no result: the turn was cut off between the two."""
    answered = {event.data.get("call_id") for event in events if event.type == "tool_result"}
    return [(call["id"], call["function"]["name"])
            for event in events if event.type == "agent_message"
            for call in event.data["message"].get("tool_calls") or []
            if call["id"] not in answered]


def without_arguments(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message as its `agent_message` event keeps it: each tool call's arguments
    are kept once, in the call's own `tool_call` event (a 30 MB call took 60 MB)."""
    if not message.get("tool_calls"):
        return message
    return {**message, "tool_calls": [
        {**call, "function": {key: value for key, value in call["function"].items()
                              if key != "arguments"}}
        for call in message["tool_calls"]]}


def conversation(events: list[Event]) -> list[dict[str, Any]]:
    """The messages a model is sent, from a thread's events: each tool call's arguments put
    back from its `tool_call` event (a thread stored by an earlier lace has them in place)."""
    arguments = {event.data.get("call_id"): event.data.get("arguments")
                 for event in events if event.type == "tool_call"}
    messages = []
    for event in events:
        if event.type == "error" or "message" not in event.data:
            continue
        message = event.data["message"]
        if message.get("tool_calls"):
            message = {**message, "tool_calls": [
                call if "arguments" in call["function"] else
                {**call, "function": {**call["function"],
                                      "arguments": arguments.get(call["id"]) or "{}"}}
                for call in message["tool_calls"]]}
        messages.append(message)
    return messages


def persisted_waits(events: list[Event]) -> dict[str, PendingWait]:
    """Waiting tool calls by call id, from their `tool_call` events."""
    return {str(event.data["call_id"]): PendingWait(
                str(event.data["call_id"]), str(event.data["tool_name"]),
                str(event.data.get("arguments") or "{}"), list(event.data["waiting_for"]))
            for event in events
            if event.type == "tool_call" and event.data.get("waiting_for") is not None}


def tool_result_data(call_id: str, tool_name: str, result: ToolResult, *,
                     waited_for: Sequence[str] = (),
                     files_changed: Sequence[str] = (),
                     server: str | None = None) -> dict[str, Any]:
    """A `tool_result` event, one shape for every tool: the message for the model plus what a
    reader needs (the error's kind, the tasks waited for, the workspace files changed, and
    for an MCP tool its server)."""
    data = {"message": {"role": "tool", "tool_call_id": call_id, "content": result.text},
            "call_id": call_id, "tool_name": tool_name, "is_error": result.is_error,
            "error_kind": result.kind, "waited_for": list(waited_for),
            "files_changed": list(files_changed)}
    if server is not None:
        data["server"] = server
    return data


def own_tools(agent: Agent) -> list[str]:
    """The tools an agent may call (names and patterns): its stored list, else every tool,
    MCP servers' included."""
    return list(agent.tools) if agent.tools is not None else list(EVERY_TOOL)


def settled_together(tx: Tx, items: list[InboxItem]) -> dict[int, dict[str, str]]:
    """For each completion notice of a batch (`tasks.batch`), the batch's tasks that have
    settled, id to status, in the order they settled: the tasks its one notice tells of."""
    settled = {}
    for item in items:
        batch = tx.tasks.batch_of(item.task_id) if item.kind == "completion" and item.task_id \
            else None
        if batch is not None:
            done = [task for task in tx.tasks.in_batch(batch)
                    if task.status not in ACTIVE_STATUSES]
            settled[item.id] = {task.id: task.status
                                for task in sorted(done, key=lambda task: task.updated_at)}
    return settled


def delivered(items: list[InboxItem], settled: Mapping[int, dict[str, str]] | None = None,
              ) -> list[tuple[dict[str, Any], bool]]:
    """The events that deliver inbox rows (their data, and whether a person wrote them): the
    progress rows first, together in one compact message, then every other row as itself (a
    batch's completion notice with the tasks it tells of: `settled_together`)."""
    progress = [item for item in items if not item.wakes]
    deliveries: list[tuple[dict[str, Any], bool]] = []
    if progress:
        deliveries.append(({
            "message": {"role": "user", "content": progress_block([i.text for i in progress])},
            "sender": LACE_SENDER, "kind": "progress", "task_id": None,
            "inbox_ids": [item.id for item in progress]}, False))
    for item in items:
        if item.wakes:
            data = {"message": {"role": "user", "content": item.text}, "sender": item.sender,
                    "kind": item.kind, "task_id": item.task_id, "inbox_id": item.id}
            if settled and item.id in settled:
                data["settled"] = settled[item.id]
            deliveries.append((data, item.sender == HUMAN and item.kind == "message"))
    return deliveries


def begin_turn(tx: Tx, thread_id: str, profiles: Mapping[str, Profile],
               budget_note: Callable[[Tx, Agent], str | None] = lambda tx, agent: None,
               holder: str = "", place: Place | None = None) -> TurnStart | None:
    """Claim the agent for process `holder` (None if another process is running it, or has
    taken its rows since it was woken): a new lease epoch, which every later write of the turn
    checks. Then seed its system prompt, close dangling calls, and move its pending inbox rows
    into `events`, in one transaction. A turn cut off mid-wait resumes the wait first, and
    leaves the inbox for the next turn."""
    claim = tx.agents.to_claim(thread_id)
    if claim is None:
        return None  # running elsewhere
    agent = claim.agent
    if agent.status in NOT_RUNNABLE or agent.inert or not agent.runs_at(place) \
            or not claim.waking:
        return None  # running elsewhere, or another process ran its rows since it was woken
    if claim.first_task is not None:
        tx.tasks.keep(claim.first_task)  # read with the claim: the system prompt's task
    lease = tx.leases.claim(agent, holder)
    tx.agents.count_turn(thread_id)
    events = [] if claim.untold else tx.events.of_thread(thread_id)
    rows: list[tuple[str, dict[str, Any]]] = []  # appended together at the end
    if not events:
        task = tx.tasks.get(agent.created_for_task) if agent.created_for_task else None
        prompt = system_prompt(agent, task, own_tools(agent), profiles)
        rows.append(("system_prompt", {"message": {"role": "system", "content": prompt}}))
    waits = persisted_waits(events)
    resumed = []
    for call_id, name in dangling_calls(events):
        if call_id in waits:
            resumed.append(waits[call_id])
        else:
            rows.append(("tool_result", tool_result_data(call_id, name, INTERRUPTED)))
    items = [] if resumed else tx.inbox.take(thread_id)
    deliveries = delivered(items, settled_together(tx, items))
    note = budget_note(tx, agent) if deliveries else None  # the row as claimed
    for number, (data, from_person) in enumerate(deliveries, start=1):
        if note and number == len(deliveries):
            data["message"]["content"] += f"\n\n{note}"
        rows.append(("user_message" if from_person else "notification", data))
    appended = [Event(id=0, thread_id=thread_id, type=type, data=data, created_at="")
                for type, data in rows]
    return TurnStart(agent=agent, lease=lease, messages=conversation([*events, *appended]),
                     appended=Appended.of(tx, thread_id, rows), waits=resumed,
                     worktree=claim.worktree)
