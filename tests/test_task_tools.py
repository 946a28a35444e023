"""The six task tools end to end against a real database (SQLite and PostgreSQL), bad input too."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lace.config import Profile
from lace.core.records import Thread
from lace.runtime.tool_runner import call_tool
from lace.store import Store
from lace.tools.base import ToolContext
from tests.conftest import Caller, is_postgres, new_session, query, spawn_child

pytestmark = pytest.mark.both_engines

TASK = {"title": "Write docs", "prompt": "Write the user guide."}


def created_ids(text: str) -> list[str]:
    return [line.split()[2].rstrip(":") for line in text.splitlines()]


def make_task(call: Caller, actor: str | None = None, session_id: str | None = None,
              **fields: Any) -> str:
    result = call("task_create", {"tasks": [{**TASK, **fields}]}, actor=actor,
                  session_id=session_id)
    assert not result.is_error, result.text
    return created_ids(result.text)[0]


def rows(db_path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return query(db_path, sql, *params)


def test_task_create_writes_every_task_and_reports_each(call: Caller, db_path: Path,
                                                        session: Thread) -> None:
    result = call("task_create", {"tasks": [
        {"title": "One", "prompt": "do one", "priority": "high"},
        {"title": "Two", "prompt": "do two", "description": "ctx", "assigned_to": "human"},
    ]})
    assert not result.is_error
    one, two = result.text.splitlines()
    assert one.startswith("Created task task_") and one.endswith(": One")
    assert two.endswith(": Two (assigned to human)")
    stored = rows(db_path, "SELECT title, prompt, status, priority, assigned_to, created_by, "
                           "thread_id, description FROM tasks ORDER BY title")
    assert stored == [
        ("One", "do one", "pending", "high", None, session.id, session.id, None),
        ("Two", "do two", "pending", "medium", "human", session.id, session.id, "ctx"),
    ]
    created_at = rows(db_path, "SELECT created_at FROM tasks")[0][0]
    assert created_at.endswith("Z") and created_at[10] == "T"


def test_new_specs_spawn_agents_with_the_parsed_model(call: Caller, db_path: Path,
                                                     store: Store, session: Thread) -> None:
    child = spawn_child(store, session.id)
    for assignee in ("new:openai/gpt-4o", "new:openrouter/anthropic/claude-3.5-sonnet",
                     "new:ollama/llama3:8b", child, "human"):
        make_task(call, assigned_to=assignee)
    stored = rows(db_path, "SELECT t.assigned_to, t.status, a.provider, a.model, a.type, "
                           "a.parent_thread_id, a.created_for_task = t.id FROM tasks t "
                           "LEFT JOIN agent_metadata a ON a.thread_id = t.assigned_to "
                           "ORDER BY t.assigned_to")
    assert stored == [
        ("human", "pending", None, None, None, None, None),
        (child, "pending", "demo", "worker", "persistent", session.id, None),
        (f"{session.id}.2", "in_progress", "openai", "gpt-4o", "persistent", session.id, 1),
        (f"{session.id}.3", "in_progress", "openrouter", "anthropic/claude-3.5-sonnet",
         "persistent", session.id, 1),
        (f"{session.id}.4", "in_progress", "ollama", "llama3:8b", "persistent", session.id, 1),
    ]


def test_assigning_an_existing_agent_puts_the_notification_in_its_inbox(
        call: Caller, db_path: Path, store: Store, session: Thread) -> None:
    child = spawn_child(store, session.id)
    task_id = make_task(call, assigned_to=child, priority="high")
    (kind, sender, text), = rows(db_path, "SELECT kind, sender, text FROM inbox WHERE thread_id=?",
                                 child)
    assert (kind, sender) == ("assignment", session.id)
    assert text == (
        f"[LACE TASK SYSTEM] You have been assigned task '{task_id}':\n"
        'Title: "Write docs"\n'
        f"Created by: {session.id}\nPriority: high\nStatus: pending\n\n"
        "--- TASK DETAILS ---\nWrite the user guide.\n--- END TASK DETAILS ---\n\n"
        "Use your task_add_note tool to record progress and task_complete tool when you are done."
    )


def test_task_list_filters_and_sorts(call: Caller, store: Store, session: Thread) -> None:
    child = spawn_child(store, session.id)
    low = make_task(call, title="low", priority="low")
    high = make_task(call, title="high", priority="high")
    mine_for_child = make_task(call, title="for child", assigned_to=child)
    by_child = make_task(call, actor=child, title="by child")
    other = make_task(call, title="other's", assigned_to="human")

    def listed(actor: str, **arguments: Any) -> list[str]:
        result = call("task_list", arguments, actor=actor)
        assert not result.is_error
        return [line.split()[1] for line in result.text.splitlines()]

    assert listed(session.id, filter="all")[0] == high
    assert set(listed(session.id, filter="all")) == {low, high, mine_for_child, by_child, other}
    assert listed(child, filter="mine") == [mine_for_child]
    assert listed(child, filter="created") == [by_child]
    assert set(listed(child)) == {low, high, mine_for_child, by_child}
    medium = [i for i in listed(session.id, filter="all") if i not in (low, high)]
    assert medium == [other, by_child, mine_for_child]  # same priority: newest first
    assert listed(session.id, filter="all")[-1] == low


def test_task_list_line_format_and_completed(call: Caller) -> None:
    task_id = make_task(call, assigned_to="human")
    line = call("task_list", {}).text
    assert line == f"○ {task_id} [medium] Write docs → human [pending]"
    call("task_complete", {"task_id": task_id, "message": "done"})
    assert call("task_list", {}).text == "No tasks (filter: thread)."
    assert "[completed]" in call("task_list", {"include_completed": True}).text


def test_task_list_caps_at_fifty_lines(call: Caller) -> None:
    for batch in range(3):
        call("task_create", {"tasks": [{"title": f"t{batch}-{i}", "prompt": "p"}
                                       for i in range(20)]})
    lines = call("task_list", {"filter": "all"}).text.splitlines()
    assert len(lines) == 51 and lines[-1] == "… 10 more"


def test_task_view_shows_header_prompt_and_numbered_notes(call: Caller, session: Thread) -> None:
    task_id = make_task(call, assigned_to="human", description="why")
    call("task_add_note", {"task_id": task_id, "note": "first"})
    call("task_add_note", {"task_id": task_id, "note": "second"})
    text = call("task_view", {"task_id": task_id}).text
    assert text.splitlines()[0] == f"○ {task_id}: Write docs"
    assert "Assigned to: human" in text and f"Created by: {session.id}" in text
    assert "Prompt:\nWrite the user guide." in text and "Description: why" in text
    assert "1. [" in text and f"] {session.id}: first" in text and "2. [" in text
    assert text.index("first") < text.index("second")


def test_task_update_moves_and_reassigns(call: Caller, db_path: Path, store: Store,
                                         session: Thread) -> None:
    first, second = spawn_child(store, session.id), spawn_child(store, session.id)
    task_id = make_task(call, assigned_to=first)
    result = call("task_update", {"task_id": task_id, "status": "in_progress",
                                  "assigned_to": second, "priority": "low", "title": "New"})
    assert not result.is_error, result.text
    assert "status: pending → in_progress" in result.text
    assert f"assigned_to: {first} → {second}" in result.text
    assert rows(db_path, "SELECT status, assigned_to, priority, title FROM tasks") == [
        ("in_progress", second, "low", "New")]
    kinds = rows(db_path, "SELECT thread_id, kind FROM inbox ORDER BY id")
    assert kinds == [(first, "assignment"), (first, "unassigned"), (second, "assignment")]


def test_assignee_may_update_and_creator_is_told(call: Caller, db_path: Path, store: Store,
                                                 session: Thread) -> None:
    child = spawn_child(store, session.id)
    task_id = make_task(call, assigned_to=child)
    assert not call("task_update", {"task_id": task_id, "status": "blocked"}, actor=child).is_error
    (kind, text), = rows(db_path, "SELECT kind, text FROM inbox WHERE thread_id = ?", session.id)
    assert kind == "status" and "is now blocked" in text and child in text


def test_task_complete_records_note_and_notifies_creator(call: Caller, db_path: Path,
                                                         store: Store, session: Thread) -> None:
    child = spawn_child(store, session.id)
    task_id = make_task(call, assigned_to=child)
    result = call("task_complete", {"task_id": task_id, "message": "All written."}, actor=child)
    assert result.text == f"Completed task {task_id}: Write docs"
    assert rows(db_path, "SELECT status FROM tasks") == [("completed",)]
    assert rows(db_path, "SELECT author, content FROM task_notes") == [(child, "All written.")]
    (text,), = rows(db_path, "SELECT text FROM inbox WHERE thread_id = ? AND kind = 'completion'",
                    session.id)
    assert text == (f"[LACE TASK SYSTEM] Task '{task_id}' that you created has been completed by "
                    f"{child}:\nTitle: \"Write docs\"\nStatus: completed\n\nResult:\nAll written.")


def test_nobody_is_notified_of_their_own_action(call: Caller, db_path: Path) -> None:
    task_id = make_task(call)
    call("task_add_note", {"task_id": task_id, "note": "self"})
    call("task_complete", {"task_id": task_id, "message": "done"})
    assert rows(db_path, "SELECT COUNT(*) FROM inbox") == [(0,)]


def test_notes_by_others_reach_the_creator(call: Caller, db_path: Path, store: Store,
                                           session: Thread) -> None:
    child = spawn_child(store, session.id)
    task_id = make_task(call, assigned_to=child)
    call("task_add_note", {"task_id": task_id, "note": "halfway"}, actor=child)
    (kind, text), = rows(db_path, "SELECT kind, text FROM inbox WHERE thread_id = ?", session.id)
    assert kind == "note" and text.endswith("halfway")


# bad input: each returns a tool error the model can act on, and writes nothing

Unchanged = Callable[[], Any]


def assert_error(result: Any, *fragments: str) -> None:
    assert result.is_error, result.text
    for fragment in fragments:
        assert fragment in result.text, result.text


@pytest.mark.parametrize(("arguments", "fragments"), [
    ({}, ["tasks: Field required"]),
    ({"tasks": []}, ["tasks: List should have at least 1 item"]),
    ({"tasks": [TASK] * 21}, ["tasks: List should have at most 20 items"]),
    ({"tasks": [{"title": "x"}]}, ["tasks.0.prompt: Field required"]),
    ({"tasks": [{**TASK, "title": ""}]}, ["tasks.0.title: String should have at least 1"]),
    ({"tasks": [{**TASK, "title": "x" * 201}]}, ["tasks.0.title", "at most 200"]),
    ({"tasks": [{**TASK, "description": "x" * 1001}]}, ["tasks.0.description", "1000"]),
    ({"tasks": [{**TASK, "prompt": ""}]}, ["tasks.0.prompt"]),
    ({"tasks": [{**TASK, "priority": "urgent"}]}, ["tasks.0.priority", "'high'", '"urgent"']),
    ({"tasks": [{**TASK, "assignTo": "human"}]}, ["unknown key 'assignTo'",
                                                  "did you mean 'assigned_to'?"]),
    ({"tasks": [{**TASK, "assignedTo": "human"}]}, ["did you mean 'assigned_to'?"]),
    ({"tasks": [{**TASK, "color": "red"}]}, ["tasks.0.color: unknown key 'color'"]),
    ({"tasks": [{**TASK, "title": 5}]}, ["tasks.0.title: Input should be a valid string"]),
    ({"tasks": "one task"}, ["tasks: Input should be a valid list"]),
    ({"tasks": [TASK], "extra": 1}, ["extra: unknown key 'extra'"]),
    ({"tasks": [TASK, {**TASK, "assigned_to": "new:foo/bar"}]},
     ["Unknown provider 'foo' in 'new:foo/bar'"]),
    ({"tasks": [{**TASK, "assigned_to": "new:gpt-4o"}]}, ["Unknown profile 'gpt-4o'"]),
    ({"tasks": [{**TASK, "assigned_to": "openai/gpt-4o"}]}, ["Expected new:provider/model"]),
    ({"tasks": [{**TASK, "assigned_to": "new:openai/"}]}, ["Expected new:provider/model"]),
    ({"tasks": [{**TASK, "assigned_to": "lace_20261122_zzzzzz.4"}]},
     ["Unknown agent thread 'lace_20261122_zzzzzz.4'"]),
])
def test_task_create_rejects_bad_input(call: Caller, unchanged: Unchanged,
                                       arguments: dict[str, Any], fragments: list[str]) -> None:
    with unchanged():
        assert_error(call("task_create", arguments), *fragments)


def test_invalid_json_and_unknown_tool(call: Caller, unchanged: Unchanged) -> None:
    with unchanged():
        assert_error(call("task_create", '{"tasks": [}'), "Invalid JSON arguments for task_create")
        assert_error(call("task_create", "[1, 2]"), "must be a JSON object")
        assert_error(call("task_explode", {}), "Unknown tool 'task_explode'", "task_create")


def test_a_task_of_another_session_is_unknown(call: Caller, store: Store,
                                              unchanged: Unchanged) -> None:
    other = new_session(store, "other")
    foreign = make_task(call, actor=other.id, session_id=other.id, assigned_to="human")
    with unchanged():
        for tool, extra in (("task_view", {}), ("task_add_note", {"note": "n"}),
                            ("task_complete", {"message": "m"}), ("task_update",
                                                                   {"priority": "low"})):
            assert_error(call(tool, {"task_id": foreign, **extra}), f"Unknown task '{foreign}'")


def test_an_agent_of_another_session_cannot_be_assigned(call: Caller, store: Store,
                                                        unchanged: Unchanged) -> None:
    other = new_session(store, "other")
    stranger = spawn_child(store, other.id)
    with unchanged():
        assert_error(call("task_create", {"tasks": [{**TASK, "assigned_to": stranger}]}),
                     f"Unknown agent thread '{stranger}' in this session")


def test_messages_lists_and_stops_stay_inside_the_session(call: Caller, store: Store,
                                                          unchanged: Unchanged) -> None:
    other = new_session(store, "other")
    stranger = spawn_child(store, other.id)
    with store.transaction() as tx:
        tx.subscriptions.add(stranger, "news")
    with unchanged():
        for target in (other.id, stranger):
            assert_error(call("send_message", {"to": target, "text": "hi"}),
                         f"Unknown agent {target!r} in this session")
            assert call("agent_stop", {"thread_id": target, "reason": "r"}).is_error
        listed = call("agents_list", {})
        assert not listed.is_error and stranger not in listed.text and other.id not in listed.text
    published = call("publish", {"topic": "news", "text": "to this session only"})
    assert not published.is_error
    with store.reading() as tx:
        assert tx.inbox.take(stranger) == []


def test_only_creator_or_assignee_may_change(call: Caller, store: Store, session: Thread,
                                             unchanged: Unchanged) -> None:
    bystander = spawn_child(store, session.id)
    task_id = make_task(call, assigned_to="human")
    with unchanged():
        for tool, extra in (("task_add_note", {"note": "n"}), ("task_complete", {"message": "m"}),
                            ("task_update", {"status": "blocked"})):
            assert_error(call(tool, {"task_id": task_id, **extra}, actor=bystander),
                         f"Only the creator ({session.id}) or the assignee (human)",
                         f"you are {bystander}")
    assert not call("task_view", {"task_id": task_id}, actor=bystander).is_error


def test_forbidden_moves_name_the_allowed_ones(call: Caller, unchanged: Unchanged) -> None:
    task_id = make_task(call)
    call("task_complete", {"task_id": task_id, "message": "done"})
    with unchanged():
        assert_error(call("task_update", {"task_id": task_id, "status": "in_progress"}),
                     "cannot move from completed to in_progress", "allowed: archived",
                     "follow-up")
        assert_error(call("task_complete", {"task_id": task_id, "message": "again"}),
                     "already completed")
    call("task_update", {"task_id": task_id, "status": "archived"})
    with unchanged():
        assert_error(call("task_update", {"task_id": task_id, "status": "pending"}),
                     "archived task cannot change status")


@pytest.mark.parametrize(("arguments", "fragments"), [
    ({"task_id": "T"}, ["at least one of status"]),
    ({"task_id": "T", "status": "done"}, ["status: Input should be", "'completed'"]),
    ({"task_id": "T", "taskId": "x"}, ["did you mean 'task_id'?"]),
    ({"status": "blocked"}, ["task_id: Field required"]),
    ({"task_id": "T", "assigned_to": "new:foo/bar"}, ["Unknown provider 'foo' in 'new:foo/bar'"]),
    ({"task_id": "T", "assigned_to": "somebody"}, ["Malformed assignee 'somebody'"]),
    ({"task_id": "T", "title": ""}, ["title"]),
])
def test_task_update_rejects_bad_input(call: Caller, unchanged: Unchanged,
                                       arguments: dict[str, Any], fragments: list[str]) -> None:
    task_id = make_task(call)
    arguments = {key: task_id if value == "T" else value for key, value in arguments.items()}
    with unchanged():
        assert_error(call("task_update", arguments), *fragments)


def test_unknown_task_ids(call: Caller, unchanged: Unchanged) -> None:
    with unchanged():
        for tool, extra in (("task_view", {}), ("task_add_note", {"note": "n"}),
                            ("task_complete", {"message": "m"}),
                            ("task_update", {"status": "blocked"})):
            assert_error(call(tool, {"task_id": "task_20990101_000000", **extra}),
                         "Unknown task 'task_20990101_000000'")


def test_missing_and_empty_fields_of_other_tools(call: Caller, unchanged: Unchanged) -> None:
    task_id = make_task(call)
    with unchanged():
        assert_error(call("task_add_note", {"task_id": task_id}), "note: Field required")
        assert_error(call("task_add_note", {"task_id": task_id, "note": ""}), "note")
        assert_error(call("task_complete", {"task_id": task_id}), "message: Field required")
        assert_error(call("task_list", {"filter": "everything"}), "filter: Input should be")
        assert_error(call("task_view", {"task_id": 12}), "task_id: Input should be a valid string")


def test_one_bad_task_in_a_batch_writes_none(call: Caller, db_path: Path,
                                             unchanged: Unchanged) -> None:
    with unchanged():
        assert_error(call("task_create", {"tasks": [TASK, {**TASK, "assigned_to": "lace_20261122"
                                                                                 "_zzzzzz.9"}]}),
                     "Unknown agent thread")
    assert rows(db_path, "SELECT COUNT(*) FROM tasks") == [(0,)]


def test_schemas_are_pinned() -> None:
    from lace.tools.registry import ToolRegistry

    pinned = Path(__file__).with_name("tool_schemas.json")
    current = json.dumps(ToolRegistry().definitions(), indent=2, ensure_ascii=False) + "\n"
    if not pinned.exists():
        pinned.write_text(current)
        pytest.fail("tests/tool_schemas.json was missing and has been written; review and commit")
    assert current == pinned.read_text(), (
        "The tool schemas the LLM sees changed; if intended, delete tests/tool_schemas.json, "
        "rerun, and commit the new file.")


def test_schemas_inline_enums_and_forbid_extra_keys() -> None:
    from lace.tools.names import ALL_TOOL_NAMES
    from lace.tools.registry import ToolRegistry

    definitions = {d["function"]["name"]: d["function"] for d in ToolRegistry().definitions()}
    assert tuple(definitions) == ALL_TOOL_NAMES
    assert ALL_TOOL_NAMES[:6] == ("task_create", "task_list", "task_view", "task_update",
                                  "task_add_note", "task_complete")
    text = json.dumps(definitions)
    assert "$ref" not in text and "$defs" not in text
    items = definitions["task_create"]["parameters"]["properties"]["tasks"]["items"]
    assert items["additionalProperties"] is False
    assert items["properties"]["priority"]["enum"] == ["high", "medium", "low"]
    assert definitions["task_update"]["parameters"]["required"] == ["task_id"]


def test_a_nul_character_in_a_title_is_stored_on_either_engine(call: Caller,
                                                              db_path: Path) -> None:
    """PostgreSQL's text cannot hold NUL (SQLite's can): a model's argument holding one is stored
    with U+FFFD in its place there, instead of failing the write with a traceback."""
    task_id = make_task(call, title="a\u0000b", prompt="p\u0000q")
    expected = "\u0000" if not is_postgres(db_path) else "\ufffd"
    assert rows(db_path, "SELECT title, prompt FROM tasks WHERE id = ?", task_id) == [
        (f"a{expected}b", f"p{expected}q")]


def test_a_nul_character_in_json_leaves_its_fields_readable(store: Store, db_path: Path,
                                                           session: Thread) -> None:
    """PostgreSQL's `->>` fails on any json value holding an escaped NUL: one tool output or
    argument holding NUL would break every later query of the session's events there."""
    with store.transaction() as tx:
        tx.events.append(session.id, "tool_result", {"call_id": "c1", "output": "a\u0000b\\u0000"})
    if is_postgres(db_path):
        assert rows(db_path, "SELECT data ->> 'output' FROM events "
                             "WHERE type = 'tool_result'") == [("a\ufffdb\\u0000",)]
    else:
        (data,), = rows(db_path, "SELECT data FROM events WHERE type = 'tool_result'")
        assert json.loads(data)["output"] == "a\u0000b\\u0000"


