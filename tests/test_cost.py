"""`lace cost`: its totals are sums over `llm_calls`, computed here independently in SQL, for a
session with a priced model, an unpriced one, a local one and failed calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.core.assignee import HUMAN
from lace.core.usage import MAX_CALL_TOKENS
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.store import Store
from tests.conftest import query, run_cli
from tests.scripted import ScriptedModels, dutiful_worker

PRICED, UNPRICED = "openai/gpt-4o-mini", "openai/house-model-7"


pytestmark = pytest.mark.both_engines

def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root hands out three jobs; the helpers complete theirs."""
    task = next((m["content"].split("'")[1] for m in messages if m["role"] == "user"
                 and "You have been assigned task" in str(m["content"])), None)
    done = any(m["role"] == "tool" for m in messages)
    if task and not done:
        return ScriptedReply(tool_calls=[("task_complete", {"task_id": task, "message": "ok"})],
                             prompt_tokens=123, completion_tokens=45)
    if task is None and not done:
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [
            {"title": "Priced", "prompt": "p", "assigned_to": f"new:{PRICED}"},
            {"title": "Unpriced", "prompt": "p", "assigned_to": f"new:{UNPRICED}"},
            {"title": "Local", "prompt": "p", "assigned_to": "new:scripted/worker"}]})],
            prompt_tokens=1000, completion_tokens=200)
    return ScriptedReply(text="done", prompt_tokens=700, completion_tokens=30)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        yield fake


