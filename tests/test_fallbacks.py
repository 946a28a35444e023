"""Model fallbacks: a model whose calls keep failing (429s, an outage, a context it cannot hold)
hands the agent to the next model of its list, each attempt an `llm_calls` row naming the model
used; the switch is written to the agent row, so later turns stay on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Profile, Settings
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.conftest import query, run_cli
from tests.processes import trust_folder
from tests.scripted import ScriptedModels, dutiful_worker, reply


def _down(kind: str) -> Any:
    from lace.llm.litellm_setup import litellm

    def fail(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise getattr(litellm(), kind)("down for maintenance", llm_provider="scripted",
                                       model="x")

    return fail


def coordinator_or_worker(messages: list[dict[str, Any]]) -> ScriptedReply:
    """A root that hands out one job and waits, or a helper that does its job."""
    if "You have been assigned task" in str(messages):
        return dutiful_worker()(messages)
    if not any(m["role"] == "tool" for m in messages):
        return reply(None, ("task_create", {"tasks": [
            {"title": "Job", "prompt": "p", "assigned_to": "new:scripted/worker"}]}))
    return reply("all done")


def make_runtime(store: Store, **settings: Any) -> Runtime:
    from lace.llm.checks import check_model
    from lace.llm.client import default_client

    return open_runtime(store, Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.005,
                                                      model_retries=2), **settings),
                                                          default_client(), check_model=check_model)


@pytest.fixture
async def fallback_runtime(store: Store, models: ScriptedModels) -> AsyncIterator[Runtime]:
    supervisor = make_runtime(store, fallbacks=["scripted/spare", "scripted/last"])
    yield supervisor
    await supervisor.stop()
    supervisor.close()


def calls(db_path: Path) -> list[tuple[str, str | None]]:
    """Each attempt's model and the kind of its error."""
    return [(model, error.split(":")[0] if error else None) for model, error in query(
        db_path, "SELECT model, error FROM llm_calls ORDER BY id")]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(lambda model, messages: ScriptedReply(text=f"answered by {model}")) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        yield fake


async def test_a_429_storm_moves_the_agent_to_the_next_model_and_it_stays(
        store: Store, models: ScriptedModels, server: FakeOpenAI, db_path: Path) -> None:
    runtime = make_runtime(store, fallbacks=["openai/spare"])
    try:
        server.faults += ["429"] * 3  # the first call and its two retries
        root = await runtime.start_session("hi", "openai/main")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
        assert calls(db_path) == [("openai/main", "RateLimitError")] * 3 + [
            ("openai/spare", None)]
        assert [request["model"] for request in server.requests] == ["main"] * 3 + ["spare"]
        assert query(db_path, "SELECT provider, model, status FROM agent_metadata") == [
            ("openai", "spare", "idle")]
        await runtime.send(root.id, "again")  # the next turn starts on the fallback
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
        assert [request["model"] for request in server.requests][4:] == ["spare"]
        switch, = query(db_path, "SELECT json_extract(data, '$.error') FROM events "
                                 "WHERE type = 'error'")
        assert switch[0].startswith("openai/main failed (RateLimitError")
        assert switch[0].endswith("continuing on openai/spare")
    finally:
        await runtime.stop()
        runtime.close()


