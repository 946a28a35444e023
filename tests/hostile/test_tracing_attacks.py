"""Tracing under attack (docs/tracing.md): a collector that hangs or refuses never holds up a
turn or lace's exit and costs one line on stderr; prompts, tool arguments and keys never leave
unless asked for (and keys not even then); huge names and values are cut; a forged trace context
on a row, a missing extra or an unsupported protocol leave lace working untraced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lace.config import Limits, Settings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.paths import credential_values, withheld_from_tools
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.otlp import Collector, collector, named
from tests.processes import MANY_PROMPT, free_port, lace
from tests.scripted import ScriptedModels, reply

KEY = "sk-live-trace-attack-0123456789abcdef"
MARKER = "MARKER-7f3a9c"
"""Text of the person's prompt and of a tool's arguments: content that must not leave."""
DONE = "All 4 tasks are done."


@pytest.fixture
async def traced(store: Store, models: ScriptedModels, monkeypatch: pytest.MonkeyPatch,
                 ) -> AsyncIterator[tuple[Runtime, Collector]]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with collector() as otlp:
        for name, value in otlp.environment().items():
            monkeypatch.setenv(name, value)
        runtime = open_runtime(store, Settings(limits=Limits(retry_base_s=0.001)),
                               default_client(), check_model=check_model)
        yield runtime, otlp
        await runtime.stop()
        runtime.close()


def test_a_collector_that_hangs_holds_up_neither_the_turns_nor_the_exit(
        tmp_path: Path) -> None:
    """Every export waits for ever (the exporter's own timeout is longer than the test's):
    the run still ends with its answer, because spans leave in a thread of their own and the
    exit waits a bounded time for them."""
    with collector(hang=True) as otlp:
        run = lace(tmp_path / "home", "run", MANY_PROMPT, OTEL_EXPORTER_OTLP_TIMEOUT="3600",
                   **otlp.environment())
        assert otlp.requests >= 1  # it was asked, and hung
    assert run.returncode == 0, run.stderr
    assert DONE in run.stdout


def test_a_collector_that_refuses_costs_one_line(tmp_path: Path) -> None:
    run = lace(tmp_path / "home", "run", MANY_PROMPT,
               OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
               OTEL_BSP_SCHEDULE_DELAY="50")
    assert run.returncode == 0, run.stderr
    assert DONE in run.stdout
    told = [line for line in run.stderr.splitlines() if "not sent" in line]
    assert len(told) == 1 and "Traceback" not in run.stderr, run.stderr


async def test_a_missing_collector_costs_the_exit_a_fraction_of_a_second_and_one_line(
        store: Store, models: ScriptedModels, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens at the endpoint: the exit stops waiting at the first refusal (it
    waited for the exporter's retries, 2 s) and says in one line how many spans were lost."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # every span waits for the exit
    runtime = open_runtime(store, Settings(), default_client(), check_model=check_model)
    models.on("root", lambda messages: reply("hello"))
    root = await runtime.start_session("Say hello", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    await runtime.stop()
    began = time.monotonic()
    runtime.close()
    took = time.monotonic() - began
    assert took < 1.0, took  # a loaded machine's margin: it takes some 0.05 s
    err = capsys.readouterr().err
    assert err.splitlines() == ["lace: 2 spans not sent: no collector took them before lace "
                                "exited (OTEL_EXPORTER_OTLP_ENDPOINT)"], err


def test_the_command_line_never_leaves_even_with_the_process_detector(tmp_path: Path) -> None:
    """`lace run PROMPT` with OpenTelemetry's process detector asked for: no resource
    attribute carries the command line, and the prompt is nowhere in what was sent."""
    with collector() as otlp:
        run = lace(tmp_path / "home", "run", f"Write the announcement {MARKER} and list the risks",
                   OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="otel,process", **otlp.environment())
        assert run.returncode == 0, run.stderr
        assert otlp.spans
        assert all(MARKER.encode() not in body for body in otlp.bodies)
        resource = otlp.spans[0].resource
    assert resource["service.name"] == "lace"
    assert not {"process.command", "process.command_args", "process.command_line"} & set(
        resource)
    assert "process.pid" in resource  # the detector ran


@pytest.mark.parametrize("capture", [False, True])
async def test_prompts_arguments_and_keys_stay_home(
        traced: tuple[Runtime, Collector], models: ScriptedModels,
        monkeypatch: pytest.MonkeyPatch, capture: bool) -> None:
    """A key and marked text in a tool's arguments and the person's prompt: with content
    capture off none of it is sent; with it on the text is (the switch works), the key never
    (masked)."""
    runtime, otlp = traced
    if capture:  # read when a span is made
        monkeypatch.setattr(runtime.tools.tracing, "capture", True)
    models.on("root", lambda messages: reply(None, ("task_create", {"tasks": [
        {"title": f"Use {KEY}", "prompt": f"{MARKER} with key {KEY}"}]}))
        if messages[-1]["role"] == "user" else reply(f"done {MARKER} {KEY}"))
    root = await runtime.start_session(f"Plan {MARKER} with {KEY}", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    otlp.wait_for(lambda got: len(named(got.spans, "chat ")) == 2 and named(
        got.spans, "invoke_agent "), "the root's turn and its two model calls")
    bodies = b"".join(otlp.bodies)
    assert KEY.encode() not in bodies
    assert (MARKER.encode() in bodies) == capture
    (tool,) = named(otlp.spans, "execute_tool task_create")
    assert ("gen_ai.tool.call.arguments" in tool.attributes) == capture


async def test_huge_names_and_values_are_cut(traced: tuple[Runtime, Collector],
                                             models: ScriptedModels,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A model calls a tool with a 5,000-character name and a 200 KB argument, content
    capture on: the span's name and every attribute arrive cut."""
    runtime, otlp = traced
    monkeypatch.setattr(runtime.tools.tracing, "capture", True)
    name = "t" * 5000
    models.on("root", lambda messages: reply(None, (name, {"text": "x" * 200_000}))
              if messages[-1]["role"] == "user" else reply("no such tool"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    otlp.wait_for(lambda got: named(got.spans, "execute_tool "), "the tool's span")
    (span,) = named(otlp.spans, "execute_tool ")
    assert len(span.name) <= 140 and span.status_code == 2
    assert all(len(str(value)) <= 4096 for value in span.attributes.values())
    assert max(len(body) for body in otlp.bodies) < 100_000


async def test_a_forged_trace_context_on_a_row_starts_a_trace_of_its_own(
        traced: tuple[Runtime, Collector], models: ScriptedModels, store: Store) -> None:
    runtime, otlp = traced
    models.on("root", lambda messages: reply("hello"))
    root = await runtime.start_session("hi", "scripted/root")
    with store.transaction() as tx:  # as an edited database or a hostile import would
        tx.threads.claim_trace(root.id, "00-zz\n<script>-" + "9" * 10_000)
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    otlp.wait_for(lambda got: named(got.spans, "invoke_agent "), "the root's turn")
    (turn,) = named(otlp.spans, "invoke_agent ")
    assert turn.parent_id is None


def test_without_the_extra_lace_runs_untraced_and_says_why(tmp_path: Path) -> None:
    """The OpenTelemetry SDK cannot be imported (as when `lace[otel]` is not installed)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith(('opentelemetry.sdk', 'opentelemetry.exporter')):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Missing())\n")
    with collector() as otlp:
        run = lace(tmp_path / "home", "run", MANY_PROMPT, PYTHONPATH=str(blocker),
                   **otlp.environment())
        assert otlp.requests == 0
    assert run.returncode == 0, run.stderr
    assert DONE in run.stdout
    assert run.stderr.count("pip install 'lace[otel]'") == 1, run.stderr


def test_an_unsupported_protocol_is_named_and_nothing_is_sent(tmp_path: Path) -> None:
    with collector() as otlp:
        run = lace(tmp_path / "home", "run", MANY_PROMPT, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                   **otlp.environment())
        assert otlp.requests == 0
    assert run.returncode == 0, run.stderr
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported" in run.stderr


def test_the_exporters_headers_are_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """`authorization=Bearer KEY` is kept from bash and masked like any key."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"authorization=Bearer%20{KEY}")
    assert withheld_from_tools("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
    assert KEY in credential_values()
