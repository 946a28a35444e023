"""One tool path: the person's calls (the app, the command line) and an agent's calls give the
same results and the same rows; only an agent's call leaves a `tool_result` in its thread."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from lace.core.notifications import PREFIX
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.runtime.tool_runner import call_tool
from lace.tools.names import ALL_TOOL_NAMES
from tests.conftest import query
from tests.root_turn import first_root_answer
from tests.scripted import ScriptedModels, reply, text

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("task_create", {"tasks": [
        {"title": "Draft", "prompt": "Write it.", "priority": "high",
         "assigned_to": "new:scripted/worker"},
        {"title": "Check", "prompt": "Look it over.", "assigned_to": "human"}]}),
    ("task_create", {"tasks": [{"title": "x", "prompt": "p", "assignTo": "human"}]}),
    ("task_create", {"tasks": [{"title": "y", "prompt": "p", "assigned_to": "new:foo/bar"}]}),
    ("task_list", {"filter": "all"}),
]
DELEGATE = {"tasks": [{"title": "z", "prompt": "p", "expected_response": "r",
                       "assigned_to": "human"}]}


def normalised(value: str, session_id: str) -> str:
    return re.sub(r"task_\d{8}_[0-9a-f]{6}", "TASK", value.replace(session_id, "SESSION"))


def board(db_path: Path, session_id: str) -> list[tuple[Any, ...]]:
    tasks = query(db_path, "SELECT title, prompt, status, priority, assigned_to FROM tasks "
                           "WHERE thread_id = ? ORDER BY title", session_id)
    agents = query(db_path, "SELECT thread_id, provider, model, type, tools, parent_thread_id "
                            "FROM agent_metadata WHERE thread_id LIKE ? ORDER BY thread_id",
                   f"{session_id}.%")
    return [tuple(normalised(str(v), session_id) for v in row) for row in [*tasks, *agents]]


async def test_the_person_and_an_agent_get_the_same_results_and_rows(
        runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    async def silent_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        await asyncio.Event().wait()  # works on forever: its rows stay as the spawn left them
        raise AssertionError("unreachable")

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if text(messages[-1]).startswith(PREFIX) or messages[-1]["role"] == "tool":
            return reply("done")
        return reply(None, *CALLS)

    models.on("worker", silent_worker)
    models.on("root", root)
    agent_session, _answer = await first_root_answer(runtime, "go", "scripted/root")
    results = dict(query(db_path, "SELECT json_extract(data, '$.call_id'), json_extract(data, "
                                  "'$.message.content') FROM events WHERE thread_id = ? AND "
                                  "type = 'tool_result'", agent_session.id))
    calls = query(db_path, "SELECT json_extract(data, '$.call_id') FROM events WHERE "
                           "thread_id = ? AND type = 'tool_call' ORDER BY id", agent_session.id)
    by_agent = [normalised(results[call_id], agent_session.id) for (call_id,) in calls]

    with runtime.store.transaction() as tx:
        person_session = tx.threads.create_session(provider="scripted", model="root",
                                                   tools=list(ALL_TOOL_NAMES))
    by_person = [normalised((await runtime.act_as_human(person_session.id, name, args)).text,
                            person_session.id) for name, args in CALLS]

    assert by_person == by_agent
    assert by_agent[0].splitlines() == ["Created task TASK: Draft (assigned to SESSION.1)",
                                        "Created task TASK: Check (assigned to human)"]
    assert "unknown key 'assignTo'; did you mean 'assigned_to'?" in by_agent[1]
    assert "Unknown provider 'foo' in 'new:foo/bar'" in by_agent[2]
    assert board(db_path, person_session.id) == board(db_path, agent_session.id)
    refused = await runtime.act_as_human(person_session.id, "delegate", DELEGATE)
    assert refused.is_error
    assert refused.text == "delegate waits for other agents and runs only inside an agent's turn."
    assert query(db_path, "SELECT COUNT(*) FROM events WHERE thread_id = ?",
                 person_session.id) == [(0,)]


def test_the_command_line_path_gives_the_same_error_and_writes_nothing(
        store: Any, session: Any, unchanged: Any) -> None:
    from lace.tools.base import ToolContext

    context = ToolContext(thread_id="human", session_id=session.id)
    with unchanged():
        result = call_tool(store, context, *CALLS[1])
    assert result.is_error and result.kind == "ToolError"
    assert "unknown key 'assignTo'; did you mean 'assigned_to'?" in result.text