def cost_json(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> Any:
    code, out, err = run_cli(capsys, "cost", "--db", str(db_path), "--json", *argv)
    assert (code, err) == (0, "")
    return json.loads(out)


def sums(db_path: Path, where: str = "1", *params: Any) -> dict[str, Any]:
    (calls, failed, tokens_in, tokens_out, cost), = query(
        db_path, "SELECT COUNT(*), COUNT(error), COALESCE(SUM(prompt_tokens), 0), "
                 "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0) FROM "
                 f"llm_calls JOIN threads ON threads.id = llm_calls.thread_id WHERE {where}",
        *params)
    return {"calls": calls, "failed": failed, "tokens_in": tokens_in, "tokens_out": tokens_out,
            "tokens": tokens_in + tokens_out, "known_cost_usd": pytest.approx(cost)}


async def test_cost_totals_are_sums_over_llm_calls(
        runtime: Runtime, models: ScriptedModels, server: FakeOpenAI, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    models.on("worker", dutiful_worker())
    server.faults += ["429", "503"]  # two failed calls of the root, retried
    root = await runtime.start_session("go", PRICED)
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    other = await runtime.start_session("another session", "scripted/worker")
    await asyncio.wait_for(runtime.run_until_quiet(other.id), 60)
    in_session = "threads.root_id = ?"

    by_thread = cost_json(capsys, db_path, "--session", root.id)
    total = sums(db_path, in_session, root.id)
    assert total["failed"] == 2 and total["known_cost_usd"] != 0
    assert {key: by_thread["total"][key] for key in total} == total
    unpriced_calls = sums(db_path, f"{in_session} AND model = ?", root.id, UNPRICED)["calls"]
    assert unpriced_calls > 0 and by_thread["total"]["unpriced_calls"] == unpriced_calls
    assert query(db_path, "SELECT COUNT(*) FROM llm_calls WHERE cost_usd IS NULL") == [
        (unpriced_calls,)]  # unknown, not $0; every other call has a price (local: $0)
    assert by_thread["total"]["cost_usd"] is None  # the whole is not known
    assert by_thread["total"]["cost"].endswith(" + unpriced")
    assert by_thread["unpriced_models"] == [UNPRICED]
    threads = [thread for (thread,) in query(
        db_path, "SELECT id FROM threads WHERE root_id = ? ORDER BY id", root.id)]
    assert [row["thread"] for row in by_thread["rows"]] == threads
    for row in by_thread["rows"]:
        own = sums(db_path, "llm_calls.thread_id = ?", row["thread"])
        below = sums(db_path, "(llm_calls.thread_id = ? OR llm_calls.thread_id LIKE ?)",
                     row["thread"], row["thread"] + ".%")
        assert {key: row[key] for key in own} == own
        assert {key: row["subtree"][key] for key in below} == below
    unpriced_row = next(row for row in by_thread["rows"] if row["model"] == UNPRICED)
    assert unpriced_row["cost"] == "unpriced" and unpriced_row["cost_usd"] is None
    priced_row = next(row for row in by_thread["rows"] if row["model"] == PRICED)
    assert priced_row["cost_usd"] == priced_row["known_cost_usd"] > 0

    by_model = cost_json(capsys, db_path, "--session", root.id, "--by", "model")
    names = [name for (name,) in query(db_path, "SELECT DISTINCT model FROM llm_calls JOIN "
                                                "threads ON threads.id = thread_id WHERE "
                                                "root_id = ? ORDER BY model", root.id)]
    assert [row["model"] for row in by_model["rows"]] == names
    for row in by_model["rows"]:
        expected = sums(db_path, f"{in_session} AND model = ?", root.id, row["model"])
        assert {key: row[key] for key in expected} == expected
        assert (row["cost"] == "unpriced") == (row["model"] == UNPRICED)

    by_day = cost_json(capsys, db_path, "--session", root.id, "--by", "day")
    for row in by_day["rows"]:
        expected = sums(db_path, f"{in_session} AND substr(llm_calls.created_at, 1, 10) = ?",
                        root.id, row["day"])
        assert {key: row[key] for key in expected} == expected
    assert sum(row["calls"] for row in by_day["rows"]) == total["calls"]

    code, out, _ = run_cli(capsys, "cost", "--db", str(db_path), "--session", root.id,
                           "--by", "model")
    line = next(line for line in out.splitlines() if line.startswith(UNPRICED))
    assert code == 0 and line.endswith("unpriced") and "$" not in line
    assert f"unpriced: {UNPRICED} (no known price" in out


def test_cost_of_a_thread_that_is_not_a_session_is_one_line(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "cost", "--db", str(db_path), "--session", "lace_x.1")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    code, _, err = run_cli(capsys, "cost", "--db", str(db_path), "--by", "week")
    assert code == 2 and "invalid choice: 'week'" in err


async def test_token_counts_past_two_to_the_31_are_recorded_on_both_engines(
        runtime: Runtime, models: ScriptedModels, store: Store, db_path: Path) -> None:
    """A long-lived agent's totals pass 2**31 - 1, where PostgreSQL's INTEGER ends: the agent
    must not fail on writing them. (One call reports at most MAX_CALL_TOKENS: more is absurd,
    hostile/test_provider_usage.py.)"""
    models.on("huge", lambda _messages: ScriptedReply(text="done", prompt_tokens=MAX_CALL_TOKENS,
                                                      completion_tokens=5))
    with store.transaction() as tx:  # an agent that has worked for a long time
        root = tx.threads.create_session(provider="scripted", model="huge")
        tx.agents.update(root.id, tokens_in=2_140_000_000)
        tx.inbox.post(root.id, sender=HUMAN, kind="message", text="go")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    total = 2_140_000_000 + MAX_CALL_TOKENS
    assert query(db_path, "SELECT status, tokens_in FROM agent_metadata") == [("idle", total)]
    assert query(db_path, "SELECT prompt_tokens FROM llm_calls") == [(MAX_CALL_TOKENS,)]
    assert query(db_path, "SELECT tokens_in FROM agents") == [(total,)]


async def test_cached_and_reasoning_tokens_of_an_openai_call_are_recorded_and_priced(
        runtime: Runtime, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """OpenAI reports them in `prompt_tokens_details` / `completion_tokens_details`; cached
    input costs half on gpt-4o-mini, and lace's price is litellm's for those counts."""
    from lace.core.usage import CallTokens
    from lace.llm.pricing import call_cost

    answer = ScriptedReply(text="done", prompt_tokens=1000, completion_tokens=50,
                           cache_read_tokens=600, reasoning_tokens=20)
    with FakeOpenAI(lambda model, messages: answer) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        root = await runtime.start_session("hi", PRICED)
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    (row,) = query(db_path, "SELECT prompt_tokens, completion_tokens, cache_read_tokens, "
                            "cache_write_tokens, reasoning_tokens, cost_usd FROM llm_calls")
    assert row[:5] == (1000, 50, 600, None, 20)
    cached, uncached = (call_cost(PRICED, CallTokens(1000, 50, cache_read=600)),
                        call_cost(PRICED, CallTokens(1000, 50)))
    assert row[5] == pytest.approx(cached) and cached < uncached  # type: ignore[operator]
    total = cost_json(capsys, db_path, "--session", root.id)["total"]
    assert (total["cache_read_tokens"], total["reasoning_tokens"], total["uncached_in"],
            total["cached_share"]) == (600, 20, 400, 0.6)


async def test_a_call_lace_cut_off_is_counted_apart_from_failed_calls_and_once(
        runtime: Runtime, models: ScriptedModels, db_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A call lace cut off (an answer past lace's limit, a turn stopped mid-call) is no
    failure of the provider: `lace cost` counts it as `cut`, a refused call (429) as `failed`,
    and each call, with its cost, once."""
    monkeypatch.setattr("lace.llm.limited_http.MAX_ANSWER_BYTES", 4000)
    sleeping = asyncio.Event()

    async def sleepy(messages: list[dict[str, Any]]) -> ScriptedReply:
        sleeping.set()
        await asyncio.sleep(60)
        return ScriptedReply(text="never")

    def answers(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if model.endswith("long-writer"):
            return ScriptedReply(text="x" * 10_000)  # past the limit: lace stops reading
        if not any(m["role"] == "tool" for m in messages):
            return ScriptedReply(tool_calls=[("task_create", {"tasks": [
                {"title": "Long", "prompt": "p", "assigned_to": "new:openai/long-writer"},
                {"title": "Slow", "prompt": "p", "assigned_to": "new:scripted/sleepy"}]})],
                prompt_tokens=1000, completion_tokens=200)
        return ScriptedReply(text="waiting", prompt_tokens=700, completion_tokens=30)

    models.on("sleepy", sleepy)
    with FakeOpenAI(answers) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        fake.faults += ["429"]  # the root's first call is refused, then asked again
        root = await runtime.start_session("go", PRICED)
        running = asyncio.ensure_future(runtime.run_until_quiet(root.id))
        await asyncio.wait_for(sleeping.wait(), 60)
        async with asyncio.timeout(60):  # the long answer is refused meanwhile
            while query(db_path, "SELECT status FROM tasks WHERE title = 'Long'") != [
                    ("blocked",)]:
                await asyncio.sleep(0.02)
        running.cancel()
        await runtime.stop()  # as `lace run` at its timeout: the slow call is cut off
    errors = sorted(error for (error,) in query(db_path, "SELECT error FROM llm_calls "
                                                         "WHERE error IS NOT NULL"))
    assert [error.split(":")[0] for error in errors] == [
        "AnswerTooLarge", "RateLimitError", "cancelled (turn cut off)"], errors
    total = cost_json(capsys, db_path, "--session", root.id)["total"]
    expected = sums(db_path, "threads.root_id = ?", root.id)
    assert (total["calls"], total["failed"], total["cut"]) == (expected["calls"], 1, 2)
    assert total["known_cost_usd"] == expected["known_cost_usd"]  # each call's cost once
    assert total["known_cost_usd"] > 0
    code, out, _ = run_cli(capsys, "cost", "--db", str(db_path), "--session", root.id)
    assert code == 0
    header, *_, last = out.splitlines()[1:]
    assert header.split()[1:4] == ["calls", "failed", "cut"], out
    assert last.split()[1:4] == [str(expected["calls"]), "1", "2"], out
