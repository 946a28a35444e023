"""Delegation: delegate, spawn and spawn_await, profiles, tools that only shrink, and limits,
into scripted models, on a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Profile, Settings, load_settings
from lace.core.assignee import ThreadAssignee
from lace.core.records import NewAgent
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.events import TurnEnded
from lace.runtime.tool_runner import call_tool
from lace.store import Store, Tx
from lace.tools.base import ToolContext, ToolError, refuse_deadlock
from lace.tools.registry import ToolRegistry
from tests.conftest import query
from tests.scripted import ScriptedModels, assigned_task, reply, text, tools_called

RuntimeFactory = Callable[..., Runtime]


pytestmark = pytest.mark.both_engines

@pytest.fixture
async def make_runtime(store: Store, models: ScriptedModels) -> AsyncIterator[RuntimeFactory]:
    made: list[Runtime] = []

    def make(**limits: Any) -> Runtime:
        profiles = limits.pop("profiles", {})
        settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.002, **limits),
                            profiles=profiles)
        runtime = open_runtime(store, settings, default_client(), check_model=check_model)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        await runtime.stop()
        runtime.close()



def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [text(m) for m in messages if m["role"] == "tool"]


def calls_then_answer(*calls: tuple[str, dict[str, Any]]) -> Callable[..., ScriptedReply]:
    """Makes each call in turn (one per model call), then answers with the last result."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = len(tool_results(messages))
        if done < len(calls):
            return reply(None, calls[done])
        return reply("results: " + tool_results(messages)[-1])

    return handle


def finisher(result: Callable[[str], str] = lambda task_id: f"answer for {task_id}"
             ) -> Callable[..., ScriptedReply]:
    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id = assigned_task(messages)
        if "task_complete" not in tools_called(messages):
            return reply(None, ("task_complete", {"task_id": task_id, "message": result(task_id)}))
        return reply("done")

    return handle


def item(title: str, who: str = "new:scripted/helper") -> dict[str, str]:
    return {"title": title, "prompt": f"do {title}", "expected_response": "one line",
            "assigned_to": who}


async def test_delegate_runs_three_children_at_once_and_returns_their_answers(
        make_runtime: RuntimeFactory, models: ScriptedModels, db_path: Path) -> None:
    runtime = make_runtime()
    arrived: set[str] = set()
    all_three = asyncio.Event()
    statuses: list[str] = []

    async def held(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            arrived.add(assigned_task(messages))
            statuses.extend(s for (s,) in query(db_path, "SELECT status FROM agent_metadata "
                                                         "WHERE parent_thread_id IS NULL"))
            if len(arrived) == 3:
                all_three.set()
            await asyncio.wait_for(all_three.wait(), 20)
        return finisher()(messages)

    models.on("root", calls_then_answer(("delegate", {"tasks": [item("A"), item("B"),
                                                                 item("C")]})))
    models.on("helper", held)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)

    assert all_three.is_set() and set(statuses) == {"waiting"}
    result = tool_results(models.calls_of("root")[-1])[0]
    blocks = result.split("\n\n")
    tasks = query(db_path, "SELECT id, priority, prompt, assigned_to FROM tasks ORDER BY title")
    assert [b.splitlines()[0] for b in blocks] == [f"[{t[0]}: OK]" for t in tasks]
    assert [b.splitlines()[1] for b in blocks] == [f"answer for {t[0]}" for t in tasks]
    assert {t[1] for t in tasks} == {"high"}
    assert all(t[2].endswith("\n\nExpected response: one line") for t in tasks)
    assert [t[3] for t in tasks] == [f"{root.id}.{n}" for n in (1, 2, 3)]
    # the results came back as the tool result; the completion notices do not wake it again
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE thread_id = ? AND kind = "
                          "'completion' AND consumed_at IS NULL", root.id) == [(0,)]
    assert query(db_path, "SELECT COUNT(*) FROM events WHERE thread_id = ? AND type = "
                          "'notification' AND json_extract(data, '$.kind') = 'completion'",
                 root.id) == [(0,)]
    assert len(models.calls_of("root")) == 2


