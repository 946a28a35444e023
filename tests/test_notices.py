"""The notices' wording is pinned (scripts and models read it), and their readers give back
what the templates wrote."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lace.core import notifications
from lace.core.records import Task

TASK = Task(id="task_20261122_a1b2c3", title="Write the announcement", description=None,
            prompt="Two paragraphs.", status="in_progress", priority="high",
            assigned_to="lace_20261122_ab12cd.1", created_by="lace_20261122_ab12cd",
            thread_id="lace_20261122_ab12cd", created_at="2026-11-22T04:18:37.123456Z",
            updated_at="2026-11-22T04:18:37.123456Z")


def test_the_notices_read_as_they_always_have() -> None:
    assert notifications.assignment(TASK) == (
        "[LACE TASK SYSTEM] You have been assigned task 'task_20261122_a1b2c3':\n"
        'Title: "Write the announcement"\n'
        "Created by: lace_20261122_ab12cd\n"
        "Priority: high\n"
        "Status: in_progress\n\n"
        "--- TASK DETAILS ---\nTwo paragraphs.\n--- END TASK DETAILS ---\n\n"
        "Use your task_add_note tool to record progress and task_complete tool when you are done.")
    done = replace(TASK, status="completed")
    assert notifications.completion(done, "lace_20261122_ab12cd.1", "Here it is.") == (
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' that you created has been completed by "
        'lace_20261122_ab12cd.1:\nTitle: "Write the announcement"\nStatus: completed\n\n'
        "Result:\nHere it is.")
    blocked = replace(TASK, status="blocked")
    assert notifications.status_changed(blocked, "human", "no access") == (
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' (\"Write the announcement\") is now "
        "blocked, changed by human.\nReason: no access")
    assert notifications.note_added(TASK, "human", "Shorter, please.") == (
        "[LACE TASK SYSTEM] human added a note to task 'task_20261122_a1b2c3' "
        "(\"Write the announcement\"):\nShorter, please.")
    assert notifications.unassigned(TASK, "human") == (
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' (\"Write the announcement\") was "
        "reassigned to lace_20261122_ab12cd.1 by human; you are no longer responsible for it.")
    assert notifications.reminder(TASK) == (
        "[LACE TASK SYSTEM] Your turn ended but task 'task_20261122_a1b2c3' (\"Write the "
        "announcement\") is still in_progress. Complete it with task_complete (the message is "
        "your result), or mark it blocked with task_update and add a note saying why. If your "
        "turn ends again without either, lace marks it blocked with your last answer as the "
        "reason.")
    assert notifications.resumed("budget") == (
        "[LACE TASK SYSTEM] You were stopped (budget) and have been resumed. Continue your "
        "work; check the board (task_list) first, your tasks may have changed meanwhile.")
    assert notifications.INTERRUPTED_TURN == (
        "[LACE TASK SYSTEM] Your previous turn was interrupted before it finished. Continue "
        "where you left off; check the board before repeating any action.")
    assert notifications.message("lace_x.1", "hi", "news") == (
        "[message from lace_x.1 on topic 'news']\nhi")


@given(title=st.text(min_size=1, max_size=200), result=st.text(max_size=300))
def test_the_readers_give_back_what_the_templates_wrote(title: str, result: str) -> None:
    task = replace(TASK, title=title)
    assert notifications.read_assignment(notifications.assignment(task)) == \
        notifications.Assigned(TASK.id, title)
    assert notifications.read_completion(notifications.completion(task, "human", result)) == \
        notifications.Completed(TASK.id, title, "human", result)
    assert notifications.read_assignment(notifications.completion(task, "human", result)) is None


def test_the_dependency_notices_read_as_pinned() -> None:
    results = [notifications.WaitedResult("task_20261122_000001", "Design", "An API."),
               notifications.WaitedResult("task_20261122_000002", "Draft", "y" * 2001)]
    assert notifications.assignment(TASK, results) == (
        "[LACE TASK SYSTEM] You have been assigned task 'task_20261122_a1b2c3':\n"
        'Title: "Write the announcement"\n'
        "Created by: lace_20261122_ab12cd\n"
        "Priority: high\n"
        "Status: in_progress\n\n"
        "--- TASK DETAILS ---\nTwo paragraphs.\n--- END TASK DETAILS ---\n\n"
        "--- RESULTS OF THE TASKS THIS ONE WAITED FOR (each cut at 2000 characters) ---\n\n"
        "Result of task 'task_20261122_000001' (\"Design\"):\nAn API.\n\n"
        "Result of task 'task_20261122_000002' (\"Draft\"):\n" + "y" * 2000
        + "… (1 more characters; task_view task_20261122_000002 shows it whole)\n"
        "--- END RESULTS ---\n\n"
        "Use your task_add_note tool to record progress and task_complete tool when you are done.")
    blocked = replace(TASK, status="blocked")
    waiting = [replace(TASK, id="task_20261122_000003", title="Post it")]
    assert notifications.cannot_start(blocked, "no access", waiting) == (
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' (\"Write the announcement\") is now "
        "blocked (no access), so these tasks you created, which wait for it, can no longer "
        "start:\n- 'task_20261122_000003' (\"Post it\")\nRemove the dependency (task_update with "
        "remove_blocked_by [\"task_20261122_a1b2c3\"]) or archive them.")
    assert notifications.release_refused(TASK, "Spawn refused: too many.") == (
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' (\"Write the announcement\") that you "
        "created can start now (the tasks it waited for are completed), but its agent was not "
        "spawned: Spawn refused: too many. The task is pending and unassigned: assign it with "
        "task_update (assigned_to), or do it yourself.")


@given(title=st.text(min_size=1, max_size=50),
       results=st.lists(st.tuples(st.text(min_size=1, max_size=50),
                                  st.text(min_size=1, max_size=300)), max_size=3))
def test_the_results_an_assignment_carries_read_back(
        title: str, results: list[tuple[str, str]]) -> None:
    waited = tuple(notifications.WaitedResult(f"task_20261122_00000{n}", done_title, result)
                   for n, (done_title, result) in enumerate(results))
    text = notifications.assignment(replace(TASK, title=title), waited)
    assert notifications.read_assignment(text) == notifications.Assigned(TASK.id, title, waited)


def test_the_roots_notices_of_a_persons_task_read_as_pinned() -> None:
    persons = replace(TASK, created_by="human", status="pending")
    assert notifications.person_added(persons) == (
        "[LACE TASK SYSTEM] The person added task 'task_20261122_a1b2c3' to the board:\n"
        'Title: "Write the announcement"\nAssigned to: lace_20261122_ab12cd.1\n\n'
        "--- TASK DETAILS ---\nTwo paragraphs.\n--- END TASK DETAILS ---\n\n"
        "Its result reaches you when it is completed. Answer the person about it.")
    done = replace(persons, status="completed")
    assert notifications.completion(done, "lace_20261122_ab12cd.1", "Here it is.").startswith(
        "[LACE TASK SYSTEM] Task 'task_20261122_a1b2c3' that the person created has been "
        "completed by lace_20261122_ab12cd.1:\n")


def test_the_roots_notice_of_a_persons_task_cuts_a_long_prompt() -> None:
    """A person's (or an MCP client's) task with a long prompt for a helper: the root, which
    only hears of it, gets the first RESULT_CAP characters and where to read the rest, not a
    copy of the whole (carried in every later call of the root, and 20 such tasks a call)."""
    long = replace(TASK, created_by="human", prompt="spec line\n" * 50_000)
    text = notifications.person_added(long)
    assert len(text) < notifications.RESULT_CAP + 500
    assert f"more characters; task_view {TASK.id} shows it whole)" in text
    assert notifications.read_person_added(text) == notifications.Added(
        TASK.id, TASK.title, TASK.assigned_to)


@given(title=st.text(min_size=1, max_size=200), result=st.text(max_size=300),
       assigned=st.booleans())
def test_the_person_added_reader_gives_back_what_its_template_wrote(
        title: str, result: str, assigned: bool) -> None:
    task = replace(TASK, title=title, created_by="human",
                   assigned_to=TASK.assigned_to if assigned else None)
    assert notifications.read_person_added(notifications.person_added(task)) == \
        notifications.Added(TASK.id, title, task.assigned_to)
    assert notifications.read_completion(notifications.completion(task, "human", result)) == \
        notifications.Completed(TASK.id, title, "human", result)
