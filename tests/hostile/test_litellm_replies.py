"""A hostile or broken provider reached through litellm (`anthropic/...` or an OpenAI-compatible
one at a base URL a person configured), or streaming on the openai path: an answer that does
not end, in one body or as a stream, is refused while it is read (`AnswerTooLarge`, not
retried), in bounded memory and time; a normal answer still comes, and the other agents go
on."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.llm.answer_limit import MAX_ANSWER_BYTES, MAX_STREAMED_CHUNKS, AnswerTooLargeError
from lace.llm.anthropic_fake import FakeAnthropic
from lace.llm.client import LiteLLMClient
from lace.llm.litellm_setup import litellm
from lace.llm.openai_client import OpenAIClient
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ModelError, ScriptedReply
from tests.conftest import query, run_cli
from tests.endless_provider import MB, EndlessProvider
from tests.hostile.measured import Measured, measured_lace
from tests.processes import lace_env
from tests.scripted import ASSIGNED, dutiful_worker, text
from tests.scripted_coordinator import coordinator

MODEL = "anthropic/claude-sonnet-4-5"
STREAMED_CALL = """
import asyncio, json, resource, sys, time
from lace.llm.client import default_client

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

async def ticking(ticks):
    while True:
        await asyncio.sleep(0.01)
        ticks.append(time.monotonic())

async def call():
    client = default_client()
    client.warm_up()
    before, started, deltas, ticks = peak_mb(), time.monotonic(), [], []
    ticker = asyncio.create_task(ticking(ticks))
    try:
        await client.complete(sys.argv[1], [{"role": "user", "content": "hi"}], [],
                              on_delta=deltas.append)
        error, transient = None, None
    except Exception as failure:
        error, transient = str(failure), getattr(failure, "transient", None)
    ticker.cancel()
    print(json.dumps({"error": error, "transient": transient, "deltas": len(deltas),
                      "seconds": time.monotonic() - started, "ticks": len(ticks),
                      "before_mb": before, "after_mb": peak_mb()}))

asyncio.run(call())
"""
"""Calls a model once (through litellm, or the openai SDK for `openai/`), streamed, beside a
task ticking every 10 ms on the same loop, and prints (JSON) how the call ended, how long it
took, how often the other task ran, and this process's peak memory before and after."""


def lace_run(tmp_path: Path, base_url: str, name: str) -> Measured:
    """`lace run` of an `anthropic/` model at `base_url`, in a home and workspace of its own."""
    workspace = tmp_path / name
    workspace.mkdir()
    env = lace_env(tmp_path / f"{name}-home", ANTHROPIC_API_BASE=base_url,
                   ANTHROPIC_API_KEY="sk-ant-not-a-key")
    return measured_lace(["run", "go", "--model", MODEL, "--yes"], env, workspace,
                         timeout_s=180)


def test_an_endless_answer_through_litellm_is_refused_at_the_read_limit(
        tmp_path: Path) -> None:
    with FakeAnthropic(lambda model, messages: ScriptedReply(text="a normal answer")) as fake:
        normal = lace_run(tmp_path, fake.base_url, "normal")
    assert normal.returncode == 0, normal.err
    assert "a normal answer" in normal.out
    started = time.monotonic()
    with EndlessProvider(offered=256 * MB) as endless:
        ran = lace_run(tmp_path, endless.base_url, "endless")
    seconds = time.monotonic() - started
    print(f"peak {normal.peak_mb:.0f} MB on a normal answer, {ran.peak_mb:.0f} MB on an "
          f"endless one ({endless.sent / MB:.0f} MB sent, {seconds:.1f} s)")
    assert ran.returncode == 1, ran.err
    limit = MAX_ANSWER_BYTES // MB
    assert f"the answer is more than {limit} MB; lace reads at most {limit} MB" in ran.err
    db = tmp_path / "endless-home" / "lace.db"
    ((error,),) = query(db, "SELECT error FROM llm_calls")  # one call: not retried
    assert error.startswith("AnswerTooLarge")
    assert endless.requests == 1
    assert endless.sent < 64 * MB  # lace hung up at the limit, not at the end of the offer
    assert ran.peak_mb - normal.peak_mb < 128
    ((event,),) = query(db, "SELECT data ->> '$.error' FROM events WHERE type = 'error'")
    assert event == error


def test_a_helper_on_an_endless_endpoint_fails_alone_and_its_task_says_why(
        tmp_path: Path) -> None:
    root = coordinator(f"new:{MODEL}", "new:openai/fake", titles=("Hostile", "Plain"))
    worker = dutiful_worker("the plain part is done")

    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        helper = any(ASSIGNED.search(text(m)) for m in messages if m["role"] == "user")
        return worker(messages) if helper else root(messages)

    workspace = tmp_path / "work"
    workspace.mkdir()
    with FakeOpenAI(script) as fake, EndlessProvider() as endless:
        env = lace_env(tmp_path / "home", OPENAI_BASE_URL=fake.base_url,
                       OPENAI_API_KEY="not-a-key", ANTHROPIC_API_BASE=endless.base_url,
                       ANTHROPIC_API_KEY="sk-ant-not-a-key")
        ran = measured_lace(["run", "go", "--model", "openai/fake", "--yes"], env, workspace,
                            timeout_s=180)
    assert ran.returncode == 0, ran.err
    db = tmp_path / "home" / "lace.db"
    tasks = dict(query(db, "SELECT title, status FROM tasks"))
    assert tasks == {"Hostile": "blocked", "Plain": "completed"}
    ((note,),) = query(db, "SELECT n.content FROM task_notes n JOIN tasks t ON t.id = n.task_id "
                           "WHERE t.title = 'Hostile'")
    limit = MAX_ANSWER_BYTES // MB
    assert note == (f"Blocked: the agent's model failed: AnswerTooLarge: the answer is more than "
                    f"{limit} MB; lace reads at most {limit} MB of one answer")
    assert endless.requests == 1