async def test_delegate_reports_a_blocked_task_and_fails_fast_on_a_bad_spec(
        make_runtime: RuntimeFactory, models: ScriptedModels, db_path: Path) -> None:
    runtime = make_runtime()

    def blocker(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id = assigned_task(messages)
        if "task_update" not in tools_called(messages):
            return reply(None, ("task_add_note", {"task_id": task_id, "note": "no access"}),
                         ("task_update", {"task_id": task_id, "status": "blocked"}))
        return reply("blocked")

    models.on("root", calls_then_answer(
        ("delegate", {"tasks": [item("Good"), item("Bad", "new:foo/bar")]}),
        ("delegate", {"tasks": [item("Stuck", "new:scripted/blocker")]})))
    models.on("blocker", blocker)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    first, second = tool_results(models.calls_of("root")[-1])
    assert "Unknown provider 'foo' in 'new:foo/bar'" in first
    assert query(db_path, "SELECT title FROM tasks") == [("Stuck",)]  # nothing of the first
    (task_id,), = query(db_path, "SELECT id FROM tasks")
    assert second == f"[{task_id}: BLOCKED]\nno access"


async def test_delegate_times_out_with_what_has_arrived(
        make_runtime: RuntimeFactory, models: ScriptedModels) -> None:
    runtime = make_runtime(delegate_timeout_s=0.5)

    async def slow(messages: list[dict[str, Any]]) -> ScriptedReply:
        await asyncio.sleep(30)
        return reply("late")

    models.on("root", calls_then_answer(("delegate", {"tasks": [
        item("Fast"), item("Slow", "new:scripted/slow")]})))
    models.on("helper", finisher())
    models.on("slow", slow)
    root_turn_ended = asyncio.Event()
    runtime.bus.subscribe(lambda event: root_turn_ended.set() if isinstance(event, TurnEnded)
                          and "." not in event.thread_id else None)
    await runtime.start_session("go", "scripted/root")
    async with asyncio.timeout(30):  # the slow helper is still working then
        await root_turn_ended.wait()
    blocks = tool_results(models.calls_of("root")[-1])[0].split("\n\n")
    assert blocks[0].split("\n")[0].endswith(": OK]")
    assert blocks[1].split("\n")[0].endswith(": RUNNING]") and "timed out" in blocks[1]


async def test_spawn_and_spawn_await(make_runtime: RuntimeFactory, models: ScriptedModels,
                                     db_path: Path) -> None:
    runtime = make_runtime()
    from lace.llm.litellm_setup import litellm

    def broken(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise litellm().BadRequestError("model refused", llm_provider="scripted", model="x")

    def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        jobs = [r.split()[2] for r in results if r.startswith("Spawned job")]
        steps: list[tuple[str, dict[str, Any]]] = [
            ("spawn", {"task": "Summarise the notes\nin one line", "context": "Notes: a, b",
                       "model": "scripted/answerer"}),
            ("spawn", {"task": "Fail please", "model": "scripted/broken"}),
            ("spawn_await", {"job_ids": ",".join([*jobs, "task_20990101_000000"])}),
            ("spawn_await", {"job_ids": jobs[0] if jobs else "x"}),
            ("spawn_await", {"job_ids": "*"}),
        ]
        if len(results) < len(steps):
            return reply(None, steps[len(results)])
        return reply("finished")

    models.on("root", root_script)
    models.on("answerer", lambda messages: reply("the one-line summary"))
    models.on("broken", broken)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    results = tool_results(models.calls_of("root")[-1])
    job_a, job_b = results[0].split()[2], results[1].split()[2]
    assert results[0] == (f"Spawned job {job_a} in thread {root.id}.1 (scripted/answerer). "
                          "Collect its result with spawn_await.")
    assert results[2] == (f"[{job_a}: OK]\nthe one-line summary\n\n[{job_b}: ERROR]\n"
                          "Blocked: the agent's model failed: BadRequestError: "
                          "litellm.BadRequestError: model refused\n\n"
                          "[task_20990101_000000: NOT FOUND]")
    assert results[3] == f"[{job_a}: OK]\nthe one-line summary"
    assert results[4] == "No jobs found."
    title, prompt = query(db_path, "SELECT title, prompt FROM tasks WHERE id = ?", job_a)[0]
    assert (title, prompt) == ("Summarise the notes",
                               "Notes: a, b\n\nSummarise the notes\nin one line")
    assert query(db_path, "SELECT type FROM agent_metadata WHERE thread_id = ?",
                 f"{root.id}.1") == [("ephemeral",)]


async def test_spawn_await_star_waits_for_all_unawaited_jobs(
        make_runtime: RuntimeFactory, models: ScriptedModels) -> None:
    runtime = make_runtime()
    models.on("root", calls_then_answer(
        ("spawn", {"task": "one", "model": "scripted/answerer"}),
        ("spawn", {"task": "two", "model": "scripted/answerer"}),
        ("spawn_await", {"job_ids": "*"})))
    models.on("answerer", lambda messages: reply("ok " + text(messages[1]).split("\n")[1]))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    final = tool_results(models.calls_of("root")[-1])[-1]
    assert final.count(": OK]") == 2


def child_context(store: Store, session_id: str, tools: tuple[str, ...],
                  **extra: Any) -> ToolContext:
    """A context for an agent whose own tools are `tools`, as the runtime builds it."""
    with store.transaction() as tx:
        child = tx.threads.create_child(session_id)
        tx.agents.create(NewAgent(thread_id=child.id, name="narrow", provider="scripted",
                                  model="narrow", parent_thread_id=session_id, tools=list(tools)))
    return ToolContext(thread_id=child.id, session_id=session_id,
                       check_model=check_model, tools=tools, **extra)


def spawned_tools(db_path: Path) -> list[list[str]]:
    rows = query(db_path, "SELECT tools FROM agent_metadata WHERE thread_id LIKE '%.1.%' "
                          "ORDER BY created_at")
    return [json.loads(row[0]) for row in rows]


def test_tools_only_shrink_on_every_path_with_the_schema_bypassed(
        store: Store, db_path: Path) -> None:
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root")
    own = ("task_create", "task_update", "task_complete", "spawn", "delegate")
    profiles = {"wide": Profile(tools=["task_create", "task_view", "spawn"]),
                "open": Profile()}
    context = child_context(store, session.id, own, profiles=profiles)
    denied = call_tool(store, context, "spawn",
                       {"task": "x", "tools": ["task_complete", "task_view"]})
    assert denied.is_error and "You cannot give 'task_view'" in denied.text
    ok = call_tool(store, context, "spawn", {"task": "x", "tools": ["task_complete"]})
    assert not ok.is_error, ok.text
    for path in (
        ("spawn", {"task": "y", "profile": "wide"}),
        ("task_create", {"tasks": [{"title": "t", "prompt": "p", "assigned_to": "new:wide"}]}),
        ("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                    "assigned_to": "new:scripted/any"}]}),
        ("spawn", {"task": "z", "profile": "open"}),
    ):
        result = call_tool(store, context, *path)
        assert not result.is_error, result.text
    task_id = call_tool(store, context, "task_create", {"tasks": [{"title": "u", "prompt": "p"}]}
                        ).text.split()[2].rstrip(":")
    assert not call_tool(store, context, "task_update", {"task_id": task_id,
                                                "assigned_to": "new:wide"}).is_error
    granted = spawned_tools(db_path)
    assert granted == [["task_complete"], ["task_create", "spawn"], ["task_create", "spawn"],
                       list(own), list(own), ["task_create", "spawn"]]
    assert all(set(tools) <= set(own) for tools in granted)


def test_spawn_schema_lists_only_own_tools_and_profiles() -> None:
    own = ["task_create", "spawn"]
    spawn = next(d for d in ToolRegistry().definitions(own, profiles=["coder", "critic"])
                 if d["function"]["name"] == "spawn")["function"]["parameters"]["properties"]
    assert spawn["tools"]["items"]["enum"] == own
    assert spawn["profile"]["enum"] == ["coder", "critic"]
    assert "profile" not in next(d for d in ToolRegistry().definitions(own)
                                 if d["function"]["name"] == "spawn")["function"]["parameters"][
        "properties"]
    names = [d["function"]["name"] for d in ToolRegistry().definitions(None, can_spawn=False)]
    assert "spawn" not in names and "delegate" not in names and "spawn_await" not in names
    assert "task_create" in names


def test_limits_refuse_with_the_limit_its_value_and_key(store: Store, db_path: Path) -> None:
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root")
    spawn = {"task": "x", "model": "scripted/any"}
    deep = ToolContext(thread_id=f"{session.id}", session_id=session.id,
                       check_model=check_model, limits=Limits(max_depth=0))
    refused = call_tool(store, deep, "spawn", spawn)
    assert refused.is_error and "max_depth = 0 ([limits] max_depth)" in refused.text
    refused = call_tool(store, deep, "task_create", {"tasks": [{"title": "t", "prompt": "p",
                                                          "assigned_to": "new:scripted/a"}]})
    assert refused.is_error and "max_depth" in refused.text
    few = ToolContext(thread_id=session.id, session_id=session.id,
                      check_model=check_model, limits=Limits(max_children=2))
    assert not call_tool(store, few, "spawn", spawn).is_error
    assert not call_tool(store, few, "spawn", spawn).is_error
    refused = call_tool(store, few, "spawn", spawn)
    assert refused.is_error and "max_children = 2 ([limits] max_children)" in refused.text
    slow = ToolContext(thread_id=session.id, session_id=session.id,
                       check_model=check_model, limits=Limits(spawns_per_minute=2))
    refused = call_tool(store, slow, "spawn", spawn)
    assert refused.is_error and "spawns_per_minute = 2 ([limits] spawns_per_minute)" in \
        refused.text
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(3,)]


def test_one_task_create_counts_its_own_spawns_against_the_limits(store: Store,
                                                                  db_path: Path) -> None:
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root")
    spawn = {"task": "x", "model": "scripted/any"}
    three = {"tasks": [{"title": title, "prompt": "p", "assigned_to": "new:scripted/a"}
                       for title in "abc"]}

    def context(limits: Limits) -> ToolContext:
        return ToolContext(thread_id=session.id, session_id=session.id,
                           check_model=check_model, limits=limits)

    assert not call_tool(store, context(Limits()), "spawn", spawn).is_error
    refused = call_tool(store, context(Limits(max_children=3)), "task_create", three)
    assert refused.is_error and "has 3 live children" in refused.text
    refused = call_tool(store, context(Limits(spawns_per_minute=3)), "task_create", three)
    assert refused.is_error and "3 spawns by" in refused.text
    assert query(db_path, "SELECT COUNT(*) FROM agent_metadata") == [(2,)]
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(1,)]  # the spawn's
    created = call_tool(store, context(Limits(max_children=4, spawns_per_minute=4)),
                        "task_create", three)
    assert not created.is_error, created.text
    assert query(db_path, "SELECT id FROM threads WHERE parent_id = ? ORDER BY id",
                 session.id) == [(f"{session.id}.{n}",) for n in (1, 2, 3, 4)]
    assert len({row[0] for row in query(db_path, "SELECT id FROM tasks")}) == 4


async def test_an_agent_at_the_depth_limit_does_not_see_spawning_tools(
        make_runtime: RuntimeFactory, models: ScriptedModels) -> None:
    runtime = make_runtime(max_depth=1)
    seen: dict[str, list[str]] = {}
    original = runtime.client.complete

    async def spy(model: str, messages: Any, tools: Any, **kwargs: Any) -> Any:
        seen[model] = [t["function"]["name"] for t in tools]
        return await original(model, messages, tools, **kwargs)

    runtime.client.complete = spy  # type: ignore[method-assign]
    models.on("root", calls_then_answer(("spawn", {"task": "x", "model": "scripted/leaf"})))
    models.on("leaf", lambda messages: reply("leaf done"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert "spawn" in seen["scripted/root"] and "delegate" in seen["scripted/root"]
    assert "spawn" not in seen["scripted/leaf"] and "delegate" not in seen["scripted/leaf"]
    assert "task_create" in seen["scripted/leaf"]


async def test_a_wait_that_would_deadlock_is_refused(
        make_runtime: RuntimeFactory, models: ScriptedModels, db_path: Path) -> None:
    runtime = make_runtime()
    refusals: list[str] = []

    def worker(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        if not results:  # wait on the root, which is waiting on us
            creator = text(messages[0]).split("You were created by: ")[1].split(".\n")[0]
            return reply(None, ("delegate", {"tasks": [item("Back", creator)]}))
        if len(results) == 1:
            refusals.append(results[0])
            return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                                  "message": "did it myself"}))
        return reply("done")

    models.on("root", calls_then_answer(("delegate", {"tasks": [item("Work",
                                                                      "new:scripted/worker")]})))
    models.on("worker", worker)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    assert len(refusals) == 1 and "would deadlock" in refusals[0]
    assert query(db_path, "SELECT title, status FROM tasks") == [("Work", "completed")]


async def test_a_resumed_turn_waits_for_the_same_tasks(
        make_runtime: RuntimeFactory, models: ScriptedModels, db_path: Path) -> None:
    first = make_runtime()
    release = asyncio.Event()

    async def gated(messages: list[dict[str, Any]]) -> ScriptedReply:
        await release.wait()
        return finisher()(messages)

    models.on("root", calls_then_answer(("delegate", {"tasks": [item("Only",
                                                                      "new:scripted/gated")]})))
    models.on("gated", gated)
    root = await first.start_session("go", "scripted/root")
    async with asyncio.timeout(10):  # fails unless the root really waits
        while query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                    root.id) != [("waiting",)]:
            await asyncio.sleep(0.02)
    await first.stop()  # the process is cut off mid-wait
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                 root.id) == [("interrupted",)]
    release.set()
    second = make_runtime()
    await second.resume(root.id)
    await asyncio.wait_for(second.run_until_quiet(root.id), 30)
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(1,)]
    (task_id,), = query(db_path, "SELECT id FROM tasks")
    assert f"[{task_id}: OK]" in tool_results(models.calls_of("root")[-1])[0]
    assert tools_called(models.calls_of("root")[-1]).count("delegate") == 1  # not made again


