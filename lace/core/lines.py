"""One-line texts of tasks, threads, events and tool calls, as the tools show them to a model
and the front ends to a person: pure formatting, so every reader words them alike."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from lace.core.dependencies import task_label
from lace.core.records import Agent, Task, Thread
from lace.core.shown import named_few
from lace.core.tasks import task_symbol


class SubtreeUsage(Protocol):
    """What a subtree has used, as `agent_line` shows it."""

    @property
    def tokens(self) -> int: ...

    @property
    def cost_usd(self) -> float: ...


def task_line(task: Task) -> str:
    """One line of a task list: symbol, id, priority, title, assignee, status, and the tasks it
    came after, waits for and blocks (read with its edges)."""
    assignee = task.assigned_to or "unassigned"
    line = (f"{task_symbol(task)} {task.id} [{task.priority}] {task.title} "
            f"→ {assignee} [{task.status}]")
    if task.waited_for:
        line += f" after {', '.join(task.waited_for)}"
    if task.waits_for:
        line += f" waits for {', '.join(task.waits_for)}"
    if task.blocks:
        line += f" blocks {', '.join(task.blocks)}"
    return line


MOST_NAMED = 3
"""How many tasks a progress line names in a row before it counts the rest."""


def settled_line(settled: Mapping[str, str]) -> str:
    """The tasks one notice tells of (id to status, in the order they settled), grouped by
    status: `t1, t2, t3 and 4 more completed; t8 blocked`."""
    groups: dict[str, list[str]] = {}
    for task_id, status in settled.items():
        groups.setdefault(status, []).append(task_id)
    return "; ".join(f"{named_few(ids, MOST_NAMED)} {status}" for status, ids in groups.items())


def related_list(task_ids: tuple[str, ...], related: Mapping[str, Task]) -> str:
    """Tasks named with their titles and statuses (`related`: the tasks by id)."""
    return ", ".join(f"{task_label(task_id, related[task_id].title)} [{related[task_id].status}]"
                     if task_id in related else task_id for task_id in task_ids)


def event_text(event_type: str, data: dict[str, Any]) -> str:
    """One conversation event as a line of text: a message, a call, a result or an error."""
    message = data.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if event_type == "tool_call":
        return f"{data.get('tool_name')}({data.get('arguments', '')})"
    if event_type == "tool_result":
        mark = "error" if data.get("is_error") else "ok"
        return f"{data.get('tool_name')} {mark}: {content}"
    if event_type == "agent_message" and not content:
        return "(tool calls follow)"
    if event_type == "error":
        return str(data.get("error"))
    return str(content if content is not None else json.dumps(data))


def agent_line(thread: Thread, agent: Agent | None, task_titles: dict[str, str],
               usage: SubtreeUsage) -> str:
    """A thread of the tree: id (indented by depth), agent, model, status, task and usage."""
    label = f"{'  ' * thread.id.count('.')}{thread.id}"
    if agent is None:
        return f"{label}  (no agent)"
    task = task_titles.get(agent.current_task or "", "")
    reason = f" ({agent.stop_reason})" if agent.stop_reason else ""
    return (f"{label}  {agent.name}  {agent.model_name}  [{agent.status}{reason}]"
            f"{'  ' + repr(task) if task else ''}  "
            f"{agent.tokens_in}+{agent.tokens_out} tok  ${agent.cost_usd:.4f}  "
            f"subtree {usage.tokens} tok ${usage.cost_usd:.4f}")


def in_tree_order(threads: list[Thread]) -> list[Thread]:
    """Threads as a tree reads: each after its parent, children by number (2 before 10)."""
    return sorted(threads, key=lambda thread: [int(part) if part.isdigit() else 0
                                               for part in thread.id.split(".")[1:]])