async def test_an_outage_moves_root_and_helper_to_the_fallback(
        fallback_runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", _down("ServiceUnavailableError"))
    models.on("worker", _down("InternalServerError"))
    models.on("spare", coordinator_or_worker)
    root = await fallback_runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(fallback_runtime.run_until_quiet(root.id), 30)
    rows = calls(db_path)
    assert rows[:4] == [("scripted/root", "ServiceUnavailableError")] * 3 + [
        ("scripted/spare", None)]
    helper = query(db_path, "SELECT c.model, c.error FROM llm_calls c WHERE thread_id LIKE "
                            "'%.1' ORDER BY id")
    assert [(model, (error or "").split(":")[0] or None) for model, error in helper][:4] == [
        ("scripted/worker", "InternalServerError")] * 3 + [("scripted/spare", None)]
    assert query(db_path, "SELECT thread_id LIKE '%.1', provider || '/' || model FROM "
                          "agent_metadata ORDER BY thread_id") == [
        (0, "scripted/spare"), (1, "scripted/spare")]
    assert query(db_path, "SELECT status FROM tasks") == [("completed",)]


async def test_a_profile_list_replaces_the_top_level_one(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = make_runtime(store, fallbacks=["scripted/spare"], profiles={
        "careful": Profile(fallbacks=["scripted/own"])})
    try:
        models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
            {"title": "Job", "prompt": "p", "assigned_to": "new:careful:scripted/worker"}]}))
            if not any(m["role"] == "tool" for m in messages) else reply("waiting"))
        models.on("worker", _down("RateLimitError"))
        models.on("own", dutiful_worker())
        models.on("spare", lambda messages: pytest.fail("the profile's list applies"))
        root = await runtime.start_session("go", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
        assert query(db_path, "SELECT model FROM agent_metadata WHERE thread_id LIKE '%.1'") == [
            ("own",)]
        assert query(db_path, "SELECT status FROM tasks") == [("completed",)]
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_context_overflow_moves_on_once_nothing_is_left_to_trim(
        fallback_runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    def small(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not any(m["role"] == "tool" for m in messages):
            return reply(None, ("task_list", {}))
        raise litellm().ContextWindowExceededError("too long", model="x", llm_provider="scripted")

    models.on("small", small)
    models.on("spare", lambda messages: reply("fits here"))
    root = await fallback_runtime.start_session("go", "scripted/small")
    await asyncio.wait_for(fallback_runtime.run_until_quiet(root.id), 30)
    # one overflow, one trim of the only tool result, a second overflow: then the fallback
    assert calls(db_path) == [("scripted/small", None)] + [
        ("scripted/small", "ContextWindowExceededError")] * 2 + [("scripted/spare", None)]
    assert query(db_path, "SELECT status, model FROM agent_metadata") == [("idle", "spare")]


async def test_an_exhausted_list_fails_as_a_model_failure_does(
        fallback_runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": "Job", "prompt": "p", "assigned_to": "new:scripted/worker"}]}))
        if not any(m["role"] == "tool" for m in messages) else reply("noted"))
    for name in ("worker", "spare", "last"):
        models.on(name, _down("RateLimitError"))
    root = await fallback_runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(fallback_runtime.run_until_quiet(root.id), 30)
    helper = [row for row in calls(db_path) if row[0] != "scripted/root"]
    assert helper == [("scripted/worker", "RateLimitError")] * 3 + [
        ("scripted/spare", "RateLimitError")] * 3 + [("scripted/last", "RateLimitError")] * 3
    assert query(db_path, "SELECT status, model FROM agent_metadata WHERE thread_id LIKE "
                          "'%.1'") == [("error", "last")]
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    note, = query(db_path, "SELECT content FROM task_notes")
    assert note[0].startswith("Blocked: the agent's model failed: RateLimitError")


async def test_a_permanent_error_does_not_fall_back(
        fallback_runtime: Runtime, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", _down("BadRequestError"))
    models.on("spare", lambda messages: pytest.fail("a bad request is not a fallback's job"))
    root = await fallback_runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(fallback_runtime.run_until_quiet(root.id), 30)
    assert calls(db_path) == [("scripted/root", "BadRequestError")]
    assert query(db_path, "SELECT status, model FROM agent_metadata") == [("error", "root")]


async def test_threads_and_the_sidebar_name_the_model_an_agent_is_on(
        fallback_runtime: Runtime, models: ScriptedModels, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from lace.tui.session_view import load_session_view

    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": "Job", "prompt": "p", "assigned_to": "new:scripted/worker"}]}))
        if not any(m["role"] == "tool" for m in messages) else reply("noted"))
    models.on("worker", _down("Timeout"))
    models.on("spare", dutiful_worker())
    root = await fallback_runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(fallback_runtime.run_until_quiet(root.id), 30)
    code, out, _ = run_cli(capsys, "threads", "--db", str(db_path))
    helper_line = next(line for line in out.splitlines() if ".1 " in line)
    assert code == 0 and "scripted/spare" in helper_line
    with fallback_runtime.store.reading() as tx:
        view = load_session_view(tx, root.id)
    helper_row = next(row for row in view.rows if row.thread.parent_id is not None)
    assert "worker on spare" in helper_row.label


def test_a_fallback_that_cannot_be_called_is_refused_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        db_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for setting, expected in (
        ('fallbacks = ["openai/gpt-4o"]',
         "Bad setting fallbacks in lace.toml: Cannot call openai/gpt-4o: set OPENAI_API_KEY"),
        ('fallbacks = ["gpt-4o"]', "Bad setting fallbacks in lace.toml: Expected provider/model"),
        ('[profiles.critic]\nfallbacks = ["nowhere/x"]',
         "Bad setting profiles.critic.fallbacks in lace.toml: Unknown provider 'nowhere'"),
    ):
        (tmp_path / "lace.toml").write_text(setting + "\n")
        trust_folder(tmp_path)
        code, out, err = run_cli(capsys, "run", "hi", "--db", str(db_path))
        assert (code, out) == (2, "")
        expected = expected.replace(" lace.toml:", f" {tmp_path / 'lace.toml'}:")
        assert err.startswith(f"lace: error: {expected}") and len(err.splitlines()) == 1
        assert not db_path.exists()