def test_profiles_from_a_real_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          store: Store, db_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "critic.md").write_text("You criticise plans.")
    config = tmp_path / "lace.toml"
    config.write_text(
        '[profiles.critic]\ndescription = "Finds holes in plans"\n'
        'system_prompt_file = "prompts/critic.md"\ntools = ["task_view", "task_complete"]\n'
        'model = "scripted/critic"\n'
        '[profiles.helper]\nsystem_prompt = "You help."\n')
    monkeypatch.setenv("LACE_CONFIG", str(config))
    settings = load_settings()
    assert settings.profiles["critic"].system_prompt == "You criticise plans."
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root",
                                            tools=ToolRegistry().names())
    context = ToolContext(thread_id=session.id, session_id=session.id,
                          check_model=check_model, profiles=settings.profiles,
                          tools=tuple(ToolRegistry().names()))
    result = call_tool(store, context, "task_create", {"tasks": [
        {"title": "Review", "prompt": "p", "assigned_to": "new:critic"},
        {"title": "Help", "prompt": "p", "assigned_to": "new:helper"},
        {"title": "Other", "prompt": "p", "assigned_to": "new:helper:scripted/other"}]})
    assert not result.is_error, result.text
    rows = query(db_path, "SELECT profile, provider || '/' || model, tools, instructions FROM "
                          "agent_metadata WHERE profile IS NOT NULL ORDER BY thread_id")
    assert rows[0] == ("critic", "scripted/critic", '["task_view", "task_complete"]',
                       "You criticise plans.")
    assert rows[1][:2] == ("helper", "scripted/root") and rows[1][3] == "You help."
    assert rows[2][:2] == ("helper", "scripted/other")
    unknown = call_tool(store, context, "spawn", {"task": "x", "profile": "nobody"})
    assert unknown.is_error and "Unknown profile 'nobody'; known profiles: critic, helper" in \
        unknown.text
    from lace.runtime.prompt import system_prompt

    with store.reading() as tx:
        agent = tx.agents.get(session.id)
    prompt = system_prompt(agent, None, ToolRegistry().names(), settings.profiles)
    assert "<available_profiles>\n- critic: Finds holes in plans (tools: task_view, " \
           "task_complete)\n- helper: You help. (tools: all of yours)" in prompt
    assert "<available_profiles>" not in system_prompt(agent, None, ToolRegistry().names(), {})