@pytest.mark.sqlite_only
@pytest.mark.parametrize(("tool", "arguments"), [
    ("task_create", {"tasks": [TASK, {**TASK, "assigned_to": "new:slowly/checked"}]}),
    ("task_update", {"task_id": "FIRST", "assigned_to": "new:slowly/checked"}),
    ("spawn", {"task": "x", "model": "slowly/checked"}),
    ("task_create", {"tasks": [{**TASK, "assigned_to": "new:reviewer"}]}),
    ("spawn", {"task": "x", "profile": "reviewer"}),
])
def test_a_models_first_check_runs_before_the_write_transaction(
        call: Caller, store: Store, session: Thread, db_path: Path, tool: str,
        arguments: dict[str, Any]) -> None:
    """A model's first check can take seconds (it imports litellm): inside the write transaction
    it held the database's write lock that long, and on PostgreSQL outlasted the server's
    idle-in-transaction timeout, which ended the transaction (seen in CI). The check below
    looks whether another connection could write while it runs."""
    first = call("task_create", {"tasks": [TASK]}).text.split()[2].rstrip(":")
    writable: list[bool] = []

    def check_model(provider: str, model: str) -> None:
        probe = sqlite3.connect(db_path, timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            writable.append(True)
        except sqlite3.OperationalError:  # database is locked: lace holds the write lock
            writable.append(False)
        finally:
            probe.close()

    context = ToolContext(thread_id=session.id, session_id=session.id, check_model=check_model,
                          profiles={"reviewer": Profile(model="slowly/checked")})
    given = json.loads(json.dumps(arguments).replace("FIRST", first))
    result = call_tool(store, context, tool, given)
    assert not result.is_error, result.text
    assert writable[0], writable  # then once more, at once, inside the transaction


def test_the_checks_lace_answers_itself_stay_on_the_loop() -> None:
    """Only a check that may import litellm leaves the loop (and may let a later call of the
    reply go first): lace's own providers, `openai` and `acp:NAME` agents never do."""
    from lace.llm.checks import quick_model_check

    assert all(quick_model_check(provider) for provider in ("demo", "openai", "acp"))


NEW_PROFILE = """
import sqlite3
import sys
from pathlib import Path

from lace.config import Profile, Settings
from lace.runtime.board import open_board


class ProbeAtImport:
    \"\"\"When litellm is first imported: could another connection write to the database?\"\"\"

    writable: list[bool] = []

    def find_spec(self, name, path=None, target=None):
        if name == "litellm":
            probe = sqlite3.connect(sys.argv[1], timeout=0)
            try:
                probe.execute("BEGIN IMMEDIATE")
                self.writable.append(True)
            except sqlite3.OperationalError:  # locked: lace holds the write lock
                self.writable.append(False)
            finally:
                probe.close()
        return None


board = open_board(sys.argv[1], settings=Settings(profiles={"reviewer": Profile(
    system_prompt="Review what you are given.")}))
board.start_session("go", "anthropic/claude-sonnet-4-5", Path.cwd())
assert "litellm" not in sys.modules, "imported before the person's call"
sys.meta_path.insert(0, ProbeAtImport())
task = board.create_task("t", assigned_to="new:reviewer")
print(task.assigned_to, ProbeAtImport.writable)
"""


def test_a_persons_new_profile_checks_the_roots_model_before_the_write(
        tmp_path: Path) -> None:
    """A person's `new:<profile>` of a profile with no model takes the session root's model:
    its first check imports litellm (seconds), which inside the write transaction held the
    database's write lock that long."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-not-real", "LACE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", NEW_PROFILE, str(tmp_path / "lace.db")],
                          capture_output=True, text=True, timeout=120, check=False, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assigned, writable = done.stdout.split(" ", 1)
    assert assigned.endswith(".1"), done.stdout  # the helper was planned on the root's model
    assert writable.strip() == "[True]", done.stdout  # imported once, outside the write


NEW_PROFILE_IN_A_RUNTIME = """
import asyncio
import sqlite3
import sys
from pathlib import Path

from lace.config import Profile, Settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.runtime import open_runtime
from lace.runtime.board import open_board
from lace.store import Store, open_database

PROBE

settings = Settings(profiles={"reviewer": Profile(system_prompt="Review what you are given.")})
root = open_board(sys.argv[1], settings=settings).start_session(
    "go", "anthropic/claude-sonnet-4-5", Path.cwd())
runtime = open_runtime(Store(open_database(sys.argv[1])), settings, default_client(),
                       check_model=check_model, workspace=Path.cwd())


async def main():
    try:
        assert "litellm" not in sys.modules, "imported before the person's call"
        sys.meta_path.insert(0, ProbeAtImport())
        result = await runtime.act_as_human(root.id, "task_create", {"tasks": [
            {"title": "t", "prompt": "t", "assigned_to": "new:reviewer"}]})
        assert not result.is_error, result.text
        print(ProbeAtImport.writable)
    finally:
        await runtime.stop()
        runtime.close()


asyncio.run(main())
""".replace("PROBE", NEW_PROFILE[NEW_PROFILE.index("class ProbeAtImport"):
                                 NEW_PROFILE.index("board = open_board")])


def test_a_persons_new_profile_in_a_runtime_checks_the_roots_model_before_the_write(
        tmp_path: Path) -> None:
    """The same call through a runtime (the app, `lace mcp serve`: `human_context`), where
    litellm may not be imported yet either: no agent of the process has called a model."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-not-real", "LACE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", NEW_PROFILE_IN_A_RUNTIME,
                           str(tmp_path / "lace.db")], capture_output=True, text=True,
                          timeout=120, check=False, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True]", done.stdout  # imported once, outside the write
