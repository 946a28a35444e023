"""Hostile input: random and adversarial arguments at every tool. Each call returns a result or
a tool error, never an exception, and a refused call leaves every row unchanged."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lace.config import Limits
from lace.llm.checks import check_provider
from lace.runtime.database import AsyncStore
from lace.runtime.tool_runner import ToolRunner, call_tool
from lace.store import Store, open_database
from lace.tools.base import ToolContext, ToolResult
from lace.tools.registry import ToolRegistry
from lace.tools.workspace import Workspace, WorkspaceTool
from tests.conftest import snapshot

NASTY_TEXT = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["'; DROP TABLE tasks; --", "../../etc/passwd", "/etc/shadow", "new:",
                     "new:foo/bar", "human", "lace_20990101_zzzzzz.1", "task_20990101_000000",
                     "\u0000", "🦜" * 50, "x" * 100_000, "*", "{}", "null", "%s%s%s"]))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | NASTY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NASTY_TEXT, inner, max_size=4),
    max_leaves=12)
DEEP = "[" * 1100 + "]" * 1100
DEEPLY_NESTED = st.sampled_from([DEEP, '{"tasks": ' + DEEP + "}", {"tasks": json.loads(
    "[" * 900 + "]" * 900)}, '{"a":' * 1100 + "1" + "}" * 1100])
ARGUMENTS = st.one_of(
    DEEPLY_NESTED,
    st.dictionaries(st.sampled_from(["tasks", "task_id", "status", "assigned_to", "note",
                                     "message", "filter", "to", "text", "topic", "thread_id",
                                     "reason", "job_ids", "task", "tools", "profile", "title",
                                     "prompt", "priority", "budget", "add_blocked_by",
                                     "remove_blocked_by", "extra"]),
                    JSON_VALUES, max_size=5),
    JSON_VALUES.map(json.dumps),
    NASTY_TEXT)
ERROR_KINDS = {"ToolError", "NotFoundError", "PermissionDeniedError", "InvalidTransitionError",
               "InvalidAssigneeError", "DependencyError", "SpawnRefusedError"}
AGENT_TOOLS = [name for name, tool in ToolRegistry().tools.items()
               if not issubclass(tool, WorkspaceTool)]


def assert_answered_and_foreign_untouched(result: ToolResult, db_path: Path,
                                          other_session: str) -> None:
    """A text for the model (an error of a named kind), and the other session's task as it
    was."""
    assert isinstance(result.text, str) and result.text
    assert result.kind in ERROR_KINDS if result.is_error else result.kind is None
    with sqlite3.connect(db_path) as connection:
        foreign = connection.execute("SELECT title, status FROM tasks WHERE thread_id = ?",
                                     (other_session,)).fetchall()
    assert foreign == [("foreign", "pending")]


def test_every_tool_answers_hostile_arguments_without_an_exception(tmp_path: Path) -> None:
    db_path = tmp_path / "fuzz.db"
    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="demo", model="coordinator")
        other = tx.threads.create_session(provider="demo", model="coordinator")
        tx.board.create_task(session_id=other.id, actor=other.id, title="foreign", prompt="p")
    context = ToolContext(thread_id=session.id, session_id=session.id,
                          check_model=check_provider)

    @settings(max_examples=300, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(tool=st.sampled_from(AGENT_TOOLS), arguments=ARGUMENTS)
    def call(tool: str, arguments: Any) -> None:
        before = snapshot(db_path)
        result = call_tool(store, context, tool, arguments)
        if result.is_error:
            assert snapshot(db_path) == before, (tool, arguments, result.text)
        assert_answered_and_foreign_untouched(result, db_path, other.id)

    call()
    store.close()


UNCHANGED_BY_A_REFUSAL = ("tasks", "task_notes", "inbox", "subscriptions", "approvals",
                          "llm_calls")


def test_hostile_arguments_through_an_agents_own_tool_path(tmp_path: Path) -> None:
    """The same, as an agent's turn calls tools (`ToolRunner.call` with a call id), so the
    waiting tools (`delegate`, `spawn_await`) really start and wait: a refusal writes only its
    `tool_result` event."""
    db_path = tmp_path / "fuzz.db"
    store = Store(open_database(str(db_path)))
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="demo", model="coordinator",
                                            tools=list(ToolRegistry().names()))
        other = tx.threads.create_session(provider="demo", model="coordinator")
        foreign = tx.board.create_task(session_id=other.id, actor=other.id, title="foreign",
                                       prompt="p")
        agent = tx.agents.get(session.id)
    calls = iter(range(1_000_000))

    async def agent_call(tool: str, arguments: Any) -> ToolResult:
        db = AsyncStore(store)
        try:
            runner = ToolRunner(db=db, check_model=check_provider,
                                limits=Limits(delegate_timeout_s=0.01))
            return await runner.call(runner.context(agent), tool, arguments,
                                     call_id=f"call_{next(calls)}")
        finally:
            db.close()

    task = {"title": "t", "prompt": "p", "expected_response": "r"}

    @settings(max_examples=200, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(tool=st.sampled_from(AGENT_TOOLS), arguments=ARGUMENTS)
    @example("delegate", {"tasks": [{**task, "assigned_to": "new:demo/worker"}]})
    @example("delegate", {"tasks": [{**task, "assigned_to": session.id}]})
    @example("delegate", {"tasks": [{**task, "assigned_to": "new:foo/bar"}] * 3})
    @example("spawn", {"task": "x", "model": "demo/worker"})
    @example("spawn_await", {"job_ids": "*"})
    @example("spawn_await", {"job_ids": "task_20990101_000000, ,*,"})
    @example("delegate", DEEP)
    @example("task_create", {"tasks": [{"title": "t", "prompt": "p", "blocked_by": ["#1"]}]})
    @example("task_create", {"tasks": [
        {"title": "t", "prompt": "p", "assigned_to": "new:demo/worker", "blocked_by": ["#2"]},
        {"title": "u", "prompt": "p", "blocked_by": ["#1", "#1", "#\uff13"]}]})
    @example("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                        "blocked_by": [foreign.id]}]})
    @example("task_update", {"task_id": foreign.id, "add_blocked_by": [foreign.id],
                             "remove_blocked_by": ["*"]})
    def call(tool: str, arguments: Any) -> None:
        before = snapshot(db_path)
        result = asyncio.run(agent_call(tool, arguments))
        after = snapshot(db_path)
        if result.is_error:
            assert {table: after[table] for table in UNCHANGED_BY_A_REFUSAL} == \
                {table: before[table] for table in UNCHANGED_BY_A_REFUSAL}, (tool, arguments)
        new_events = after["events"][len(before["events"]):]
        assert [event[2] for event in new_events][-1:] == ["tool_result"]
        assert json.loads(new_events[-1][3])["is_error"] == result.is_error
        assert_answered_and_foreign_untouched(result, db_path, other.id)

    call()
    store.close()


PATHS = st.one_of(NASTY_TEXT, st.sampled_from([
    "../outside/secret.txt", "escape/secret.txt", "a/../../outside/secret.txt", ".", "..",
    "/tmp", "~/x", "notes/plan.md", "notes", "dir/" * 40 + "deep.txt", "n" * 300,
    "notes/\u202eevil.txt", "CON", "a\nb"]))
TEXT = st.one_of(NASTY_TEXT, st.sampled_from(["step one", "step", "*", "**/*", "[", "(a+)+$"]))
WELL_FORMED = {
    "file_read": st.fixed_dictionaries({"path": PATHS}, optional={
        "offset": st.integers(-5, 10**12), "limit": st.integers(-5, 5000)}),
    "file_list": st.fixed_dictionaries({"path": PATHS}, optional={"pattern": TEXT}),
    "file_search": st.fixed_dictionaries({"pattern": TEXT}, optional={"path": PATHS,
                                                                      "glob": TEXT}),
    "file_write": st.fixed_dictionaries({"path": PATHS, "content": NASTY_TEXT}),
    "file_edit": st.fixed_dictionaries({"path": PATHS, "old_text": TEXT, "new_text": NASTY_TEXT},
                                       optional={"replace_all": st.booleans()}),
}
FILE_ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(["path", "content", "old_text", "new_text", "pattern",
                                     "offset", "limit", "replace_all", "glob", "extra"]),
                    st.one_of(PATHS, JSON_VALUES), max_size=5),
    NASTY_TEXT)
# bash runs any command by design; its guard is the approval policy (test_approvals.py)
FILE_TOOLS = [name for name, tool in ToolRegistry().tools.items()
              if issubclass(tool, WorkspaceTool) and name != "bash"]


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else b"<dir>"
            for path in sorted(root.rglob("*")) if not path.is_symlink()}


def test_file_tools_answer_hostile_paths_and_never_touch_outside_the_workspace(
        tmp_path: Path) -> None:
    import asyncio

    from lace.core.errors import LaceError

    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "plan.md").write_text("step one\nstep two\n")
    outside.mkdir()
    (outside / "secret.txt").write_text("keep me")
    (workspace / "escape").symlink_to(outside)
    registry, before = ToolRegistry(), tree(outside)

    @settings(max_examples=300, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data(), tool=st.sampled_from(FILE_TOOLS))
    def call(data: st.DataObject, tool: str) -> None:
        arguments = data.draw(st.one_of(WELL_FORMED[tool], FILE_ARGUMENTS))
        try:
            parsed = registry.parse(tool, arguments, None)
            assert isinstance(parsed, WorkspaceTool)
            result = asyncio.run(parsed.perform(Workspace(workspace)))
            assert isinstance(result.text, str) and result.text
        except (LaceError, OSError) as error:  # a named kind the model can read and fix
            assert str(error)
        assert tree(outside) == before
        assert sorted(path.name for path in tmp_path.iterdir()) == ["outside", "workspace"]

    call()