@pytest.mark.parametrize("model", [MODEL, "openai/some-model"])
def test_an_endless_stream_stops_at_the_chunk_limit_and_holds_no_loop(
        tmp_path: Path, model: str) -> None:
    """Through litellm (`anthropic/`), and on the openai path, where such a stream went on for
    good, the loop held."""
    with EndlessProvider() as endless:
        env = lace_env(tmp_path / "home", ANTHROPIC_API_BASE=endless.base_url,
                       ANTHROPIC_API_KEY="sk-ant-not-a-key", OPENAI_BASE_URL=endless.base_url,
                       OPENAI_API_KEY="sk-not-a-key")
        ran = subprocess.run([sys.executable, "-c", STREAMED_CALL, model], env=env,
                             capture_output=True, text=True, timeout=180, check=False)
    assert ran.returncode == 0, ran.stderr
    ended = json.loads(ran.stdout)
    print(ended, f"{endless.sent / MB:.0f} MB sent")
    assert ended["error"] == (f"AnswerTooLarge: the answer is more than "
                              f"{MAX_STREAMED_CHUNKS:,} chunks; lace reads at most "
                              f"{MAX_STREAMED_CHUNKS:,} chunks of one answer")
    assert ended["transient"] is False
    assert MAX_STREAMED_CHUNKS - 10 <= ended["deltas"] <= MAX_STREAMED_CHUNKS
    assert endless.requests == 1
    # lace hung up long before the end of the offer (256 MB); what the server wrote past the
    # chunk limit sat in socket buffers and read-ahead (34 and 38 MB on a loaded CI machine)
    assert endless.sent < 4 * MAX_ANSWER_BYTES
    assert ended["after_mb"] - ended["before_mb"] < 1024  # litellm keeps every chunk
    assert ended["ticks"] > 10 * ended["seconds"]  # the loop went on (100 a second at best)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_an_endless_answer_of_an_openai_compatible_provider_is_refused(
        monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    """On litellm's default transport (aiohttp) and on httpx's (`DISABLE_AIOHTTP_TRANSPORT`)."""
    monkeypatch.setattr(litellm(), "disable_aiohttp_transport", transport == "httpx")
    with EndlessProvider() as endless:
        monkeypatch.setenv("HOSTED_VLLM_API_BASE", endless.base_url)
        started = time.monotonic()
        with pytest.raises(AnswerTooLargeError) as refused:
            await LiteLLMClient().complete("hosted_vllm/some-model",
                                           [{"role": "user", "content": "hi"}], [])
        seconds = time.monotonic() - started
        deadline = time.monotonic() + 10  # the loop closes the socket; the server sees it
        while not endless.hung_up and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert endless.hung_up == 1  # at once, not when the garbage collector finds it
    assert refused.value.transient is False
    assert endless.requests == 1
    assert endless.sent < 2 * MAX_ANSWER_BYTES
    assert seconds < 60, seconds


async def test_an_endless_stream_on_the_openai_path_is_refused_and_its_connection_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The openai SDK's stream, left at the chunk limit, kept its connection open (the server
    went on writing into it) until the garbage collector found it."""
    with EndlessProvider(offered=64 * MB) as endless:
        monkeypatch.setenv("OPENAI_BASE_URL", endless.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-key")
        deltas: list[str] = []
        with pytest.raises(AnswerTooLargeError) as refused:
            await OpenAIClient().complete("openai/some-model",
                                          [{"role": "user", "content": "hi"}], [],
                                          on_delta=deltas.append)
        deadline = time.monotonic() + 10  # the loop closes the socket; the server sees it
        while not endless.hung_up and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert endless.hung_up == 1  # at once, not when the garbage collector finds it
    assert str(refused.value).startswith(f"AnswerTooLarge: the answer is more than "
                                         f"{MAX_STREAMED_CHUNKS:,} chunks")
    assert MAX_STREAMED_CHUNKS - 10 <= len(deltas) <= MAX_STREAMED_CHUNKS
    assert endless.requests == 1


def test_a_provider_whose_answers_lace_cannot_bound_is_refused_before_any_call(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """litellm's `aiohttp_openai/` reads its answers with a client of its own, past the limit
    every other transport reads with: a person naming it (here for a helper) gets one line and
    exit 2, and nothing is written."""
    db = tmp_path / "lace.db"
    code, out, err = run_cli(capsys, "task", "add", "x", "--assign",
                             "new:aiohttp_openai/gpt-4o", "--db", str(db))
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert "cannot bound the size of its answers" in err
    assert not db.exists()  # refused before the board is made


async def test_an_agent_row_naming_a_provider_lace_cannot_bound_calls_nothing() -> None:
    """A row may name such a provider all the same (an edited database): the call is refused
    before any request, for good (not retried)."""
    with pytest.raises(ModelError) as refused:
        await LiteLLMClient().complete("aiohttp_openai/gpt-4o",
                                       [{"role": "user", "content": "hi"}], [])
    assert refused.value.transient is False
    assert "cannot bound the size of its answers" in str(refused.value)
