"""The texts agents receive in their inbox: assignments, completions, status changes, notes,
messages, reminders and resumes; and a reader for the two that models act on (assignment and
completion), kept beside their templates so the two cannot drift apart. Scripts and models read
these texts: their wording is pinned by a test."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from lace.core.assignee import HUMAN
from lace.core.dependencies import RESULT_CAP
from lace.core.records import Task
from lace.core.shown import shown

PREFIX = "[LACE TASK SYSTEM]"
LACE_SENDER = "lace"
"""The sender of notices that come from lace itself (reminders, resumes)."""
INBOX_KINDS: Final = ("assignment", "unassigned", "completion", "status", "note", "message",
                      "topic", "reminder", "resume")
INBOX_PRIORITIES: Final = ("high", "normal")
INTERRUPTED_TURN = (f"{PREFIX} Your previous turn was interrupted before it finished. Continue "
                    "where you left off; check the board before repeating any action.")
INTERRUPTED_CALL = ("Interrupted: this tool call did not finish (lace stopped mid-turn). Check "
                    "the board (task_list, task_view) before trying it again.")


@dataclass(frozen=True)
class WaitedResult:
    """A completed blocker as the task that waited for it hears of it: its result is its last
    note (the message it was completed with)."""

    task_id: str
    title: str
    result: str


RESULTS_HEADER = (f"--- RESULTS OF THE TASKS THIS ONE WAITED FOR (each cut at {RESULT_CAP} "
                  "characters) ---")
RESULTS_END = "--- END RESULTS ---"


def waited_results(results: Sequence[WaitedResult]) -> str:
    """The blockers' results an assignment carries, each cut at `RESULT_CAP` characters."""
    blocks = [f"Result of task '{done.task_id}' (\"{done.title}\"):\n"
              + shown(done.result, RESULT_CAP, f"task_view {done.task_id} shows it whole")
              for done in results]
    return "\n\n".join([RESULTS_HEADER, *blocks]) + f"\n{RESULTS_END}\n"


def assignment(task: Task, results: Sequence[WaitedResult] = ()) -> str:
    """The notification that hands a task to an agent, with the results of the tasks it
    waited for."""
    return (
        f"{PREFIX} You have been assigned task '{task.id}':\n"
        f'Title: "{task.title}"\n'
        f"Created by: {task.created_by}\n"
        f"Priority: {task.priority}\n"
        f"Status: {task.status}\n"
        "\n"
        "--- TASK DETAILS ---\n"
        f"{task.prompt}\n"
        "--- END TASK DETAILS ---\n"
        + (f"\n{waited_results(results)}" if results else "")
        + "\n"
        "Use your task_add_note tool to record progress and task_complete tool when you are done."
    )


def completion(task: Task, completed_by: str, message: str) -> str:
    """The notice a creator gets when its task is completed (the root, for a task the person
    created: `person_added`)."""
    creator = "the person" if task.created_by == HUMAN else "you"
    return (
        f"{PREFIX} Task '{task.id}' that {creator} created has been completed by "
        f"{completed_by}:\n"
        f'Title: "{task.title}"\n'
        "Status: completed\n"
        "\n"
        "Result:\n"
        f"{message}"
    )


UNASSIGNED = "nobody (only the person can assign it)"


def person_added(task: Task) -> str:
    """Tells a session's root that the person put a task on its board: the root speaks for the
    session, so it hears of the task now and of its result when it is completed. Its prompt is
    cut at `RESULT_CAP` characters: the root only hears of the task, and carries the notice in
    every later call."""
    assignee = task.assigned_to or UNASSIGNED
    return (
        f"{PREFIX} The person added task '{task.id}' to the board:\n"
        f'Title: "{task.title}"\n'
        f"Assigned to: {assignee}\n"
        "\n"
        "--- TASK DETAILS ---\n"
        f"{shown(task.prompt, RESULT_CAP, f'task_view {task.id} shows it whole')}\n"
        "--- END TASK DETAILS ---\n"
        "\n"
        "Its result reaches you when it is completed. Answer the person about it."
    )


