"""The texts agents receive about tasks: assignment, completion, status changes and notes."""

from __future__ import annotations

from lace.core.records import Task

PREFIX = "[LACE TASK SYSTEM]"


def assignment(task: Task) -> str:
    """The notification that hands a task to an agent."""
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
        "\n"
        "Use your task_add_note tool to record progress and task_complete tool when you are done."
    )


def completion(task: Task, completed_by: str, message: str) -> str:
    """The notice a creator gets when its task is completed."""
    return (
        f"{PREFIX} Task '{task.id}' that you created has been completed by {completed_by}:\n"
        f'Title: "{task.title}"\n'
        "Status: completed\n"
        "\n"
        "Result:\n"
        f"{message}"
    )


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
