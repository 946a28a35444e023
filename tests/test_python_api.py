"""lace as a Python library: `lace.run` with Python tools, an output type and a fan-out to
helpers, against scripted models, on a real database file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lace
from lace.llm.types import ScriptedReply
from tests.conftest import query
from tests.scripted import ScriptedModels, dutiful_worker, reply
from tests.scripted_coordinator import coordinator


class Sum(BaseModel):
    total: int
    explanation: str


def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


async def shout(text: str) -> str:
    """The text in capitals."""
    await asyncio.sleep(0)
    return text.upper()


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [message["content"] for message in messages if message["role"] == "tool"]


def test_run_with_python_tools_and_an_output_type(
        models: ScriptedModels, tmp_path: Path) -> None:
    """The root calls a sync and an async Python function, answers once with JSON that does
    not validate, hears why, and answers again: `output` is the validated model."""
    answers = iter([
        '{"total": "five", "explanation": "no"}',
        '```json\n{"total": 5, "explanation": "2 + 3, and SHOUTED"}\n```',
    ])

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        if not results:
            return reply(None, ("add", {"a": 2, "b": 3}), ("shout", {"text": "hi"}))
        return reply(next(answers))

    models.on("root", root)
    result = lace.run("Add 2 and 3.", model="scripted/root", tools=[add, shout],
                      output_type=Sum, db=tmp_path / "api.db", workspace=tmp_path)

    assert result.output == Sum(total=5, explanation="2 + 3, and SHOUTED")
    first_request, *_, last_request = models.calls_of("root")
    assert "validates against this JSON schema" in first_request[-1]["content"]
    offered = {message["content"] for message in last_request if message["role"] == "tool"}
    assert offered == {"5", "HI"}
    retry = [m["content"] for m in last_request if m["role"] == "user"][-1]
    assert "did not validate" in retry and "total" in retry
    assert result.session_id.startswith("lace_")
    calls = query(str(tmp_path / "api.db"),
                  "SELECT COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM llm_calls")
    assert (result.usage.calls, result.usage.input_tokens, result.usage.output_tokens) == \
        calls[0] == (3, 30, 15)
    assert result.cost_usd == 0.0  # scripted models are lace's own: priced at nothing


def test_an_answer_that_never_validates_is_an_error_after_the_retries(
        models: ScriptedModels, tmp_path: Path) -> None:
    models.on("root", lambda messages: reply("not JSON at all"))
    with pytest.raises(lace.OutputValidationError, match="after 3 tries"):
        lace.run("go", model="scripted/root", output_type=Sum, db=tmp_path / "api.db",
                 workspace=tmp_path)
    assert len(models.calls_of("root")) == 3


def test_a_fan_out_to_new_helpers_counts_every_call(
        models: ScriptedModels, tmp_path: Path) -> None:
    """The root hands three tasks to `new:` helpers; `run` returns once all are done, with
    the root's final answer and the usage of all four agents."""
    models.on("root", coordinator(*["new:scripted/worker"] * 3, titles=("a", "b", "c")))
    models.on("worker", dutiful_worker("half done"))
    db = tmp_path / "fan.db"
    result = lace.run("Split it three ways.", model="scripted/root", db=db, workspace=tmp_path)

    assert result.output.startswith("all done: ")
    assert result.output.count("half done") == 3
    agents = query(str(db), "SELECT thread_id, status FROM agent_metadata ORDER BY thread_id")
    assert [thread for thread, _ in agents] == [
        result.session_id, *(f"{result.session_id}.{n}" for n in (1, 2, 3))]
    (calls, tokens_in, tokens_out), = query(
        str(db), "SELECT COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM llm_calls")
    per_thread = query(str(db), "SELECT thread_id, COUNT(*) FROM llm_calls GROUP BY thread_id")
    assert len(per_thread) == 4  # the root's calls and every helper's are in it
    assert (result.usage.calls, result.usage.input_tokens, result.usage.output_tokens) == \
        (calls, tokens_in, tokens_out)
    done = query(str(db), "SELECT COUNT(*) FROM tasks WHERE status = 'completed'")
    assert done == [(3,)]