def batch_settled(count: int, blocks: Sequence[str]) -> str:
    """The one notice a creator gets when the last of the `count` tasks it created together
    (in one model reply) has settled: each task's own notice (`completion`, `status_changed`)
    not delivered otherwise, in the order they settled. One block alone is sent as it is."""
    if len(blocks) == 1:
        return blocks[0]
    return "\n\n".join([f"{PREFIX} All {count} tasks you created together have finished; "
                         f"the {len(blocks)} notices follow.", *blocks])


def cannot_start(blocker: Task, reason: str | None, dependents: Sequence[Task]) -> str:
    """Tells a creator that tasks it made wait for a task that ended blocked or archived."""
    why = f" ({reason})" if reason else ""
    lines = [f"- '{task.id}' (\"{task.title}\")" for task in dependents]
    return "\n".join([
        f"{PREFIX} Task '{blocker.id}' (\"{blocker.title}\") is now {blocker.status}{why}, so "
        "these tasks you created, which wait for it, can no longer start:", *lines,
        f"Remove the dependency (task_update with remove_blocked_by [\"{blocker.id}\"]) or "
        "archive them."])


def release_refused(task: Task, reason: str) -> str:
    """Tells a creator that the agent planned for its task was refused when the task's last
    blocker was completed."""
    return (f"{PREFIX} Task '{task.id}' (\"{task.title}\") that you created can start now (the "
            f"tasks it waited for are completed), but its agent was not spawned: {reason} The "
            "task is pending and unassigned: assign it with task_update (assigned_to), or do "
            "it yourself.")


def status_changed(task: Task, changed_by: str, reason: str | None = None) -> str:
    """A short notice that a task moved to a new status."""
    text = (
        f"{PREFIX} Task '{task.id}' (\"{task.title}\") is now {task.status}, "
        f"changed by {changed_by}."
    )
    return f"{text}\nReason: {reason}" if reason else text


def note_added(task: Task, author: str, note: str) -> str:
    """A notice that someone else added a note to a task."""
    return f"{PREFIX} {author} added a note to task '{task.id}' (\"{task.title}\"):\n{note}"


PROGRESS_HEADER = f"{PREFIX} Progress on tasks you created, since your last turn:"
PROGRESS_SHOWN: Final = 10
"""The newest progress notices a turn's block carries; older ones are only counted (the block
stays in the conversation for every later call, however many tasks the person added)."""
PROGRESS_LINE_CAP: Final = RESULT_CAP + 500
"""A progress notice is cut at this many characters (a `person_added` notice, its prompt cut at
`RESULT_CAP`, fits whole; an assignee's note may be ten times longer)."""


def progress_note(task: Task, author: str, note: str) -> str:
    """One line of progress: an assignee's note, as its creator reads it with its next turn."""
    return f"- {author} noted on '{task.id}' (\"{task.title}\"): {note}"


def progress_status(task: Task, changed_by: str) -> str:
    """One line of progress: an assignee moved its task to an active status."""
    return f"- {changed_by} set '{task.id}' (\"{task.title}\") to {task.status}"


def progress_block(lines: Sequence[str]) -> str:
    """The progress rows a turn takes, as one message: the newest `PROGRESS_SHOWN`, each cut at
    `PROGRESS_LINE_CAP` characters, and how many older ones there were."""
    newest = [shown(line, PROGRESS_LINE_CAP, "task_view shows the task's notes")
              for line in lines[-PROGRESS_SHOWN:]]
    older = len(lines) - len(newest)
    more = [f"- and {older} older notices: task_list shows their tasks"] if older else []
    return "\n".join([PROGRESS_HEADER, *newest, *more])


def unassigned(task: Task, changed_by: str) -> str:
    """Tells the previous assignee it is no longer responsible."""
    return (
        f"{PREFIX} Task '{task.id}' (\"{task.title}\") was reassigned to {task.assigned_to} by "
        f"{changed_by}; you are no longer responsible for it."
    )


def prompt_changed(task: Task, changed_by: str) -> str:
    """Tells the assignee the task's instructions changed."""
    return (
        f"{PREFIX} {changed_by} changed the instructions of task '{task.id}' "
        f"(\"{task.title}\"):\n--- TASK DETAILS ---\n{task.prompt}\n--- END TASK DETAILS ---"
    )


