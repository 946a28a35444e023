"""Prompt caching, end to end: lace calls `anthropic/...` through litellm over real HTTP to a
scripted Anthropic Messages server that keeps a prompt cache from the `cache_control` marks it
receives. The marks, the shared prefix of a tree's agents, the cached tokens recorded per call
and their price, whole answers and streamed ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lace.core.prompt_parts import IDENTITY_HEADING
from lace.core.usage import CallTokens, dollars
from lace.llm.anthropic_fake import MAX_MARKS, FakeAnthropic, PromptCache
from lace.llm.caching import cache_marked
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.pricing import call_cost
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from tests.anthropic_tree import (
    MODEL,
    anthropic_server,
    first_requests_of_helpers,
    marks,
    tree_script,
)
from tests.conftest import query, run_cli


async def run_tree(runtime: Runtime, *, streamed: bool = False) -> str:
    root = await runtime.start_session("Do the two parts.", MODEL)
    if streamed:
        runtime.watch(root.id)
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 120)
    return root.id


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_every_call_marks_its_prefix_and_reads_what_an_earlier_call_wrote(
        runtime: Runtime, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], streamed: bool) -> None:
    with anthropic_server(monkeypatch) as server:
        root_id = await run_tree(runtime, streamed=streamed)
    exchanges = server.exchanges
    assert len(exchanges) >= 6 and {bool(e.body.get("stream")) for e in exchanges[:1]} == {
        streamed}
    for exchange in exchanges:
        body, found = exchange.body, marks(exchange.body)
        assert len(found) <= MAX_MARKS, found
        assert found[:2] == [f"tool:{body['tools'][-1]['name']}", "system:0"], found
        assert [block.get("text", "").split("\n")[0] for block in body["system"]] == [
            "You are an agent in lace, a task board for teams of LLM agents.", IDENTITY_HEADING]
        last = len(body["messages"]) - 1
        assert body["messages"][last]["role"] == "user" and found[-1] == f"user:{last}", found
    usages = [exchange.usage for exchange in exchanges]
    assert all(usage is not None for usage in usages)
    assert usages[0]["cache_read_input_tokens"] == 0  # type: ignore[index]
    assert all(usage["cache_read_input_tokens"] > 0 for usage in usages[1:])  # type: ignore[index]

    rows = query(db_path, "SELECT prompt_tokens, completion_tokens, cache_read_tokens, "
                          "cache_write_tokens, cost_usd FROM llm_calls WHERE error IS NULL")
    answered = [(u["input_tokens"] + u["cache_read_input_tokens"]  # type: ignore[index]
                 + u["cache_creation_input_tokens"], u["output_tokens"],  # type: ignore[index]
                 u["cache_read_input_tokens"], u["cache_creation_input_tokens"])  # type: ignore[index]
                for u in usages]
    assert sorted(row[:4] for row in rows) == sorted(answered)
    for prompt, completion, read, write, cost in rows:
        priced = call_cost(MODEL, CallTokens(prompt, completion, read, write))
        assert cost == pytest.approx(priced) and cost > 0
        if read:  # a cache read costs a tenth of plain input
            assert cost < call_cost(MODEL, CallTokens(prompt, completion))  # type: ignore[operator]

    read_total, write_total, in_total = query(
        db_path, "SELECT SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(prompt_tokens) "
                 "FROM llm_calls")[0]
    assert read_total / in_total > 0.5
    code, out, err = run_cli(capsys, "cost", "--db", str(db_path), "--session", root_id,
                             "--json")
    total = json.loads(out)["total"]
    assert (code, err) == (0, "")
    assert (total["cache_read_tokens"], total["cache_write_tokens"], total["tokens_in"]) == (
        read_total, write_total, in_total)
    assert total["cached_share"] == pytest.approx(read_total / in_total)
    assert total["uncached_in"] == in_total - read_total - write_total
    code, out, _ = run_cli(capsys, "cost", "--db", str(db_path), "--session", root_id)
    assert f"{read_total} read from the prompt cache ({read_total / in_total:.0%})" in out


async def test_agents_of_one_tree_send_the_same_prefix_byte_for_byte(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two helpers on the same model, profile and tools: their tools and the shared part of
    their system prompt are the same bytes; only the part after `IDENTITY_HEADING` differs.
    (The endpoint named by ANTHROPIC_BASE_URL, the other variable litellm reads.)"""
    with anthropic_server(monkeypatch, helpers=3, variable="ANTHROPIC_BASE_URL") as server:
        await run_tree(runtime)
    firsts = first_requests_of_helpers(server.exchanges)
    assert len(firsts) == 3
    prefixes = {json.dumps([body["tools"], body["system"][0]], sort_keys=False)
                for body in firsts}
    assert len(prefixes) == 1
    identities = [body["system"][1]["text"] for body in firsts]
    assert len(set(identities)) == 3 and all(".1" in text or ".2" in text or ".3" in text
                                             for text in identities)
    names = [tool["name"] for tool in firsts[0]["tools"]]
    root_names = [tool["name"] for tool in server.exchanges[0].body["tools"]]
    assert names == root_names  # one fixed order for every agent