def test_a_helper_may_be_handed_a_python_tool_by_name(
        models: ScriptedModels, tmp_path: Path) -> None:
    """The root gives its helper `add_and_note` by name; the helper's call reaches the
    function, in this process, and its answer reaches the root."""
    seen: list[tuple[int, int]] = []

    def add_and_note(a: int, b: int) -> int:
        """Add two whole numbers."""
        seen.append((a, b))
        return a + b

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        if not results:
            return reply(None, ("spawn", {"task": "add 40 and 2", "model": "scripted/helper",
                                          "tools": ["add_and_note"]}))
        if len(results) == 1:
            return reply(None, ("spawn_await", {"job_ids": "*"}))
        return reply("the helper says 42" if "42" in results[-1] else results[-1])

    def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        if not results:
            return reply(None, ("add_and_note", {"a": 40, "b": 2}))
        return reply(results[-1])

    models.on("root", root)
    models.on("helper", helper)
    result = lace.run("go", model="scripted/root", tools=[add_and_note], db=tmp_path / "h.db",
                      workspace=tmp_path)
    assert seen == [(40, 2)]
    assert result.output == "the helper says 42"


async def test_run_inside_an_event_loop_names_run_async(
        models: ScriptedModels, tmp_path: Path) -> None:
    models.on("root", lambda messages: pytest.fail("no model call may be made"))
    with pytest.raises(lace.LaceError, match="run_async"):
        lace.run("go", model="scripted/root", db=tmp_path / "loop.db")
    assert not (tmp_path / "loop.db").exists()  # refused before anything was written
    models.on("root", lambda messages: reply("from the loop"))
    result = await lace.run_async("go", model="scripted/root", db=str(tmp_path / "loop.db"),
                                  workspace=str(tmp_path))
    assert result.output == "from the loop"


def test_an_unknown_provider_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(lace.LaceError, match="nosuch"):
        lace.run("go", model="nosuch/model", db=tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()


def test_the_board_from_python(models: ScriptedModels, tmp_path: Path) -> None:
    """What `lace tasks`, `lace threads` and `lace show` read, as values."""
    models.on("root", coordinator("new:scripted/worker", titles=("only",)))
    models.on("worker", dutiful_worker("the result"))
    db = tmp_path / "board.db"
    result = lace.run("go", model="scripted/root", db=db, workspace=tmp_path)
    with lace.open_board(db) as board:
        assert board.session().id == result.session_id
        page = board.tasks(include_closed=True)
        assert [(task.title, task.status) for task in page.tasks] == [("only", "completed")]
        assert page.total == 1
        (task,) = page.tasks
        assert [note.content for note in board.notes(task.id)][-1].endswith("the result")
        views = board.threads()
        assert [view.thread.id for view in views] == [result.session_id,
                                                     f"{result.session_id}.1"]
        assert views[0].subtree.tokens > views[1].subtree.tokens > 0
        _thread, agent, events = board.thread(f"{result.session_id}.1")
        assert agent is not None and agent.model_name == "scripted/worker"
        assert "tool_call" in {event.type for event in events}
        with pytest.raises(lace.LaceError):
            board.complete_task(task.id, "again")  # already completed: refused


def test_the_first_example_of_the_docs_runs(tmp_path: Path) -> None:
    """docs/python-api.md's first example, as a person would paste it, with the offline demo."""
    import os
    import re
    import subprocess
    import sys

    page = (Path(__file__).parent.parent / "docs" / "python-api.md").read_text()
    example = re.findall(r"```python\n(.*?)```", page, re.DOTALL)[0]
    env = {**os.environ, "LACE_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    session, tokens_in, tokens_out, cost = lines[-1].split()
    assert session.startswith("lace_") and int(tokens_in) > 0 and int(tokens_out) > 0
    assert cost == "0.0"
    assert "announcement" in done.stdout.lower()


def test_tasks_created_from_python_are_the_board_s_own(
        models: ScriptedModels, tmp_path: Path) -> None:
    """`create_task` on an empty database starts a session (as `lace task add` does) and goes
    through the person's tool path: a `new:` assignee is a helper that runs when a runtime next
    looks at the session, and a refused call writes nothing."""
    db = tmp_path / "made.db"
    with lace.open_board(db) as board:
        first = board.create_task("Write the plan", "Write a short plan.")
        second, third = board.create_tasks([
            {"title": "Review it", "prompt": "Review the plan.", "blocked_by": [first.id]},
            {"title": "Ask a helper", "prompt": "Say hi.", "assigned_to": "new:scripted/w"}])
        assert (first.title, first.created_by, first.status) == ("Write the plan", "human",
                                                                 "pending")
        assert tuple(second.blocked_by) == tuple(second.waits_for) == (first.id,)
        assert third.assigned_to == f"{board.session().id}.1"
        page = board.tasks()
        assert {task.id for task in page.tasks} == {first.id, second.id, third.id}
        with pytest.raises(lace.LaceError, match="blocked_by"):
            board.create_task("Bad", blocked_by=["task_nosuch"])
        assert board.tasks().total == 3
    assert query(str(db), "SELECT COUNT(*) FROM threads") == [(2,)]  # the session, the helper
