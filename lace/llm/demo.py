"""The offline demo model: a coordinator that splits a request into tasks for `new:demo/worker`
agents plus one that waits for them and sums up their results, and a worker that notes progress
and completes its task (summing up the results its assignment carries, if any)."""

from __future__ import annotations

import re
from typing import Any

from lace.core.notifications import (
    PREFIX,
    RESULTS_HEADER,
    read_assignment,
    read_completions,
    read_person_added,
)
from lace.llm.types import ScriptedReply

WORKER_MODEL = "new:demo/worker"
SUMMARY_TITLE = "Sum up the results"
_CREATED = re.compile(r"^Created task (\S+): ", re.MULTILINE)


def split_request(request: str) -> list[str]:
    """Two or three parts of a request, one per task."""
    parts = [part.strip(" .") for part in re.split(r"[.;:\n]|,| and ", request)]
    parts = [part for part in parts if len(part) > 2][:3]
    if len(parts) < 2:
        topic = request.strip(" .")[:150] or "the request"
        parts = [f"Research {topic}", f"Draft an answer to {topic}"]
    return parts


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def coordinator(messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root demo agent."""
    last = messages[-1]
    created = [task for message in messages if message.get("role") == "tool"
               for task in _CREATED.findall(_text(message))]
    persons = persons_tasks(messages, created)
    if persons is not None:
        return persons
    if last.get("role") == "tool":
        if not created:
            return ScriptedReply(text=f"I could not create the tasks: {_text(last)}")
        return ScriptedReply(text=f"I planned {len(created)} tasks for new demo workers; the last "
                                  "one waits for the others and sums up their results. I will "
                                  "report when they are done.")
    request = _text(last)
    if not request.startswith(PREFIX) or not created:
        original = next((_text(m) for m in messages if m.get("role") == "user"
                         and not _text(m).startswith(PREFIX)), request)
        parts = split_request(original)
        tasks: list[dict[str, Any]] = [
            {"title": part[:200], "prompt": f"{part}. Report the result when done.",
             "assigned_to": WORKER_MODEL} for part in parts]
        tasks.append({"title": SUMMARY_TITLE, "assigned_to": WORKER_MODEL,
                      "prompt": "Sum up the results of the other tasks in a few lines.",
                      "blocked_by": [f"#{number}" for number in range(1, len(parts) + 1)]})
        return ScriptedReply(tool_calls=[("task_create", {"tasks": tasks})])
    results = {done.task_id: (done.title, done.result.strip())
               for message in messages if message.get("role") == "user"
               for done in read_completions(_text(message))}
    if created and all(task in results for task in created):
        lines = [f"- {results[task][0]}: {results[task][1]}" for task in created]
        return ScriptedReply(text=f"All {len(created)} tasks are done.\n" + "\n".join(lines))
    return ScriptedReply(text=f"{len(results)} of {len(created)} tasks done; waiting for the rest.")


def persons_tasks(messages: list[dict[str, Any]], created: list[str]) -> ScriptedReply | None:
    """The root's reply about tasks the person added to the board, when what came since its
    last reply is about them: one assigned to the root it completes, then reports; others'
    results it reports, else that they were added."""
    answered = max((number for number, message in enumerate(messages)
                    if message.get("role") == "assistant"), default=-1)
    news = [_text(message) for message in messages[answered + 1:]]
    if news and news[-1].startswith("Completed task "):  # its own task_complete
        taken = next(task for message in reversed(messages)
                     if (task := read_assignment(_text(message))))
        return ScriptedReply(text=f"The person's task is done:\n- {taken.title}: "
                                  f"{root_answer(taken.title)}")
    given = [task for text in news if (task := read_assignment(text))]
    if given:
        return ScriptedReply(tool_calls=[("task_complete", {
            "task_id": given[0].task_id, "message": root_answer(given[0].title)})])
    done = [found for text in news for found in read_completions(text)
            if found.task_id not in created]
    if done:
        lines = [f"- {found.title}: {found.result.strip()}" for found in done]
        return ScriptedReply(text=f"The person's task{'s are' if len(done) > 1 else ' is'} "
                                  "done:\n" + "\n".join(lines))
    added = [new for text in news if (new := read_person_added(text))]
    if added:
        lines = [f"- '{new.title}', " + (f"which {new.assigned_to} works on: I will report "
                                         "its result" if new.assigned_to else
                                         "which nobody works on until it is assigned")
                 for new in added]
        return ScriptedReply(text="The person added to the board:\n" + "\n".join(lines))
    return None


def root_answer(title: str) -> str:
    """What the demo root completes a task the person gave it with."""
    return f"Done: a short, checked answer for '{title}' (demo coordinator output)."


def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """A demo helper: one note, then completion."""
    assignment = next((assigned for message in reversed(messages)
                       if (assigned := read_assignment(_text(message)))), None)
    if assignment is None:
        return ScriptedReply(text="I have no task to work on.")
    task_id, title, waited = assignment.task_id, assignment.title, assignment.results
    called = completed_calls(messages)
    if "task_add_note" not in called:
        start = f"reading the {len(waited)} results it waited for" if waited else \
            "gathering the main points"
        return ScriptedReply(tool_calls=[("task_add_note", {
            "task_id": task_id, "note": f"Started on '{title}': {start}."})])
    own_text = _text(assignment_message(messages)).split(RESULTS_HEADER)[0]  # not the results
    wants_file = "file" in own_text.lower()
    path = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] + ".md"
    if wants_file and "file_write" not in called:
        return ScriptedReply(tool_calls=[("file_write", {
            "path": path, "content": f"# {title}\n\nA first draft by the demo worker.\n"})])
    if "task_complete" not in called or messages[-1].get("role") == "user":
        written = [_text(m) for m in messages if m.get("role") == "tool"
                   and _text(m).startswith("Wrote ")]
        where = f" The draft is in {path}." if written else ""
        if wants_file and not written:
            where = " I could not write the file (the tool was denied or failed)."
        result = f"Done: a short, checked answer for '{title}' (demo worker output).{where}"
        if waited:
            names = ", ".join(f"'{done.title}'" for done in waited)
            result = (f"Done: summed up {len(waited)} results ({names}); each is a short, "
                      f"checked answer (demo worker output).{where}")
        return ScriptedReply(tool_calls=[("task_complete", {"task_id": task_id,
                                                            "message": result})])
    return ScriptedReply(text=f"Task {task_id} is complete.")


def assignment_message(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The latest task assignment in a conversation (or an empty message)."""
    return next((m for m in reversed(messages) if read_assignment(_text(m))), {})


def completed_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Names of the tool calls that finished: a call cut off by a crash (its result says
    "Interrupted") is made again, as a careful model would."""
    results = {m.get("tool_call_id"): _text(m) for m in messages if m.get("role") == "tool"}
    return [call["function"]["name"] for message in messages
            for call in message.get("tool_calls") or []
            if not results.get(call["id"], "").startswith("Interrupted")]


def demo_reply(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Answer as `demo/<model>`: `worker` works tasks, anything else coordinates."""
    return worker(messages) if model.endswith("worker") else coordinator(messages)