def test_a_missing_prompt_file_is_a_clear_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "lace.toml"
    config.write_text('[profiles.x]\nsystem_prompt_file = "nope.md"\n')
    monkeypatch.setenv("LACE_CONFIG", str(config))
    from lace.core.errors import LaceError

    with pytest.raises(LaceError, match=r"Cannot read system_prompt_file .*nope\.md"):
        load_settings()


async def test_spawn_await_star_refuses_a_wait_that_would_deadlock(
        make_runtime: RuntimeFactory, models: ScriptedModels, db_path: Path) -> None:
    runtime = make_runtime(delegate_timeout_s=20)
    root_results: list[str] = []

    async def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        results = tool_results(messages)
        if not results:
            return reply(None, ("spawn", {"task": "wait on your creator",
                                          "model": "scripted/helper"}))
        if len(results) == 1:  # once the helper waits on us, "*" would close the loop
            async with asyncio.timeout(10):
                while query(db_path, "SELECT status FROM agent_metadata WHERE thread_id LIKE "
                                     "'%.1'") != [("waiting",)]:
                    await asyncio.sleep(0.02)
            return reply(None, ("spawn_await", {"job_ids": "*"}))
        if len(results) == 2 and messages[-1]["role"] == "tool":
            root_results.append(results[1])
            return reply("I will wait for the notices instead")
        if "You have been assigned task" in text(messages[-1]):
            task_id = assigned_task(messages)
            return reply(None, ("task_complete", {"task_id": task_id, "message": "here"}))
        return reply("done")

    def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tool_results(messages):
            creator = text(messages[0]).split("You were created by: ")[1].split(".\n")[0]
            return reply(None, ("delegate", {"tasks": [item("Back", creator)]}))
        return reply("got: " + tool_results(messages)[-1])

    models.on("root", root)
    models.on("helper", helper)
    root_thread = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root_thread.id), 30)
    assert len(root_results) == 1 and "would deadlock" in root_results[0]
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Back", "completed"), ("wait on your creator", "completed")]


