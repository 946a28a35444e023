"""Traces (docs/tracing.md): a session tree arrives at a real OTLP/HTTP endpoint (`tests.otlp`)
as one trace whose spans nest as its agents do, helpers of helpers and helpers run by other
processes included; metrics arrive beside it; with no endpoint nothing of OpenTelemetry loads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from lace.config import Limits, Settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.runtime.database import AsyncStore
from lace.runtime.otel import OtelTracing
from lace.runtime.tracing import NO_TRACING, tracing_from
from lace.store import Store
from tests.conftest import query
from tests.lace_forks import run_lace
from tests.otlp import Collector, ReceivedSpan, collector, named
from tests.processes import MANY_PROMPT, lace_env
from tests.scripted import ScriptedModels, assigned_task, dutiful_worker, reply, tools_called
from tests.scripted_coordinator import coordinator
from tests.workers import new_database, ready, rows, worker

pytestmark = pytest.mark.both_engines
SPAWNERS = ("execute_tool task_create", "execute_tool delegate")


@pytest.fixture
def otlp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """A collector, and this process's runtimes sending to it."""
    with collector() as received:
        for name, value in received.environment().items():
            monkeypatch.setenv(name, value)
        yield received


@pytest.fixture
async def traced(store: Store, models: ScriptedModels, otlp: Collector,
                 ) -> AsyncIterator[Runtime]:
    runtime = open_runtime(store, Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.002)),
                           default_client(), check_model=check_model)
    yield runtime
    await runtime.stop()
    runtime.close()


def middle_manager(messages: list[dict[str, Any]]) -> ScriptedReply:
    """A helper that delegates its task to a helper of its own, waits for its answer and
    completes its task with it."""
    done = tools_called(messages)
    if "delegate" not in done:
        return reply(None, ("delegate", {"tasks": [
            {"title": "Leaf work", "prompt": "Do the leaf work", "expected_response": "a line",
             "assigned_to": "new:scripted/leaf"}]}))
    if "task_complete" not in done:
        return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                              "message": "handed on"}))
    return reply("done")


def by_agent(spans: list[ReceivedSpan], operation: str) -> dict[str, list[ReceivedSpan]]:
    found: dict[str, list[ReceivedSpan]] = {}
    for span in named(spans, operation):
        found.setdefault(span.attributes["gen_ai.agent.id"], []).append(span)
    return found


def metered(got: Collector, metric: str, field: str, **attributes: str) -> float:
    """A metric's total so far over its points with `attributes` (the SDK sends running
    totals, one per set of attributes: the last one of each counts)."""
    totals: dict[frozenset[tuple[str, Any]], float] = {}
    for point in got.metrics.get(metric, []):
        if all(point["attributes"].get(key) == value for key, value in attributes.items()):
            key = frozenset(point["attributes"].items())
            totals[key] = max(totals.get(key, 0.0), point[field])
    return sum(totals.values())


def closed(spans: list[ReceivedSpan]) -> bool:
    """Whether the parent of every span arrived too (a parent ends, and leaves, last)."""
    ids = {span.span_id for span in spans}
    return all(span.parent_id is None or span.parent_id in ids for span in spans)


def assert_one_tree(spans: list[ReceivedSpan], parents: dict[str, str | None]) -> None:
    """Every span is of one trace; each agent's turns hang under the `execute_tool` span of
    the call of its parent's turn that spawned it (a root's later turns under its first);
    every model and tool call under a turn of its own agent."""
    assert len({span.trace_id for span in spans}) == 1
    by_id = {span.span_id: span for span in spans}
    turns = by_agent(spans, "invoke_agent ")
    assert set(turns) == set(parents)
    for thread_id, parent_id in parents.items():
        if parent_id is None:  # the root: its first turn starts the trace, the others under it
            (first,) = [turn for turn in turns[thread_id] if turn.parent_id is None]
            assert all(turn.parent_id == first.span_id
                       for turn in turns[thread_id] if turn is not first)
            continue
        for turn in turns[thread_id]:
            assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
            spawner = by_id[turn.parent_id or ""]
            assert spawner.name in SPAWNERS
            assert spawner.attributes["gen_ai.agent.id"] == parent_id
            assert by_id[spawner.parent_id or ""].name.startswith("invoke_agent ")
            assert by_id[spawner.parent_id or ""].attributes["gen_ai.agent.id"] == parent_id
    for span in named(spans, "chat ") + named(spans, "execute_tool "):
        turn = by_id[span.parent_id or ""]
        assert turn.name.startswith("invoke_agent ")
        assert turn.attributes["gen_ai.agent.id"] == span.attributes["gen_ai.agent.id"]