def reminder(task: Task) -> str:
    """Tells an agent whose turn ended that its task is still open, once."""
    return (f"{PREFIX} Your turn ended but task '{task.id}' (\"{task.title}\") is still "
            f"{task.status}. Complete it with task_complete (the message is your result), or "
            "mark it blocked with task_update and add a note saying why. If your turn ends again "
            "without either, lace marks it blocked with your last answer as the reason.")


def resumed(reason: str) -> str:
    """Tells a stopped (or failed) agent that a person set it going again."""
    return (f"{PREFIX} You were stopped ({reason}) and have been resumed. Continue your work; "
            "check the board (task_list) first, your tasks may have changed meanwhile.")


def message(sender: str, text: str, topic: str | None = None) -> str:
    """A direct or topic message as its recipient reads it: who sent it, and where."""
    where = f" on topic '{topic}'" if topic else ""
    return f"[message from {sender}{where}]\n{text}"


@dataclass(frozen=True)
class Assigned:
    """What an assignment notice says: the task, its title, and the results of the tasks it
    waited for."""

    task_id: str
    title: str
    results: tuple[WaitedResult, ...] = ()


@dataclass(frozen=True)
class Added:
    """What a `person_added` notice says: the task, its title and its assignee (None: nobody)."""

    task_id: str
    title: str
    assigned_to: str | None


@dataclass(frozen=True)
class Completed:
    """What a completion notice says: the task, its title, who completed it and the result."""

    task_id: str
    title: str
    completed_by: str
    result: str


_ASSIGNED = re.compile(re.escape(PREFIX) + r" You have been assigned task '(?P<id>[^']+)':\n"
                       r"Title: \"(?P<title>.*?)\"\nCreated by: ", re.DOTALL)
_WAITED = re.compile(r"^Result of task '(?P<id>[^']+)' \(\"(?P<title>.*?)\"\):\n(?P<result>.*?)"
                     r"(?=\n\nResult of task '|\n" + re.escape(RESULTS_END) + ")",
                     re.DOTALL | re.MULTILINE)
_ADDED = re.compile(re.escape(PREFIX) + r" The person added task '(?P<id>[^']+)' to the board:\n"
                    r"Title: \"(?P<title>.*?)\"\nAssigned to: (?P<assignee>[^\n]*)\n", re.DOTALL)
_COMPLETED = re.compile(re.escape(PREFIX) + r" Task '(?P<id>[^']+)' that (?:you|the person) "
                        r"created has been "
                        r"completed by (?P<by>\S+):\nTitle: \"(?P<title>.*?)\"\nStatus: completed"
                        r"\n\nResult:\n(?P<result>.*?)(?=\n\n\[LACE [A-Z ]+\] |\Z)",
                        re.DOTALL)


def read_assignment(text: str) -> Assigned | None:
    """The fields of an assignment notice (`assignment`'s text), or None for other text."""
    found = _ASSIGNED.search(text)
    if found is None:
        return None
    results = tuple(WaitedResult(done["id"], done["title"], done["result"])
                    for done in _WAITED.finditer(text, found.end()))
    return Assigned(found["id"], found["title"], results)


def read_person_added(text: str) -> Added | None:
    """The fields of a `person_added` notice, or None for other text."""
    found = _ADDED.search(text)
    if found is None:
        return None
    assignee = found["assignee"]
    return Added(found["id"], found["title"], None if assignee == UNASSIGNED else assignee)


def read_completion(text: str) -> Completed | None:
    """The fields of a completion notice (`completion`'s text), or None for other text; the
    first, in a batch's notice (`read_completions` reads them all)."""
    found = read_completions(text)
    return found[0] if found else None


def read_completions(text: str) -> list[Completed]:
    """The fields of every completion notice in a text: one, or each of a batch's notice (a
    result ends where the next notice of lace begins, or lace's budget line)."""
    return [Completed(found["id"], found["title"], found["by"], found["result"])
            for found in _COMPLETED.finditer(text)]
