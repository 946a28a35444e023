"""`openai/...` models through the openai SDK directly (`OpenAIClient`, chosen by
`default_client()`) behave as they do through litellm (`LiteLLMClient`): the same request on the
wire, the same replies, usage and prices, the same decisions on faults, and the same `llm_calls`
rows from a whole turn; all against the OpenAI-compatible fake on 127.0.0.1. And none of it
imports litellm."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lace.config import Limits, Settings
from lace.core.usage import CallTokens
from lace.llm.checks import check_model, known_provider
from lace.llm.client import LiteLLMClient, RoutingClient, default_client
from lace.llm.litellm_setup import litellm
from lace.llm.openai_client import OpenAIClient, request, served_directly, session_key
from lace.llm.openai_fake import Exchange, FakeOpenAI
from lace.llm.pricing import call_cost, may_be_priced
from lace.llm.types import (
    ModelClient,
    ModelError,
    ModelReply,
    ScriptedReply,
    ToolCallRequest,
    session_tree,
)
from lace.runtime import open_runtime
from lace.store import Store, open_database
from lace.tools.registry import ToolRegistry
from tests.conftest import query
from tests.processes import lace_env

KEY = "sk-test-0123456789abcdefSECRET"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "list the tasks \ud800 please"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "task_list", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "no tasks"}]
TOOLS = ToolRegistry().definitions()


def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """A reply by model name: text, tool calls, or both, with usage."""
    if model.startswith("tools"):
        return ScriptedReply(tool_calls=[("task_list", {}), ("task_view", '{"task_id": ')],
                             prompt_tokens=321, completion_tokens=12)
    calls: list[tuple[str, dict[str, Any] | str]] = [("task_list", {"status": "open"})]
    return ScriptedReply(text="two words \ud83d then more", tool_calls=calls,
                         prompt_tokens=1234, completion_tokens=56)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield fake


def without_ids(reply: ModelReply) -> tuple[Any, ...]:
    """A reply with its tool-call ids left out (the fake numbers every call anew)."""
    return (reply.content, [(call.name, call.arguments) for call in reply.tool_calls],
            reply.prompt_tokens, reply.completion_tokens, reply.cost_usd, reply.priced)


async def through(client: ModelClient, server: FakeOpenAI, model: str, *, streamed: bool,
                  messages: list[dict[str, Any]] = MESSAGES,
                  ) -> tuple[ModelReply, list[str], list[dict[str, Any]]]:
    """One call: the reply, the text deltas passed on, and the request the server got."""
    deltas: list[str] = []
    sent = len(server.requests)
    reply = await client.complete(model, messages, TOOLS,
                                  on_delta=deltas.append if streamed else None)
    return reply, deltas, server.requests[sent:]


# the same request, reply and usage

@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "openai/tools-local", "openai/o3"])
async def test_a_call_is_the_same_through_both_clients(server: FakeOpenAI, model: str,
                                                       streamed: bool) -> None:
    by_litellm = await through(LiteLLMClient(), server, model, streamed=streamed)
    direct = await through(OpenAIClient(), server, model, streamed=streamed)
    assert without_ids(direct[0]) == without_ids(by_litellm[0])
    assert direct[1:] == by_litellm[1:]  # the same deltas, the same request on the wire
    reply, deltas, (request,) = direct
    assert all(call.id.startswith("call_") for call in reply.tool_calls)
    assert "content" not in request["messages"][2]  # None-valued keys are left out
    assert request.get("stream", False) is streamed
    if model == "openai/tools-local":
        assert reply.content is None and not reply.priced and deltas == []
        assert [call.arguments for call in reply.tool_calls] == ["{}", '{"task_id": ']
    else:
        assert reply.content == "two words \ufffd then more"  # valid UTF-8 from here on
        assert reply.priced and reply.cost_usd > 0
        assert "".join(deltas) == (reply.content if streamed else "")
    if model == "openai/o3":  # litellm's o-series rule: its system message goes as a user one
        assert request["messages"][0] == {"content": "You are terse.", "role": "user"}


async def test_the_routing_client_sends_openai_models_direct_and_others_to_litellm(
        server: FakeOpenAI, models: Any) -> None:
    client = default_client()
    assert isinstance(client, RoutingClient)
    models.on("root", lambda messages: ScriptedReply(text="scripted answer"))
    reply, _, (request,) = await through(client, server, "openai/gpt-4o-mini", streamed=False)
    assert reply.priced and request["model"] == "gpt-4o-mini"
    scripted = await client.complete("scripted/root", MESSAGES, [])
    assert scripted.content == "scripted answer" and len(server.requests) == 1
    assert served_directly("openai/gpt-4o-mini") and served_directly("openai/my-local-model")
    assert not served_directly("anthropic/claude-sonnet-4-5")
    assert not served_directly("demo/coordinator")
    assert not served_directly("openai/o3-pro")  # a Responses API model in litellm's table


def test_gpt_5_4_and_later_go_through_litellm_on_openais_own_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert not served_directly("openai/gpt-5.4") and not served_directly("openai/gpt-5.5-mini")
    assert served_directly("openai/gpt-5.2") and served_directly("openai/gpt-4.1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert served_directly("openai/gpt-5.4")  # litellm keeps chat completions elsewhere


# faults

@pytest.mark.parametrize("fault", ["429", "500", "503", "400", "401", "404", "418", "501",
                                   "drop_stream"])
async def test_a_fault_gets_the_same_decision_from_both_clients(server: FakeOpenAI,
                                                                fault: str) -> None:
    outcomes = []
    for client in (LiteLLMClient(), OpenAIClient()):
        server.faults.append(fault)
        sent = len(server.requests)
        with pytest.raises(ModelError) as raised:
            await client.complete("openai/gpt-4o-mini", MESSAGES, TOOLS,
                                  on_delta=(lambda _: None) if fault == "drop_stream" else None)
        assert len(server.requests) == sent + 1  # no retry of the SDK's own
        error = raised.value
        outcomes.append((str(error).split(":")[0], error.transient, error.context_overflow))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][1] is (fault in ("429", "500", "503", "drop_stream"))


async def test_a_key_echoed_in_an_error_is_redacted_by_both(server: FakeOpenAI) -> None:
    server.echo_key = True
    for client in (LiteLLMClient(), OpenAIClient()):
        server.faults.append("500")
        with pytest.raises(ModelError) as raised:
            await client.complete("openai/gpt-4o-mini", MESSAGES, [])
        assert KEY not in str(raised.value) and "Bearer [redacted]" in str(raised.value)


async def test_without_a_key_both_call_a_server_the_person_named(
        server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_BASE_URL names a local server (llama.cpp, vLLM, Ollama): it needs no key."""
    monkeypatch.delenv("OPENAI_API_KEY")
    for client in (LiteLLMClient(), OpenAIClient()):
        await client.complete("openai/gpt-4o-mini", MESSAGES, [])
    assert len(server.requests) == 2


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "OPENAI_API_BASE_URL"])
async def test_remote_calls_stay_disabled_in_tests(monkeypatch: pytest.MonkeyPatch,
                                                   variable: str) -> None:
    # a remote endpoint; or a local one in a variable litellm ignores (the call would go to
    # api.openai.com)
    url = "https://api.example.com/v1" if variable == "OPENAI_BASE_URL" else "http://127.0.0.1:9"
    monkeypatch.setenv(variable, url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for client in (OpenAIClient(), default_client()):
        with pytest.raises(ModelError, match="remote model calls are disabled"):
            await client.complete("openai/gpt-4o-mini", MESSAGES, [])


def most_at_once(exchanges: list[Exchange]) -> int:
    """The most requests the server held at once (from arrival to the end of the reply)."""
    edges = sorted([(exchange.arrived, 1) for exchange in exchanges]
                   + [(exchange.sent or exchange.arrived, -1) for exchange in exchanges])
    most = now = 0
    for _, change in edges:
        now += change
        most = max(most, now)
    return most


async def test_hundreds_of_calls_at_once_share_one_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No pool holds them back: aiohttp's default (100 connections) would, and httpx's own
    pool spends CPU with the square of the calls in flight."""
    client = OpenAIClient()
    with FakeOpenAI(script, latency_s=2.0, backlog=1024) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        replies = await asyncio.gather(*(client.complete("openai/gpt-4o-mini", MESSAGES, [])
                                         for _ in range(300)))
        shared = OpenAIClient._shared
        await OpenAIClient().complete("openai/gpt-4o-mini", MESSAGES, [])
        assert OpenAIClient._shared is shared  # another instance, the same connections
    assert {reply.content for reply in replies} == {"two words \ufffd then more"}
    assert len(fake.requests) == 301
    assert most_at_once(fake.exchanges[:300]) > 100


async def odd_reply(request: web.Request) -> web.StreamResponse:
    """What the fake does not do: a context overflow, and answers without usage."""
    body = await request.json()
    if body["model"] == "overflow":
        return web.json_response({"error": {
            "message": "This model's maximum context length is 8192 tokens. However, your "
                       "messages resulted in 9000 tokens.", "type": "invalid_request_error",
            "param": "messages", "code": "context_length_exceeded"}}, status=400)
    head = {"id": "chatcmpl-1", "created": 1, "model": body["model"]}
    if body["model"] == "gpt-4o":  # usage with its details, as OpenAI reports them
        usage = {"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050,
                 "prompt_tokens_details": {"cached_tokens": 1536},
                 "completion_tokens_details": {"reasoning_tokens": 32}}
        if not body.get("stream"):
            return web.json_response({**head, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant",
                                                               "content": "cached"}}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in ({"choices": [{"index": 0, "delta": {"content": "cached"},
                                    "finish_reason": "stop"}]}, {"choices": [], "usage": usage}):
            chunk = {**head, "object": "chat.completion.chunk", **chunk}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response
    if body["model"] == "not-json":
        return web.Response(text="<html>Bad gateway, try later</html>", status=200)
    if body["model"] == "error-event":  # a provider that fails inside the stream
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"error": {"message": "overloaded, try again", '
                             b'"type": "server_error"}}\n\n')
        return response
    if not body.get("stream"):
        return web.json_response({**head, "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello world"},
             "finish_reason": "stop"}]})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for word in ("hello", " world"):
        chunk = {**head, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": word}, "finish_reason": None}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


@pytest.fixture
async def odd_server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", odd_reply)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield
    await runner.cleanup()


@pytest.mark.usefixtures("odd_server")
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_context_overflow_and_missing_usage_are_handled_alike(streamed: bool) -> None:
    on_delta = (lambda _: None) if streamed else None
    outcomes = []
    for client in (LiteLLMClient(), OpenAIClient()):
        with pytest.raises(ModelError) as raised:
            await client.complete("openai/overflow", MESSAGES, [], on_delta=on_delta)
        error = raised.value
        assert str(error).startswith("ContextWindowExceededError: ")
        assert error.context_overflow and not error.transient
        outcomes.append(await client.complete("openai/gpt-4o-mini", MESSAGES, [],
                                              on_delta=on_delta))
    assert without_ids(outcomes[0]) == without_ids(outcomes[1])
    assert outcomes[1].prompt_tokens > 0  # estimated (whole: by lace; streamed: as litellm)


@pytest.mark.usefixtures("odd_server")
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_cached_and_reasoning_tokens_come_from_the_sdks_usage(streamed: bool) -> None:
    reply = await OpenAIClient().complete("openai/gpt-4o", MESSAGES, [],
                                          on_delta=(lambda _: None) if streamed else None)
    assert (reply.content, reply.prompt_tokens, reply.completion_tokens) == ("cached", 2000, 50)
    assert (reply.cache_read_tokens, reply.reasoning_tokens) == (1536, 32)
    full = call_cost("openai/gpt-4o", CallTokens(2000, 50))
    cached = call_cost("openai/gpt-4o", CallTokens(2000, 50, cache_read=1536, reasoning=32))
    assert full is not None and cached is not None and cached < full  # cached input is cheaper
    assert reply.cost_usd == pytest.approx(cached)


@pytest.mark.usefixtures("odd_server")
@pytest.mark.parametrize("model", ["not-json", "error-event"])
async def test_an_answer_that_is_not_json_or_an_error_event_is_sorted_alike(model: str) -> None:
    outcomes = []
    for client in (LiteLLMClient(), OpenAIClient()):
        with pytest.raises(ModelError) as raised:
            await client.complete(f"openai/{model}", MESSAGES, [],
                                  on_delta=(lambda _: None) if model == "error-event" else None)
        outcomes.append((str(raised.value).split(":")[0], raised.value.transient))
    assert outcomes[0] == outcomes[1] and outcomes[1][1]
    if model == "error-event":
        assert "overloaded, try again" in str(raised.value)


async def test_a_streamed_tool_call_of_megabytes_arrives_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One server-sent event far past the line limit of aiohttp's `readline` (the fake sends
    each tool call in one chunk), within the 1,000,000 characters lace keeps of one reply."""
    arguments = json.dumps({"title": "x" * 900_000})
    with FakeOpenAI(lambda model, messages: ScriptedReply(
            tool_calls=[("task_create", arguments)])) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        reply = await OpenAIClient().complete("openai/gpt-4o-mini", MESSAGES, [],
                                              on_delta=lambda _: None)
    assert [(call.name, call.arguments) for call in reply.tool_calls] == [
        ("task_create", arguments)]


# the prompt cache key

def test_a_prompt_cache_key_is_one_per_session_tree_on_openais_endpoint() -> None:
    openai_url, local_url = "https://api.openai.com/v1", "http://127.0.0.1:8000/v1"
    assert session_key(openai_url) is None  # outside a session
    keys = {}
    for tree in ("t_root_one", "t_root_two"):
        token = session_tree.set(tree)
        try:
            keys[tree] = session_key(openai_url)
            assert session_key(local_url) is None  # another server may refuse the field
            assert request("gpt-4o-mini", MESSAGES, [], session_key(openai_url))[
                "prompt_cache_key"] == keys[tree]
        finally:
            session_tree.reset(token)
    assert len(set(keys.values())) == 2 and all(
        key and key.startswith("lace-") and "t_root" not in key for key in keys.values())
    assert "prompt_cache_key" not in request("gpt-4o-mini", MESSAGES, [])


async def test_every_agent_of_a_session_calls_under_its_trees_cache_key(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    class Recording:
        async def complete(self, model: str, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]], **_: Any) -> ModelReply:
            seen.append((model, session_tree.get()))
            if model == "scripted/root" and not any(m["role"] == "tool" for m in messages):
                return ModelReply(content=None, tool_calls=(ToolCallRequest(
                    "c1", "task_create", json.dumps({"tasks": [
                        {"title": "Part", "prompt": "Do it.",
                         "assigned_to": "new:scripted/helper"}]})),))
            return ModelReply(content="done")

    store = Store(open_database(str(tmp_path / "lace.db")))
    runtime = open_runtime(store, Settings(), Recording(), check_model=check_model)
    try:
        root = await runtime.start_session("Fan out.", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    finally:
        await runtime.stop()
        runtime.close()
    assert {model for model, _ in seen} == {"scripted/root", "scripted/helper"}
    assert {tree for _, tree in seen} == {root.id}
    assert session_tree.get() is None  # set around each call only


# prices

@pytest.mark.parametrize("name", ["gpt-4o-mini", "gpt-4.1", "gpt-4o-2024-08-06", "gpt-5",
                                  "gpt-5.4", "o3", "GPT-4O-MINI",
                                  "ft:gpt-4o-mini-2024-07-18:acme::a1b2c3"])
@pytest.mark.parametrize(("prompt", "completion", "cached"),
                         [(1234, 56, 0), (1000, 10, 600), (300_000, 2000, 100_000)])
def test_a_price_is_litellms(name: str, prompt: int, completion: int, cached: int) -> None:
    module = litellm()
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion,
                             "prompt_tokens_details": {"cached_tokens": cached}}
    response = module.ModelResponse(model=name, usage=usage, choices=[
        {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}])
    expected = module.completion_cost(completion_response=response, model=name,
                                      custom_llm_provider="openai")
    tokens = CallTokens(prompt, completion, cache_read=cached)
    assert call_cost(f"openai/{name}", tokens) == pytest.approx(expected, rel=1e-12)
    assert expected > 0