async def test_a_fan_out_and_a_helpers_helper_arrive_as_one_tree(
        traced: Runtime, models: ScriptedModels, otlp: Collector, db_path: Path) -> None:
    models.on("root", coordinator("new:scripted/mid", "new:scripted/leaf",
                                  titles=("Hand on", "Leaf")))
    models.on("mid", middle_manager)
    worker = dutiful_worker()

    def cached(messages: list[dict[str, Any]]) -> ScriptedReply:
        """The leaf's provider says 4 of its 10 input tokens were read from its prompt cache."""
        reply = worker(messages)
        assert isinstance(reply, ScriptedReply)
        return dataclasses.replace(reply, cache_read_tokens=4)

    models.on("leaf", cached)
    root = await traced.start_session("Plan it", "scripted/root")
    await asyncio.wait_for(traced.run_until_quiet(root.id), 60)
    threads = dict(query(db_path, "SELECT id, parent_id FROM threads"))
    assert len(threads) == 4  # the root, its two helpers, and the helper's helper
    turns = query(db_path, "SELECT thread_id FROM events WHERE type = 'agent_message'")
    calls = len(turns)  # one `chat` span per model call
    otlp.wait_for(lambda got: len(named(got.spans, "chat ")) == calls and closed(got.spans),
                  "every span of the session")
    spans = list(otlp.spans)
    assert_one_tree(spans, threads)
    grandchild = next(thread for thread in threads if thread.count(".") == 2)
    assert threads[grandchild] is not None and threads[grandchild].count(".") == 1
    trace_id = spans[0].trace_id
    stored = dict(query(db_path, "SELECT id, trace_parent FROM threads"))
    spawned_under = {span.span_id for span in spans if span.name in SPAWNERS}
    for thread_id, value in stored.items():
        assert value is not None and value.split("-")[1] == trace_id
        assert thread_id == root.id or value.split("-")[2] in spawned_under
    chat = named(spans, "chat ", **{"gen_ai.request.model": "leaf"})[0]
    assert chat.attributes["gen_ai.provider.name"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 10  # the scripted usage
    assert chat.attributes["gen_ai.usage.output_tokens"] == 5
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 4
    assert "gen_ai.usage.cache_creation.input_tokens" not in chat.attributes  # not said
    assert chat.kind == 3  # CLIENT
    assert chat.resource["service.name"] == "lace"
    tool = named(spans, "execute_tool task_complete")[0]
    assert tool.attributes["gen_ai.tool.name"] == "task_complete"
    assert tool.attributes["gen_ai.tool.call.id"]
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # no content unless opted in
    usage = "gen_ai.client.token.usage"
    otlp.wait_for(lambda got: (
        metered(got, usage, "sum", **{"gen_ai.token.type": "input"}),
        metered(got, usage, "sum", **{"gen_ai.token.type": "output"}),
        metered(got, "gen_ai.client.operation.duration", "count")) == (
        10 * calls, 5 * calls, calls), "the token usage and duration of every model call")


async def test_a_failed_tool_call_is_an_error_span(
        traced: Runtime, models: ScriptedModels, otlp: Collector) -> None:
    models.on("root", lambda messages: reply(None, ("task_get", {"task_id": "task_x"}))
              if messages[-1]["role"] == "user" else reply("it failed"))
    root = await traced.start_session("look", "scripted/root")
    await asyncio.wait_for(traced.run_until_quiet(root.id), 60)
    otlp.wait_for(lambda got: named(got.spans, "execute_tool task_get"), "the tool's span")
    (span,) = named(otlp.spans, "execute_tool task_get")
    assert span.status_code == 2  # ERROR
    assert span.attributes["error.type"] == span.status_message == "ToolError"


@pytest.mark.sqlite_only
def test_lace_run_sends_every_span_before_it_exits(tmp_path: Path) -> None:
    """The demo fan-out of `lace run` (the summing-up helper spawned later, from its waiting
    plan, still under the root's `task_create`): every span has arrived when `lace run` exits,
    and `lace threads --json` names the trace."""
    home = tmp_path / "home"
    with collector() as otlp:
        run = lace_at_collector(home, otlp, "run", MANY_PROMPT,  # no batch leaves before
                                OTEL_BSP_SCHEDULE_DELAY="600000")  # the exit sends them all
        spans = list(otlp.spans)  # no waiting: they were sent before the run exited
    assert run.returncode == 0, run.stderr
    threads = dict(rows(home / "lace.db", "SELECT id, parent_id FROM threads"))
    assert len(threads) == 5  # the root and four demo helpers
    assert closed(spans)
    assert_one_tree(spans, threads)
    shown = run_lace(["threads", "--json"], env=lace_env(home), timeout=60)
    listed = json.loads(shown.stdout)["threads"]
    assert {thread["trace_id"] for thread in listed} == {spans[0].trace_id}


@pytest.mark.sqlite_only
@pytest.mark.slow
def test_helpers_run_by_other_processes_continue_the_sessions_trace(tmp_path: Path) -> None:
    """A session queued by `lace run --detach` and run by two `lace worker` processes, each
    one turn at a time: helpers run in both, and every turn continues the session's one trace
    under the call that spawned it; each worker sends its spans before it exits."""
    home = tmp_path / "home"
    db = new_database(tmp_path)
    with collector() as otlp:
        env = {**otlp.environment(), "LACE_DEMO_DELAY": "0.3",
               "OTEL_BSP_SCHEDULE_DELAY": "600000"}  # every span leaves as its worker exits
        with worker(tmp_path, db, "--max-agents", "1", name="a", **env) as first, \
                worker(tmp_path, db, "--max-agents", "1", name="b", **env) as second:
            ready(db, 2)
            queued = lace_at_collector(home, otlp, "run", "--detach", MANY_PROMPT)
            assert queued.returncode == 0, queued.stderr
            waited = lace_at_collector(home, otlp, "wait", queued.stdout.strip())
            assert waited.returncode == 0, waited.stderr
            for process in (first, second):
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0
        spans = list(otlp.spans)
    threads = dict(rows(db, "SELECT id, parent_id FROM threads"))
    holders = dict(rows(db, "SELECT thread_id, lease_holder FROM agent_metadata"))
    assert len(threads) == 5 and len(set(holders.values())) == 2  # both workers ran turns
    assert closed(spans)
    assert_one_tree(spans, threads)


def lace_at_collector(home: Path, otlp: Collector, *argv: str,
                      **env: str) -> subprocess.CompletedProcess[str]:
    """`lace *argv` to its end, sending its spans to `otlp`."""
    return run_lace([*argv], env=lace_env(home, **{**otlp.environment(), **env}), timeout=180)


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    """A run with no OTEL endpoint imports no module of OpenTelemetry (nor lace's own)."""
    program = (
        "import sys, lace\n"
        "result = lace.run('Write the announcement and list the risks.',\n"
        "                  model='demo/coordinator', db=sys.argv[1])\n"
        "print(bool(result.output), 'lace.runtime.otel' in sys.modules,\n"
        "      any(name.startswith('opentelemetry') for name in sys.modules))\n")
    env = {key: value for key, value in lace_env(tmp_path / "home").items()
           if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path / "lace.db")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["True", "False", "False"], done.stderr


@pytest.mark.sqlite_only
def test_the_tracing_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import tracing_overhead

    cost = tracing_overhead.main(["--tiny"])
    assert len(cost.off_ms) == len(cost.on_ms) == 5
    assert "added per tool call" in capsys.readouterr().out


async def test_the_persons_calls_join_the_sessions_trace(
        traced: Runtime, models: ScriptedModels, otlp: Collector, db_path: Path) -> None:
    """A call the person makes through the runtime (the app, `lace mcp serve`) hangs under the
    session's trace, and a helper it spawns under that call."""
    models.on("root", lambda messages: reply("hello"))
    models.on("leaf", dutiful_worker())
    root = await traced.start_session("hi", "scripted/root")
    await asyncio.wait_for(traced.run_until_quiet(root.id), 60)
    result = await traced.act_as_human(root.id, "task_create", {"tasks": [
        {"title": "By hand", "prompt": "Do it", "assigned_to": "new:scripted/leaf"}]})
    assert not result.is_error, result.text
    await asyncio.wait_for(traced.run_until_quiet(root.id), 60)
    otlp.wait_for(lambda got: len(named(got.spans, "invoke_agent ")) == 4 and closed(got.spans),
                  "the root's turns (its prompt, the person's task added, then completed), "
                  "the person's call and the helper's turn")
    (stored,), = query(db_path, "SELECT trace_parent FROM threads WHERE id = ?", root.id)
    (call,) = named(otlp.spans, "execute_tool task_create")
    assert call.attributes["gen_ai.agent.id"] == "human"
    assert (call.trace_id, call.parent_id) == tuple(stored.split("-")[1:3])
    (helper,) = [span for span in named(otlp.spans, "invoke_agent ")
                 if span.attributes["gen_ai.agent.id"] != root.id]
    assert helper.parent_id == call.span_id


@pytest.mark.sqlite_only
@pytest.mark.parametrize("environ", [
    {}, {"OTEL_EXPORTER_OTLP_ENDPOINT": " "},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}])
def test_no_endpoint_or_a_disabled_sdk_is_no_tracing(store: Store,
                                                     environ: dict[str, str]) -> None:
    db = AsyncStore(store)
    try:
        assert tracing_from(environ, db, pytest.fail) is NO_TRACING
    finally:
        db.close()


class AuthenticationError(Exception):
    """Named as a provider's refusal is: not worth a retry."""


async def test_a_failing_model_call_and_its_turn_are_error_spans(
        runtime: Runtime, models: ScriptedModels) -> None:
    """With an in-process exporter: a model call that fails is a `chat` span in error, and so
    is the turn it ends; the status names the error's kind, never its text."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime.tools.tracing = OtelTracing(runtime.db, provider, None)

    def refused(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise AuthenticationError("invalid key sk-abc for PROMPT-TEXT")

    models.on("root", refused)
    root = await runtime.start_session("hi", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"chat root", "invoke_agent root"}
    for span in spans.values():
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "ModelError"
        assert span.attributes is not None and span.attributes["error.type"] == "ModelError"
    assert spans["chat root"].parent is not None
    assert spans["chat root"].parent.span_id == spans["invoke_agent root"].context.span_id