@pytest.mark.both_engines
def test_the_wait_graph_is_read_from_what_committed(store: Store, db_path: Path) -> None:
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root")
    helper = child_context(store, session.id, ("delegate", "spawn_await", "task_complete"))
    root = ToolContext(thread_id=session.id, session_id=session.id, check_model=check_model)
    with store.transaction() as tx:  # the helper waits on the root, as a resumed turn would
        task = tx.board.create_task(session_id=session.id, actor=helper.thread_id, title="Back",
                                    prompt="p", assignee=ThreadAssignee(session.id))
        tx.events.append(helper.thread_id, "tool_call", {
            "call_id": "c1", "tool_name": "delegate", "arguments": "{}",
            "waiting_for": [task.id]})
    with store.transaction() as tx:
        assert tx.agents.wait_edges(session.id, [helper.thread_id, session.id]) == {
            helper.thread_id: {session.id}}
        with pytest.raises(ToolError, match="would deadlock"):
            refuse_deadlock(tx, root, {helper.thread_id})
    with store.transaction() as tx:  # answered: the wait is over
        tx.events.append(helper.thread_id, "tool_result", {"call_id": "c1"})
        assert tx.agents.wait_edges(session.id, [helper.thread_id, session.id]) == {}
        refuse_deadlock(tx, root, {helper.thread_id})


