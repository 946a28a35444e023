"""Agents talk and end well: topics, direct messages, stopping subtrees, the watchdog, budgets
over the tree, and resuming; after each, every message and usage row is in the database."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from lace.config import Budgets, Limits, Settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.conftest import is_postgres, query
from tests.scripted import ScriptedModels, assigned_task, reply, text, tools_called

pytestmark = pytest.mark.both_engines

TOPIC_MESSAGE = re.compile(r"\[message from (\S+) on topic 'party-chat'\]\n(.*)", re.DOTALL)



def make(store: Store, **limits: Any) -> Runtime:
    budgets = limits.pop("budgets", Budgets())
    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.002, **limits),
                        budgets=budgets)
    return open_runtime(store, settings, default_client(), check_model=check_model)


def assert_everything_recorded(db_path: Path, models: ScriptedModels) -> None:
    """Every model call has its usage row; every inbox row was delivered or is still waiting
    for an agent that cannot run; the database is whole."""
    assert query(db_path, "SELECT COUNT(*) FROM llm_calls") == [(len(models.calls),)]
    if not is_postgres(db_path):  # PostgreSQL checks its foreign keys as it writes
        assert query(db_path, "PRAGMA integrity_check") == [("ok",)]
        assert query(db_path, "PRAGMA foreign_key_check") == []
    undelivered = query(db_path, "SELECT i.thread_id, a.status FROM inbox i JOIN agent_metadata "
                                 "a ON a.thread_id = i.thread_id WHERE i.consumed_at IS NULL")
    assert all(status in ("stopped", "error") for _, status in undelivered), undelivered


def topic_messages(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for message in messages if message["role"] == "user"
            for m in [TOPIC_MESSAGE.search(text(message))] if m]


async def test_a_game_master_and_three_players_talk_on_a_topic(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = make(store)
    rounds = 3

    def game_master(messages: list[dict[str, Any]]) -> ScriptedReply:
        called = tools_called(messages)
        if "spawn" not in called:
            spawn = {"task": "Play the game", "model": "scripted/player",
                     "auto_subscribe": ["party-chat"]}
            return reply(None, ("subscribe", {"topic": "party-chat"}),
                         ("spawn", spawn), ("spawn", spawn), ("spawn", spawn))
        moves = [m for m in topic_messages(messages) if m[1].startswith("move")]
        started = called.count("publish")
        if started < rounds and len(moves) >= 3 * started:
            return reply(None, ("publish", {"topic": "party-chat",
                                            "text": f"round {started + 1}"}))
        return reply(f"game over after {started} rounds, {len(moves)} moves")

    def player(messages: list[dict[str, Any]]) -> ScriptedReply:
        heard = topic_messages(messages)
        rounds_heard = [body for _, body in heard if body.startswith("round")]
        moved = tools_called(messages).count("publish")
        if len(rounds_heard) > moved:
            return reply(None, ("publish", {"topic": "party-chat",
                                            "text": f"move for {rounds_heard[moved]}"}))
        return reply(f"ready ({len(heard)} heard)")

    models.on("gm", game_master)
    models.on("player", player)
    root = await runtime.start_session("Run a game", "scripted/gm")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    runtime.close()

    players = [f"{root.id}.{n}" for n in (1, 2, 3)]
    assert sorted(query(db_path, "SELECT thread_id, topic FROM subscriptions")) == sorted(
        [(root.id, "party-chat")] + [(p, "party-chat") for p in players])
    topic_rows = query(db_path, "SELECT sender, thread_id, text FROM inbox WHERE kind = 'topic'")
    from_gm = [row for row in topic_rows if row[0] == root.id]
    assert len(from_gm) == 3 * rounds and {row[1] for row in from_gm} == set(players)
    for player_id in players:
        sent = [row for row in topic_rows if row[0] == player_id]
        assert len(sent) == 3 * rounds  # the master and the two other players, each round
        assert {row[1] for row in sent} == {root.id, *players} - {player_id}
    (final,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                               "WHERE thread_id = ? AND type = 'agent_message' ORDER BY id DESC "
                               "LIMIT 1", root.id)
    assert final == f"game over after {rounds} rounds, {3 * rounds} moves"
    assert_everything_recorded(db_path, models)


async def test_siblings_send_each_other_direct_messages(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = make(store)

    def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        if not tools_called(messages):
            return reply(None, ("task_create", {"tasks": [
                {"title": "Ask", "prompt": "ask your sibling", "assigned_to": "new:scripted/asker"},
                {"title": "Answer", "prompt": "answer questions",
                 "assigned_to": "new:scripted/answerer"}]}))
        return reply("ok")

    def asker(messages: list[dict[str, Any]]) -> ScriptedReply:
        me = text(messages[0]).split("Your thread id: ")[1].split(".")[0:2]
        sibling = f"{me[0]}.2"
        answers = [text(m) for m in messages if f"[message from {sibling}]" in text(m)]
        if "send_message" not in tools_called(messages):
            return reply(None, ("send_message", {"to": sibling, "text": "what is 6 x 7?"}))
        if answers and "task_complete" not in tools_called(messages):
            return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                                  "message": answers[0].split("\n")[1]}))
        return reply("waiting for an answer" if not answers else "done")

    def answerer(messages: list[dict[str, Any]]) -> ScriptedReply:
        questions = [m.group(1) for message in messages
                     for m in [re.search(r"\[message from (\S+)\]\nwhat is", text(message))] if m]
        if questions and "send_message" not in tools_called(messages):
            return reply(None, ("send_message", {"to": questions[0], "text": "42"}),
                         ("task_complete", {"task_id": assigned_task(messages),
                                            "message": "answered"}))
        return reply("listening")

    models.on("root", root_script)
    models.on("asker", asker)
    models.on("answerer", answerer)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    runtime.close()
    messages = query(db_path, "SELECT sender, thread_id, text FROM inbox WHERE kind = 'message' "
                              "AND sender != 'human' ORDER BY id")
    assert messages == [(f"{root.id}.1", f"{root.id}.2",
                         f"[message from {root.id}.1]\nwhat is 6 x 7?"),
                        (f"{root.id}.2", f"{root.id}.1", f"[message from {root.id}.2]\n42")]
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Answer", "completed"), ("Ask", "completed")]
    assert_everything_recorded(db_path, models)


async def test_stopping_a_subtree_mid_turn(store: Store, models: ScriptedModels,
                                           db_path: Path) -> None:
    runtime = make(store)
    leaf_called = asyncio.Event()

    async def leaf(messages: list[dict[str, Any]]) -> ScriptedReply:
        leaf_called.set()
        await asyncio.sleep(60)
        return reply("never")

    def middle(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "spawn" not in tools_called(messages):
            return reply(None, ("spawn", {"task": "dig", "model": "scripted/leaf"}))
        return reply(None, ("spawn_await", {"job_ids": "*"}))

    async def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        called = tools_called(messages)
        if "task_create" not in called:
            return reply(None, ("task_create", {"tasks": [
                {"title": "Dig deep", "prompt": "p", "assigned_to": "new:scripted/middle"}]}))
        if "agent_stop" not in called:
            await asyncio.wait_for(leaf_called.wait(), 20)
            middle_id = text(messages[0]).split("Your thread id: ")[1].split(".")[0] + ".1"
            async with asyncio.timeout(20):  # and the middle waits in spawn_await
                while query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                            middle_id) != [("waiting",)]:
                    await asyncio.sleep(0.01)
            return reply(None, ("agent_stop", {"thread_id": middle_id, "reason": "too slow"}))
        return reply("stopped them")

    models.on("root", root_script)
    models.on("middle", middle)
    models.on("leaf", leaf)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    runtime.close()
    middle_id, leaf_id = f"{root.id}.1", f"{root.id}.1.1"
    assert query(db_path, "SELECT thread_id, status, stop_reason FROM agent_metadata WHERE "
                          "status = 'stopped' ORDER BY thread_id") == [
        (middle_id, "stopped", f"too slow (by {root.id})"),
        (leaf_id, "stopped", f"too slow (by {root.id})")]
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Dig deep", "blocked"), ("dig", "blocked")]
    notes = [n for (n,) in query(db_path, "SELECT content FROM task_notes")]
    assert notes.count(f"Blocked: stopped: too slow (by {root.id})") == 2
    notices = query(db_path, "SELECT thread_id, kind FROM inbox WHERE kind = 'status'")
    assert (root.id, "status") in notices  # the creator of "Dig deep" is told
    cut = query(db_path, "SELECT error FROM llm_calls WHERE thread_id = ?", leaf_id)
    assert cut == [("cancelled (turn cut off)",)]
    assert_everything_recorded(db_path, models)

    # a stopped agent can be resumed: it continues its conversation
    models.on("middle", lambda messages: reply(
        f"resumed after {sum(1 for m in messages if m['role'] == 'tool')} tool results"))
    resumed = make(store)
    assert await resumed.resume_agent(middle_id)
    await asyncio.wait_for(resumed.run_until_quiet(root.id), 30)
    resumed.close()
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE thread_id = ? AND type = 'agent_message' ORDER BY id DESC "
                                "LIMIT 1", middle_id)
    assert answer.startswith("resumed after 2 tool results")
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                 middle_id) == [("idle",)]


async def test_the_watchdog_stops_a_stalled_model_call(store: Store, models: ScriptedModels,
                                                       db_path: Path) -> None:
    runtime = make(store, stall_timeout_s=0.3)

    async def stuck(messages: list[dict[str, Any]]) -> ScriptedReply:
        await asyncio.sleep(30)
        return reply("never")

    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": "Hang", "prompt": "p", "assigned_to": "new:scripted/stuck"}]}))
        if not tools_called(messages) else reply("ok"))
    models.on("stuck", stuck)
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    runtime.close()
    (status, reason), = query(db_path, "SELECT status, stop_reason FROM agent_metadata WHERE "
                                       "thread_id = ?", f"{root.id}.1")
    assert status == "stopped"
    assert reason == ("watchdog: a model call made no progress for stall_timeout_s = 0.3 "
                      "([limits] stall_timeout_s)")
    assert query(db_path, "SELECT status FROM tasks") == [("blocked",)]
    assert query(db_path, "SELECT error FROM llm_calls WHERE thread_id = ?",
                 f"{root.id}.1") == [("stalled (watchdog)",)]
    assert_everything_recorded(db_path, models)


async def test_a_budget_reached_by_a_grandchild_stops_exactly_that_subtree(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    runtime = make(store)

    def root_script(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "spawn" not in tools_called(messages):
            return reply(None,
                         ("spawn", {"task": "capped", "model": "scripted/middle",
                                    "budget": {"tokens": 75}}),
                         ("spawn", {"task": "free", "model": "scripted/sibling"}))
        return reply("root done")

    def middle(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "spawn" not in tools_called(messages):
            return reply(None, ("spawn", {"task": "loop", "model": "scripted/looper"}))
        return reply(None, ("spawn_await", {"job_ids": "*"}))

    models.on("root", root_script)
    models.on("middle", middle)
    models.on("looper", lambda messages: reply(None, ("task_list", {})))  # never ends by itself
    models.on("sibling", lambda messages: reply("sibling result"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    runtime.close()
    statuses = dict(query(db_path, "SELECT thread_id, status FROM agent_metadata"))
    assert statuses == {root.id: "idle", f"{root.id}.1": "stopped", f"{root.id}.1.1": "stopped",
                        f"{root.id}.2": "idle"}
    (reason,), = query(db_path, "SELECT stop_reason FROM agent_metadata WHERE thread_id = ?",
                       f"{root.id}.1.1")
    assert reason == f"budget reached: subtree of {root.id}.1 used 75 of 75 tokens (its budget)"
    used = query(db_path, "SELECT SUM(prompt_tokens + completion_tokens) FROM llm_calls WHERE "
                          "thread_id LIKE ?", f"{root.id}.1%")
    assert used == [(75,)]  # no model call was made past the cap
    assert query(db_path, "SELECT budget FROM agent_metadata WHERE thread_id = ?",
                 f"{root.id}.1") == [('{"tokens": 75}',)]
    notices = [t for (t,) in query(db_path, "SELECT text FROM inbox WHERE thread_id = ?",
                                   root.id)]
    assert any("budget reached" in notice for notice in notices)
    assert_everything_recorded(db_path, models)


async def test_the_session_cap_and_the_budget_line(store: Store, models: ScriptedModels,
                                                   db_path: Path) -> None:
    runtime = make(store, budgets=Budgets(session_tokens=1000))
    models.on("root", lambda messages: reply("seen: " + text(messages[-1]).splitlines()[-1]))
    root = await runtime.start_session("hello", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    runtime.close()
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE type = 'agent_message'")
    assert answer == "seen: [LACE BUDGET] Remaining for you and your helpers: 1,000 tokens."
    system = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                            "type = 'system_prompt'")[0][0]
    assert "LACE BUDGET" not in system


def test_a_real_provider_gets_the_default_session_cap() -> None:
    from lace.config import DEFAULT_SESSION_TOKENS, Budget

    assert Budgets().for_session(real_provider=True) == Budget(tokens=DEFAULT_SESSION_TOKENS)
    assert Budgets().for_session(real_provider=False) == Budget()
    assert Budgets(session_cost_usd=1).for_session(real_provider=True) == Budget(cost_usd=1)