def test_an_unknown_model_has_no_price() -> None:
    assert call_cost("openai/my-local-model", CallTokens(100, 10)) is None
    assert call_cost("anthropic/claude-nobody-knows", CallTokens(100, 10)) is None
    assert not may_be_priced("openai/my-local-model")


@pytest.mark.parametrize("name", ["gpt-4o-mini", "GPT-4O-MINI", "o3", "gpt-5.4",
                                  "ft:gpt-4o-mini-2024-07-18:acme::a1b2c3", "my-local-model",
                                  "ft:my-local-model:acme::a1", "Qwen/Qwen3-8B", "ft:"])
def test_a_model_is_looked_up_in_litellms_table_only_if_litellm_could_price_it(
        name: str) -> None:
    priced = call_cost(f"openai/{name}", CallTokens(1000, 10)) is not None
    assert may_be_priced(f"openai/{name}") or not priced


def test_a_model_litellm_cannot_price_is_called_without_importing_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CALL_AN_UNLISTED_MODEL], capture_output=True,
                          text=True, env=lace_env(tmp_path), timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


# a whole turn

def board_script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Lists the tasks, then answers."""
    if not any(message["role"] == "tool" for message in messages):
        return ScriptedReply(text="Let me look.", tool_calls=[("task_list", {})],
                             prompt_tokens=900, completion_tokens=40)
    return ScriptedReply(text="The board is empty.", prompt_tokens=1100, completion_tokens=25)


async def run_turn(client: ModelClient, db_path: Path, *, streamed: bool) -> dict[str, Any]:
    """One root turn on `openai/gpt-4o-mini` (a 503 first), and what it recorded."""
    store = Store(open_database(str(db_path)))
    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=2))
    runtime = open_runtime(store, settings, client, check_model=check_model)
    with FakeOpenAI(board_script) as fake:
        fake.faults.append("503")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("OPENAI_BASE_URL", fake.base_url)
            patch.setenv("OPENAI_API_KEY", KEY)
            try:
                root = await runtime.start_session("What is on the board?",
                                                   "openai/gpt-4o-mini")
                if streamed:
                    runtime.watch(root.id)
                await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
            finally:
                await runtime.stop()
                runtime.close()
    calls = query(db_path, "SELECT model, prompt_tokens, completion_tokens, cost_usd, error "
                           "FROM llm_calls ORDER BY id")
    return {
        "calls": [(*row[:4], row[4] and row[4].split(":")[0]) for row in calls],
        "agent": query(db_path, "SELECT status, tokens_in, tokens_out, cost_usd "
                                "FROM agent_metadata"),
        "answers": query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                  "WHERE type = 'agent_message' ORDER BY id"),
        "requests": [(body.get("stream", False), [message["role"] for message in body["messages"]])
                     for body in fake.requests]}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_whole_turn_records_the_same_calls_through_either_client(
        tmp_path: Path, streamed: bool) -> None:
    by_litellm = await run_turn(LiteLLMClient(), tmp_path / "litellm.db", streamed=streamed)
    routed = await run_turn(default_client(), tmp_path / "routed.db", streamed=streamed)
    assert routed == by_litellm
    price = call_cost("openai/gpt-4o-mini", CallTokens(900, 40))
    assert routed["calls"][:2] == [("openai/gpt-4o-mini", 0, 0, 0.0, "ServiceUnavailableError"),
                                   ("openai/gpt-4o-mini", 900, 40, price, None)]
    assert routed["answers"][-1] == ("The board is empty.",)
    assert {stream for stream, _ in routed["requests"]} == {streamed}


# the checks before a call import neither litellm nor the openai SDK (seconds of start-up);
# litellm is imported while the first call is out, to price it

CALL_WITHOUT_LITELLM = """
import asyncio, os, sys
import lace.llm.client, lace.llm.openai_client
assert not {"litellm", "openai", "httpx"} & set(sys.modules)
from lace.llm.checks import check_model, known_provider
from lace.llm.client import default_client
from lace.llm.openai_fake import Exchange, FakeOpenAI
from lace.llm.types import ScriptedReply