@pytest.mark.both_engines
def test_a_wait_two_agents_away_is_followed_and_unrelated_waits_are_not(
        store: Store, db_path: Path) -> None:
    with store.transaction() as tx:
        session = tx.threads.create_session(provider="scripted", model="root")
    tools = ("delegate", "task_complete")
    first, second, other = (child_context(store, session.id, tools) for _ in range(3))
    root = ToolContext(thread_id=session.id, session_id=session.id, check_model=check_model)

    def wait(tx: Tx, waiter: str, on: str, call_id: str) -> None:
        task = tx.board.create_task(session_id=session.id, actor=waiter, title=f"for {on}",
                                    prompt="p", assignee=ThreadAssignee(on))
        tx.events.append(waiter, "tool_call", {"call_id": call_id, "tool_name": "delegate",
                                               "arguments": "{}", "waiting_for": [task.id]})

    with store.transaction() as tx:  # first -> second -> root; other -> first
        wait(tx, first.thread_id, second.thread_id, "c1")
        wait(tx, second.thread_id, session.id, "c2")
        wait(tx, other.thread_id, first.thread_id, "c3")
    with store.transaction() as tx:
        assert tx.agents.wait_edges(session.id, [first.thread_id]) == {
            first.thread_id: {second.thread_id}}
        with pytest.raises(ToolError, match=f"Refused: {first.thread_id} is waiting"):
            refuse_deadlock(tx, root, {first.thread_id})
        with pytest.raises(ToolError, match=f"Refused: {other.thread_id} is waiting"):
            refuse_deadlock(tx, root, {other.thread_id})
        refuse_deadlock(tx, other, {session.id})  # root waits on nobody
        with pytest.raises(ToolError, match=f"Refused: {first.thread_id} is waiting"):
            refuse_deadlock(tx, second, {first.thread_id})
        with pytest.raises(ToolError, match=f"Refused: {other.thread_id} is waiting"):
            refuse_deadlock(tx, first, {session.id, other.thread_id})  # names the one
