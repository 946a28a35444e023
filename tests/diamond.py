"""A diamond plan for scripted models: the root creates A; B and C after A; D after B and C, all
for `new:scripted/worker`, in one task_create. Each worker notes, then completes with "result of
<title>", D adding the results it was handed. Every reply is read from the conversation alone,
so a run resumed after a crash goes on where it was cut off."""

from __future__ import annotations

from typing import Any

from lace.core.notifications import read_assignment
from lace.llm.demo import assignment_message, completed_calls
from lace.llm.types import ScriptedReply
from tests.scripted import reply, text
from tests.scripted_coordinator import completions

WORKER = "new:scripted/worker"
DIAMOND = [
    {"title": "A", "prompt": "Design the API.", "assigned_to": WORKER},
    {"title": "B", "prompt": "Write the client.", "assigned_to": WORKER, "blocked_by": ["#1"]},
    {"title": "C", "prompt": "Write the server.", "assigned_to": WORKER, "blocked_by": ["#1"]},
    {"title": "D", "prompt": "Review both.", "assigned_to": WORKER, "blocked_by": ["#2", "#3"]},
]


def root(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Plans the diamond, then waits for its four completions."""
    if "task_create" not in completed_calls(messages):
        return reply(None, ("task_create", {"tasks": DIAMOND}))
    if messages[-1]["role"] == "tool":
        return reply("planned")
    done = completions(messages)
    if len(done) == len(DIAMOND):
        return reply("all done: " + " | ".join(d.rsplit("\n", 1)[-1] for d in done))
    return reply(f"{len(done)} of {len(DIAMOND)} done")


def worker_result(messages: list[dict[str, Any]]) -> str:
    """What a worker completes its task with: `result of <title>`, and the results handed to
    it."""
    assigned = read_assignment(text(assignment_message(messages)))
    assert assigned is not None
    handed = "; ".join(done.result for done in assigned.results)
    return f"result of {assigned.title}" + (f" (after: {handed})" if handed else "")


def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Notes, completes, then has nothing to say."""
    assigned = read_assignment(text(assignment_message(messages)))
    if assigned is None:
        return reply("no task")
    done = completed_calls(messages)
    if "task_add_note" not in done:
        return reply(None, ("task_add_note", {"task_id": assigned.task_id, "note": "started"}))
    if "task_complete" not in done:
        return reply(None, ("task_complete", {"task_id": assigned.task_id,
                                              "message": worker_result(messages)}))
    return reply("finished")


def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """`scripted/root` plans, `scripted/worker` works."""
    return root(messages) if model == "root" else worker(messages)
