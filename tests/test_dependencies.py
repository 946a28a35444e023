"""Task dependencies (`blocked_by`): a plan as a graph in one task_create, each task started in
the transaction that completes its last blocker, with their results; every bad edge refused
with nothing written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits
from lace.core.records import NewAgent, Thread
from lace.llm.checks import check_provider
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.runtime.tool_runner import call_tool
from lace.store import Store
from lace.tools.base import ToolContext, ToolResult
from tests import diamond
from tests.conftest import Caller, new_session, query, run_cli, spawn_child
from tests.scripted import ScriptedModels, text, tools_called

Unchanged = Callable[[], Any]


pytestmark = pytest.mark.both_engines

def created(result: ToolResult) -> list[str]:
    """The task ids a task_create result names, in order."""
    assert not result.is_error, result.text
    return [line.split()[2].rstrip(":") for line in result.text.splitlines()
            if line.startswith("Created task ")]


def plan(call: Caller, *items: dict[str, Any], actor: str | None = None) -> list[str]:
    """Create `items` in one task_create (as `actor`, in its session); their ids."""
    session_id = actor.split(".")[0] if actor else None
    return created(call("task_create", {"tasks": [
        {"prompt": f"do {item['title']}", **item} for item in items]}, actor=actor,
        session_id=session_id))


def assert_error(result: ToolResult, *fragments: str) -> None:
    assert result.is_error, result.text
    for fragment in fragments:
        assert fragment in result.text, result.text


def inbox(db_path: Path, thread_id: str) -> list[tuple[str, str]]:
    return query(db_path, "SELECT kind, text FROM inbox WHERE thread_id = ? ORDER BY id",
                 thread_id)


def agent_call(store: Store, session: Thread, actor: str, tool: str,
               arguments: dict[str, Any]) -> ToolResult:
    context = ToolContext(thread_id=actor, session_id=session.id, check_model=check_provider)
    return call_tool(store, context, tool, arguments)


# the diamond, through the runtime


async def test_a_diamond_starts_each_task_after_its_blockers_with_their_results(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    """A; B and C after A; D after B and C, all `new:scripted/worker` in one task_create: B's
    and C's first requests come only once A is completed, D's once both are, and D's carries
    their results."""
    firsts: dict[str, tuple[dict[str, str], list[dict[str, Any]]]] = {}

    def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):  # this agent's first request
            title = diamond.worker_result(messages).split()[2]
            statuses = dict(query(db_path, "SELECT title, status FROM tasks"))
            firsts[title] = (statuses, messages)
        return diamond.worker(messages)

    models.on("root", diamond.root)
    models.on("worker", worker)
    session = await runtime.start_session("Plan it.", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)

    assert sorted(firsts) == ["A", "B", "C", "D"]
    assert firsts["A"][0] == {"A": "in_progress", "B": "pending", "C": "pending",
                              "D": "pending"}
    for title in ("B", "C"):
        assert firsts[title][0]["A"] == "completed" and firsts[title][0]["D"] == "pending"
    assert firsts["D"][0] == {"A": "completed", "B": "completed", "C": "completed",
                              "D": "in_progress"}
    first_request = "\n".join(text(message) for message in firsts["D"][1])
    assert "result of B (after: result of A)" in first_request
    assert "result of C (after: result of A)" in first_request
    assert "RESULTS OF THE TASKS THIS ONE WAITED FOR (each cut at 2000 characters)" in \
        first_request
    spawned = query(db_path, "SELECT t.title, COUNT(*) FROM agent_metadata a JOIN tasks t ON "
                             "t.id = a.created_for_task GROUP BY t.title ORDER BY t.title")
    assert spawned == [("A", 1), ("B", 1), ("C", 1), ("D", 1)]
    (d_result,), = query(db_path, "SELECT n.content FROM task_notes n JOIN tasks t ON t.id = "
                                  "n.task_id WHERE t.title = 'D' ORDER BY n.id DESC LIMIT 1")
    assert d_result == ("result of D (after: result of B (after: result of A); result of C "
                        "(after: result of A))")
    # the plan is one batch: one notice when D is done, with all four results
    assert models.calls_of("root")[-1][-1]["content"].count("has been completed") == 4
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL") == [(0,)]


# creating a plan


def test_one_call_creates_the_plan_and_only_the_first_task_starts(
        call: Caller, db_path: Path, session: Thread) -> None:
    result = call("task_create", {"tasks": [{**item, "prompt": "p"}
                                            for item in diamond.DIAMOND]})
    a, b, c, d = created(result)
    lines = result.text.splitlines()
    assert lines == [
        f"Created task {a}: A (assigned to {session.id}.1)",
        f"Created task {b}: B (assigned to new:scripted/worker)",
        f"  {b} waits for {a}: it starts when they are completed.",
        f"Created task {c}: C (assigned to new:scripted/worker)",
        f"  {c} waits for {a}: it starts when they are completed.",
        f"Created task {d}: D (assigned to new:scripted/worker)",
        f"  {d} waits for {b}, {c}: it starts when they are completed."]
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(2,)]
    assert query(db_path, "SELECT title, status, held_assignment IS NOT NULL FROM tasks "
                          "ORDER BY title") == [
        ("A", "in_progress", 0), ("B", "pending", 1), ("C", "pending", 1), ("D", "pending", 1)]
    assert sorted(query(db_path, "SELECT task_id, blocked_by, satisfied_at FROM "
                                 "task_dependencies")) == sorted(
        [(b, a, None), (c, a, None), (d, b, None), (d, c, None)])
    assert sorted(query(db_path, "SELECT title, waits_for FROM task_board")) == [
        ("A", None), ("B", a), ("C", a), ("D", f"{b}, {c}")]
    listed = call("task_list", {"filter": "all"}).text.splitlines()
    assert listed[-1] == (f"◐ {a} [medium] A → {session.id}.1 [in_progress] blocks {b}, {c}")
    assert f"⧖ {d} [medium] D → new:scripted/worker [pending] waits for {b}, {c}" in listed
    view = call("task_view", {"task_id": d}).text
    assert f'Waits for: {b} ("B") [pending], {c} ("C") [pending]; it starts when they are ' \
        "completed." in view
    assert f'Blocks: {b} ("B") [pending], {c} ("C") [pending]' in \
        call("task_view", {"task_id": a}).text


def test_blockers_already_completed_start_the_task_at_once_with_their_results(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    helper = spawn_child(store, session.id)
    (first,) = plan(call, {"title": "First", "assigned_to": "human"})
    call("task_complete", {"task_id": first, "message": "x" * 2500})
    (second,) = plan(call, {"title": "Second", "assigned_to": helper, "blocked_by": [first]})
    (kind, notice), = inbox(db_path, helper)
    assert kind == "assignment" and f"Result of task '{first}' (\"First\"):\n" in notice
    assert "x" * 2000 + f"… (500 more characters; task_view {first} shows it whole)" in notice
    assert "x" * 2001 not in notice
    assert query(db_path, "SELECT satisfied_at IS NOT NULL FROM task_dependencies") == [(1,)]
    assert f"after {first}" in call("task_list", {}).text
    assert query(db_path, "SELECT current_task FROM agent_metadata WHERE thread_id = ?",
                 helper) == [(second,)]


# bad input: an error that names the problem, and no row changed


@pytest.mark.parametrize(("blocked_by", "fragments"), [
    ([["#2"], ["#1"]], ["cycle", '#1 ("T1") → #2 ("T2") → #1 ("T1")']),
    ([["#1"]], ["cycle", '#1 ("T1") → #1 ("T1")']),
    ([[], ["#3"], ["#2"]], ["cycle", '#2 ("T2") → #3 ("T3") → #2 ("T2")']),
    ([["#2"]], ["'#2', which names no task of this call", "#1 to #1"]),
    ([["#0"], []], ["'#0', which names no task of this call", "#1 to #2"]),
    ([["#x"]], ["'#x'"]),
    ([["#99999999999999"]], ["names no task of this call"]),
    ([["task_20990101_000000"]], ["'task_20990101_000000', which is no task of this session"]),
])
def test_bad_blockers_in_task_create_are_refused(
        call: Caller, unchanged: Unchanged, blocked_by: list[list[str]],
        fragments: list[str]) -> None:
    (existing,) = plan(call, {"title": "Existing"})
    tasks = [{"title": f"T{number}", "prompt": "p", "assigned_to": "new:scripted/worker",
              "blocked_by": [existing, *refs]}
             for number, refs in enumerate(blocked_by, start=1)]
    with unchanged():
        assert_error(call("task_create", {"tasks": tasks}), *fragments)


def test_blockers_of_another_session_or_archived_are_refused(
        call: Caller, store: Store, unchanged: Unchanged) -> None:
    other = new_session(store, "other")
    (foreign,) = plan(call, {"title": "Foreign"}, actor=other.id)
    (shelved,) = plan(call, {"title": "Shelved"})
    call("task_update", {"task_id": shelved, "status": "archived"})
    (task,) = plan(call, {"title": "Mine"})
    with unchanged():
        assert_error(call("task_create", {"tasks": [{"title": "T", "prompt": "p",
                                                     "blocked_by": [foreign]}]}),
                     f"{foreign!r}, which is no task of this session")
        assert_error(call("task_update", {"task_id": task, "add_blocked_by": [foreign]}),
                     f"{foreign!r}, which is no task of this session")
        assert_error(call("task_create", {"tasks": [{"title": "T", "prompt": "p",
                                                     "blocked_by": [shelved]}]}),
                     f'cannot wait for {shelved} ("Shelved"): it is archived')
        assert_error(call("task_update", {"task_id": task, "add_blocked_by": [shelved]}),
                     "it is archived and will never be completed")


def test_bad_dependency_changes_are_refused(call: Caller, store: Store, session: Thread,
                                            unchanged: Unchanged) -> None:
    helper = spawn_child(store, session.id)
    c, d, e = plan(call, {"title": "C"}, {"title": "D", "blocked_by": ["#1"]},
                   {"title": "E", "blocked_by": ["#2"]})
    done, shelved = plan(call, {"title": "Done"}, {"title": "Shelved"})
    call("task_complete", {"task_id": done, "message": "ok"})
    call("task_update", {"task_id": shelved, "status": "archived"})
    (working,) = plan(call, {"title": "Working", "assigned_to": helper})
    agent_call(store, session, helper, "task_update", {"task_id": working,
                                                       "status": "in_progress"})
    with unchanged():
        assert_error(call("task_update", {"task_id": c, "add_blocked_by": [e]}),
                     "cycle", f'{c} ("C") → {e} ("E") → {d} ("D") → {c} ("C")')
        assert_error(call("task_update", {"task_id": c, "add_blocked_by": [c]}),
                     "cycle", f'{c} ("C") → {c} ("C")')
        assert_error(call("task_update", {"task_id": d, "remove_blocked_by": [e]}),
                     f"Task {d} does not wait for {e} (it depends on: {c})")
        assert_error(call("task_update", {"task_id": c, "remove_blocked_by": [d]}),
                     f"does not wait for {d} (it depends on: nothing)")
        assert_error(call("task_update", {"task_id": d, "add_blocked_by": [c]}),
                     f"already waits for {c}")
        assert_error(call("task_update", {"task_id": d, "add_blocked_by": [done],
                                          "remove_blocked_by": [done]}),
                     "both in add_blocked_by and in remove_blocked_by")
        assert_error(call("task_update", {"task_id": d, "add_blocked_by": ["#1"]}),
                     "task_update takes task ids")
        for finished, status in ((done, "completed"), (shelved, "archived")):
            for change in ("add_blocked_by", "remove_blocked_by"):
                assert_error(call("task_update", {"task_id": finished, change: [c]}),
                             f"Task {finished} is {status}: a finished task waits for nothing")
        assert_error(call("task_update", {"task_id": working, "add_blocked_by": [c]}),
                     "is in progress: it cannot start waiting", "Set it back to pending")
        assert_error(agent_call(store, session, helper, "task_update",
                                {"task_id": working, "add_blocked_by": [c]}),
                     f"Only the creator ({session.id}) of task {working} may change what it "
                     "waits for")
        assert_error(call("task_update", {"task_id": d, "add_blocked_by": [
            "task_20990101_000000"]}), "'task_20990101_000000', which is no task")


def test_a_waiting_task_cannot_start_or_finish(call: Caller, store: Store, session: Thread,
                                               unchanged: Unchanged) -> None:
    helper = spawn_child(store, session.id)
    first, second = plan(call, {"title": "First"},
                         {"title": "Second", "assigned_to": helper, "blocked_by": ["#1"]})
    with unchanged():
        for status in ("in_progress", "completed"):
            assert_error(call("task_update", {"task_id": second, "status": status}),
                         f'Task {second} waits for {first} ("First") [pending]: it cannot '
                         f"move to {status}", "remove_blocked_by")
        assert_error(agent_call(store, session, helper, "task_complete",
                                {"task_id": second, "message": "skipped ahead"}),
                     f'waits for {first} ("First") [pending]: it cannot move to completed')
    assert not call("task_update", {"task_id": second, "status": "blocked"}).is_error


# releasing


def test_an_existing_agent_is_told_only_when_the_last_blocker_is_completed(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    helper = spawn_child(store, session.id)
    one, two, after = plan(call, {"title": "One", "assigned_to": "human"},
                           {"title": "Two", "assigned_to": "human"},
                           {"title": "After", "assigned_to": helper, "blocked_by": ["#1", "#2"]})
    assert inbox(db_path, helper) == []
    call("task_complete", {"task_id": one, "message": "one's result"})
    assert inbox(db_path, helper) == []
    call("task_complete", {"task_id": two, "message": "two's result"})
    (kind, notice), = inbox(db_path, helper)
    assert kind == "assignment" and notice.startswith(
        f"[LACE TASK SYSTEM] You have been assigned task '{after}'")
    assert (f"Result of task '{one}' (\"One\"):\none's result\n\nResult of task '{two}' "
            f"(\"Two\"):\ntwo's result\n--- END RESULTS ---") in notice
    assert query(db_path, "SELECT sender FROM inbox WHERE thread_id = ?", helper) == [("lace",)]


def test_a_task_for_the_person_shows_as_ready_when_its_blocker_is_done(
        call: Caller, session: Thread) -> None:
    first, second = plan(call, {"title": "First"},
                         {"title": "Second", "assigned_to": "human", "blocked_by": ["#1"]})
    assert f"⧖ {second} [medium] Second → human [pending] waits for {first}" in \
        call("task_list", {}).text
    call("task_complete", {"task_id": first, "message": "done"})
    assert f"○ {second} [medium] Second → human [pending] after {first}" in \
        call("task_list", {}).text


def test_removing_the_last_blocker_releases_the_task_at_once(
        call: Caller, db_path: Path, session: Thread) -> None:
    first, second = plan(call, {"title": "First"},
                         {"title": "Second", "assigned_to": "new:scripted/worker",
                          "blocked_by": ["#1"]})
    result = call("task_update", {"task_id": second, "remove_blocked_by": [first]})
    assert not result.is_error, result.text
    assert result.text == (f"Updated task {second}: waits for: nothing; it can start now "
                           f"(assigned to {session.id}.1, in_progress)")
    assert query(db_path, "SELECT created_for_task FROM agent_metadata WHERE thread_id = ?",
                 f"{session.id}.1") == [(second,)]
    assert query(db_path, "SELECT COUNT(*) FROM task_dependencies") == [(0,)]


def test_a_blocker_added_to_a_task_an_agent_holds_tells_it_again_when_released(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    helper = spawn_child(store, session.id)
    first, second = plan(call, {"title": "First"}, {"title": "Second", "assigned_to": helper})
    assert not call("task_update", {"task_id": second, "add_blocked_by": [first]}).is_error
    assert len(inbox(db_path, helper)) == 1
    call("task_complete", {"task_id": first, "message": "first's result"})
    kinds = inbox(db_path, helper)
    assert [kind for kind, _ in kinds] == ["assignment", "assignment"]
    assert "first's result" in kinds[1][1]


def test_a_blocker_blocked_or_archived_tells_the_creator_once_and_releases_nothing(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    coordinator = spawn_child(store, session.id)
    first, second, third = plan(call, {"title": "First", "assigned_to": "human"},
                                {"title": "Second", "assigned_to": "new:scripted/worker",
                                 "blocked_by": ["#1"]},
                                {"title": "Third", "blocked_by": ["#1"]}, actor=coordinator)
    result = agent_call(store, session, "human", "task_update",
                        {"task_id": first, "status": "blocked"})
    assert not result.is_error, result.text
    told = [notice for kind, notice in inbox(db_path, coordinator) if "can no longer" in notice]
    assert told == [
        f"[LACE TASK SYSTEM] Task '{first}' (\"First\") is now blocked, so these tasks you "
        f"created, which wait for it, can no longer start:\n- '{second}' (\"Second\")\n"
        f"- '{third}' (\"Third\")\nRemove the dependency (task_update with remove_blocked_by "
        f"[\"{first}\"]) or archive them."]
    for status in ("pending", "archived"):
        agent_call(store, session, "human", "task_update", {"task_id": first, "status": status})
    told = [notice for kind, notice in inbox(db_path, coordinator) if "can no longer" in notice]
    assert len(told) == 2 and f"Task '{first}' (\"First\") is now archived, so" in told[1]
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(2,)]
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("First", "archived"), ("Second", "pending"), ("Third", "pending")]
    released = agent_call(store, session, coordinator, "task_update",
                          {"task_id": second, "remove_blocked_by": [first]})
    assert "it can start now" in released.text
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(3,)]


def test_an_archived_blocker_that_was_completed_still_counts_as_done(
        call: Caller, session: Thread) -> None:
    first, second, third = plan(call, {"title": "First"}, {"title": "Second"},
                                {"title": "Third", "blocked_by": ["#1", "#2"]})
    call("task_complete", {"task_id": first, "message": "done"})
    call("task_update", {"task_id": first, "status": "archived"})
    view = call("task_view", {"task_id": third}).text
    assert f'Waits for: {second} ("Second") [pending];' in view
    assert f'Waited for: {first} ("First") [archived]' in view
    call("task_complete", {"task_id": second, "message": "done"})
    assert not call("task_update", {"task_id": third, "status": "in_progress"}).is_error


def test_an_archived_task_waits_and_blocks_no_more(call: Caller) -> None:
    first, second = plan(call, {"title": "First"}, {"title": "Second", "blocked_by": ["#1"]})
    assert f'Blocks: {second} ("Second") [pending]' in call("task_view",
                                                            {"task_id": first}).text
    call("task_update", {"task_id": second, "status": "archived"})
    assert "locks" not in call("task_view", {"task_id": first}).text
    assert call("task_list", {}).text == f"○ {first} [medium] First → unassigned [pending]"


def test_a_helper_planned_by_an_agent_stopped_since_is_not_spawned_when_released(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    """A person stops an agent whose plan still waits: completing the blocker starts no helper
    under it (the stop holds until a person resumes it); the task is left for it, with why."""
    coordinator = spawn_child(store, session.id)
    first, later = plan(call, {"title": "First", "assigned_to": "human"},
                        {"title": "Later", "assigned_to": "new:scripted/worker",
                         "blocked_by": ["#1"]}, actor=coordinator)
    with store.transaction() as tx:
        tx.lifecycle.stop_subtree(coordinator, reason="enough for today", by_person=True)
    completed = agent_call(store, session, "human", "task_complete",
                           {"task_id": first, "message": "first done"})
    assert not completed.is_error, completed.text
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata WHERE parent_thread_id = ?",
                 coordinator) == [(0,)]
    assert query(db_path, "SELECT status, assigned_to, held_assignment FROM tasks WHERE id = ?",
                 later) == [("pending", None, None)]
    (note,), = query(db_path, "SELECT content FROM task_notes WHERE task_id = ?", later)
    assert note.startswith("Not started: Spawn refused:") and coordinator in note
    assert "stopped" in note and "enough for today" in note


def test_a_spawn_refused_at_release_does_not_fail_the_completion(
        store: Store, db_path: Path, session: Thread) -> None:
    tight = ToolContext(thread_id=session.id, session_id=session.id,
                        check_model=check_provider, limits=Limits(max_children=1))
    result = call_tool(store, tight, "task_create", {"tasks": [
        {"title": "First", "prompt": "p", "assigned_to": "new:scripted/worker"},
        {"title": "Busy", "prompt": "p", "assigned_to": "new:scripted/worker"},
        {"title": "Later", "prompt": "p", "assigned_to": "new:scripted/worker",
         "blocked_by": ["#1"]}]})
    assert_error(result, "max_children = 1 ([limits] max_children)")
    first, later = created(call_tool(store, tight, "task_create", {"tasks": [
        {"title": "First", "prompt": "p", "assigned_to": "new:scripted/worker"},
        {"title": "Later", "prompt": "p", "assigned_to": "new:scripted/worker",
         "blocked_by": ["#1"]}]}))
    (busy,) = created(call_tool(store, tight, "task_create", {"tasks": [
        {"title": "Other", "prompt": "p", "assigned_to": "human"}]}))
    # a second live child appears before First completes: Later's spawn is past the limit
    with store.transaction() as tx:
        tx.agents.create(NewAgent(thread_id=tx.threads.create_child(session.id).id, name="extra",
                                  provider="scripted", model="worker", parent_thread_id=session.id,
                                  created_for_task=busy))
    completed = agent_call(store, session, f"{session.id}.1", "task_complete",
                           {"task_id": first, "message": "first done"})
    assert not completed.is_error, completed.text
    assert query(db_path, "SELECT title, status, assigned_to, held_assignment FROM tasks "
                          "WHERE id = ?", later) == [("Later", "pending", None, None)]
    (note,), = query(db_path, "SELECT content FROM task_notes WHERE task_id = ?", later)
    assert note.startswith("Not started: Spawn refused:") and "max_children = 1" in note
    (refusal,), = query(db_path, "SELECT text FROM inbox WHERE thread_id = ? AND task_id = ?",
                        session.id, later)
    assert refusal.startswith(f"[LACE TASK SYSTEM] Task '{later}' (\"Later\") that you created "
                              "can start now") and "assign it with task_update" in refusal


def test_a_deep_plan_is_refused_when_made_not_when_released(
        store: Store, db_path: Path, session: Thread, unchanged: Unchanged) -> None:
    flat = ToolContext(thread_id=session.id, session_id=session.id,
                       check_model=check_provider, limits=Limits(max_depth=0))
    with unchanged():
        assert_error(call_tool(store, flat, "task_create", {"tasks": [
            {"title": "First", "prompt": "p"},
            {"title": "Later", "prompt": "p", "assigned_to": "new:scripted/worker",
             "blocked_by": ["#1"]}]}), "max_depth = 0 ([limits] max_depth)")


# the person's commands and the database by hand


def test_lace_task_add_blocked_by_and_lace_tasks(capsys: pytest.CaptureFixture[str],
                                                  db_path: Path) -> None:
    code, out, err = run_cli(capsys, "task", "add", "Design", "--db", str(db_path))
    assert code == 0, err
    first = out.split()[2].rstrip(":")
    code, out, err = run_cli(capsys, "task", "add", "Build", "--blocked-by", first, "--db",
                             str(db_path))
    assert code == 0, err
    second = out.split()[2].rstrip(":")
    assert f"{second} waits for {first}" in out
    code, out, _ = run_cli(capsys, "tasks", "--db", str(db_path))
    assert f"⧖ {second} [medium] Build → unassigned [pending] waits for {first}" in out
    assert f"blocks {second}" in out
    code, out, _ = run_cli(capsys, "tasks", "--json", "--db", str(db_path))
    board = {task["id"]: task for task in json.loads(out)["tasks"]}
    assert board[second]["blocked_by"] == [first] and board[second]["waits_for"] == [first]
    assert board[first]["blocks"] == [second]
    code, _, err = run_cli(capsys, "task", "add", "Orphan", "--blocked-by",
                           "task_20990101_000000", "--db", str(db_path))
    assert code != 0 and "task_20990101_000000" in err and err.count("\n") == 1