assert known_provider("openai")
assert check_model("openai", "x") == ("Cannot call openai/x: set OPENAI_API_KEY in the "
                                      "environment, or store the key once with lace keys set "
                                      "openai (or pick another model)")
os.environ["OPENAI_API_KEY"] = "not-a-real-key"
assert check_model("openai", "x") is None
assert not {"litellm", "openai", "httpx"} & set(sys.modules), "a check imported litellm"

async def main():
    client = default_client()
    whole = await client.complete("openai/gpt-4o-mini", [{"role": "user", "content": "hi"}], [])
    streamed = await client.complete("openai/gpt-4o-mini", [{"role": "user", "content": "hi"}],
                                     [], on_delta=lambda delta: None)
    assert whole.content == streamed.content == "hello there" and whole.priced

with FakeOpenAI(lambda model, messages: ScriptedReply(text="hello there")) as fake:
    os.environ["OPENAI_BASE_URL"] = fake.base_url
    asyncio.run(main())
assert "openai" in sys.modules  # the call went through the SDK
print("ok")
"""


CALL_AN_UNLISTED_MODEL = """
import asyncio, os, sys
from lace.llm.client import default_client
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply

async def main():
    client = default_client()
    for streamed in (None, lambda delta: None):
        reply = await client.complete("openai/my-local-model",
                                      [{"role": "user", "content": "hi"}], [], on_delta=streamed)
        assert reply.content == "hello there" and not reply.priced and reply.cost_usd is None

with FakeOpenAI(lambda model, messages: ScriptedReply(text="hello there")) as fake:
    os.environ["OPENAI_BASE_URL"] = fake.base_url
    asyncio.run(main())
assert "litellm" not in sys.modules, "an unpriceable model imported litellm"
print("ok")
"""


def test_the_checks_before_an_openai_call_import_neither_litellm_nor_the_sdk(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CALL_WITHOUT_LITELLM], capture_output=True,
                          text=True, env=lace_env(tmp_path), timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_other_providers_are_still_checked_by_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not known_provider("no-such-provider") and known_provider("anthropic")
    assert check_model("anthropic", "claude-sonnet-4-5") == (
        "Cannot call anthropic/claude-sonnet-4-5: set ANTHROPIC_API_KEY in the environment, "
        "or store the key once with lace keys set anthropic (or pick another model)")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert check_model("openai", "anything") is None  # a local server needs no real key
