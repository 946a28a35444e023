"""A session export as a Markdown transcript: the board, then each thread's conversation. Text
from models, tools and people sits in code blocks fenced longer than any backtick run it holds,
so it can never add headings, links or HTML of its own."""

from __future__ import annotations

import re
from typing import Any

from lace.core.usage import dollars

_BACKTICKS = re.compile(r"`+")


def fenced(text: str, info: str = "text") -> str:
    """`text` in a fenced code block that nothing in it can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def code(text: str) -> str:
    """`text` on one line as an inline code span that nothing in it can close."""
    flat = " ".join(text.split())
    longest = max((len(run) for run in _BACKTICKS.findall(flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}" if flat else "(empty)"


def _event(event: dict[str, Any]) -> str | None:
    """One conversation row: who or what, when, and its text fenced."""
    data, kind, when = event["data"], event["type"], event["created_at"]
    message = data.get("message") if isinstance(data.get("message"), dict) else {}
    content = message.get("content")
    text = content if isinstance(content, str) else None
    if kind == "agent_message":
        if not text:
            return None  # its tool calls follow as their own rows
        head = "**agent**"
    elif kind == "tool_call":
        head, text = f"**→ {code(str(data.get('tool_name')))}**", str(data.get("arguments"))
    elif kind == "tool_result":
        outcome = "error" if data.get("is_error") else "ok"
        head = f"**← {code(str(data.get('tool_name')))} {outcome}**"
    elif kind == "notification":
        head = f"**{code(str(data.get('sender')))} ({code(str(data.get('kind')))})**"
    elif kind == "user_message":
        head = "**human**"
    elif kind == "error":
        head, text = "**error**", str(data.get("error"))
    else:
        head = "**system prompt**"
    return f"{head} · {when}\n\n{fenced(text or '')}"


def _task(task: dict[str, Any], edges: list[dict[str, Any]]) -> str:
    lines = [f"### {code(task['id'])} · {task['status']} · {task['priority']}",
             "", f"- title: {code(task['title'])}",
             f"- assigned to {code(task['assigned_to'] or '(nobody)')}, created by "
             f"{code(task['created_by'])}"]
    for label, satisfied in (("after", True), ("waits for", False)):
        blockers = [code(edge["blocked_by"]) for edge in edges if edge["task_id"] == task["id"]
                    and (edge["satisfied_at"] is not None) == satisfied]
        if blockers:
            lines.append(f"- {label} {', '.join(blockers)}")
    lines += ["", fenced(task["prompt"])]
    for note in task["notes"]:
        lines += ["", f"- note by {code(note['author'])} · {note['created_at']}", "",
                  fenced(note["content"])]
    return "\n".join(lines)


def _unpriced(document: dict[str, Any]) -> str:
    """What the cost leaves out: the model calls whose price no one knows, if any."""
    count = sum(1 for call in document.get("llm_calls") or [] if call.get("cost_usd") is None)
    return f" (and {count} model call(s) of no known price)" if count else ""


def transcript(document: dict[str, Any]) -> str:
    """The whole session as Markdown."""
    usage = document.get("usage") or {}
    agents = {agent["thread_id"]: agent for agent in document["agents"]}
    root = next(t for t in document["threads"] if t["id"] == document["session"])
    parts = [f"# lace session {code(document['session'])}", "",
             f"- request: {code(root['title'] or '')}",
             f"- exported {document['exported_at']}; {len(document['threads'])} threads, "
             f"{len(document['tasks'])} tasks, {usage.get('calls', 0)} model calls, "
             f"{usage.get('tokens_in', 0)}+{usage.get('tokens_out', 0)} tokens, "
             f"{dollars(usage.get('cost_usd') or 0.0)}{_unpriced(document)}",
             "", "## Board", ""]
    edges = document.get("task_dependencies") or []
    parts += [_task(task, edges) + "\n" for task in document["tasks"]] or ["(no tasks)", ""]
    order = sorted(document["threads"], key=lambda thread: [
        int(part) for part in thread["id"].split(".")[1:]])
    for thread in order:
        agent = agents.get(thread["id"])
        who = (f" · {code(agent['name'])} · {code(agent['provider'] + '/' + agent['model'])} · "
               f"{agent['status']}") if agent else ""
        parts += [f"## Thread {code(thread['id'])}{who}", ""]
        for event in document["events"]:
            if event["thread_id"] == thread["id"] and (shown := _event(event)):
                parts += [shown, ""]
        for item in document["inbox"]:
            if item["thread_id"] == thread["id"] and item["consumed_at"] is None:
                parts += [f"**not yet read: {code(item['sender'])} ({code(item['kind'])})** · "
                          f"{item['created_at']}\n\n{fenced(item['text'])}", ""]
    return "\n".join(parts)