async def test_other_providers_get_the_same_stable_prefix_and_no_marks(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(tree_script(2, "openai/gpt-4o-mini")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        root = await runtime.start_session("Do the two parts.", "openai/gpt-4o-mini")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 120)
    assert server.requests and "cache_control" not in json.dumps(server.requests)
    systems = [body["messages"][0]["content"] for body in server.requests]
    shared = {system.split(f"\n\n{IDENTITY_HEADING}\n")[0] for system in systems}
    assert len(shared) == 1 and len(set(systems)) == 3  # the root and two helpers


def test_marks_never_pass_four_however_long_the_conversation() -> None:
    tools = [{"type": "function", "function": {"name": f"t{n}", "parameters": {}}}
             for n in range(3)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "no identity part"}]
    for turn in range(30):
        messages += [{"role": "user", "content": f"notice {turn}"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": f"c{turn}", "type": "function",
                          "function": {"name": "t0", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{turn}", "content": "ok"}]
    marked, marked_tools = cache_marked(MODEL, messages, tools)
    placed = [index for index, message in enumerate(marked) if "cache_control" in message]
    assert placed == [len(messages) - 3, len(messages) - 1]  # the last user and tool message
    assert marked[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert [("cache_control" in tool) for tool in marked_tools] == [False, False, True]
    assert "cache_control" not in json.dumps(messages + tools)  # the caller's lists untouched
    assert cache_marked("openai/gpt-4o", messages, tools) == (messages, tools)


def test_the_scripted_server_caches_only_marked_prefixes() -> None:
    """The fake's cache is what makes the tests above able to fail: no marks, no reads."""
    cache = PromptCache(min_tokens=10)
    body: dict[str, Any] = {"system": [{"type": "text", "text": "s" * 400}],
                            "messages": [{"role": "user", "content": "hi"}]}
    assert cache.usage(body)["cache_read_input_tokens"] == 0
    assert cache.usage(body)["cache_read_input_tokens"] == 0  # never marked: never cached
    body["system"][0]["cache_control"] = {"type": "ephemeral"}
    first, second = cache.usage(body), cache.usage(body)
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    body["system"][0]["text"] = "t" * 400  # another prefix
    assert cache.usage(body)["cache_read_input_tokens"] == 0


def test_more_than_four_marks_are_refused_as_anthropic_refuses_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    with FakeAnthropic(lambda model, messages: ScriptedReply(text="hi")) as server:
        blocks = [{"type": "text", "text": str(n), "cache_control": {"type": "ephemeral"}}
                  for n in range(5)]
        answer = httpx.post(f"{server.base_url}/v1/messages", headers={"x-api-key": "k"},
                            json={"model": "m", "messages": [{"role": "user",
                                                              "content": blocks}]})
        unkeyed = httpx.post(f"{server.base_url}/v1/messages", json={"model": "m",
                                                                    "messages": []})
    assert answer.status_code == 400 and "Found 5" in answer.text
    assert unkeyed.status_code == 401


@pytest.mark.parametrize(("amount", "text"), [
    (0.000027, "$0.0000270"), (0.00123, "$0.00123"), (0.0123, "$0.0123"), (0.5, "$0.5000"),
    (12.5, "$12.50"), (0.0, "$0.00")])
def test_small_amounts_keep_three_significant_digits(amount: float, text: str) -> None:
    assert dollars(amount) == text
