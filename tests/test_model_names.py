"""Model names a model or a person writes are checked before any agent exists: no empty part, no
space, control or bidi character; and the test-only `scripted` provider exists only where a test
enables it, while the offline `demo` is always there."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lace.core.assignee import NewAgentSpec, parse_assignee, parse_model
from lace.core.errors import InvalidAssigneeError
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ModelError
from tests.conftest import Caller, query
from tests.conftest import run_cli as lace

CaptureFixture = pytest.CaptureFixture[str]
BAD_MODELS = ["openai//", "openai/", "openai/x/", "openai/a//b", "openai/x\nINJECTED",
              "openai/x\rY", "openai/x\x1b[2K", "openai/\u202ex", "openai/x\u2066",
              "openai/x y", "openai/ x", "openai/x\u00a0", "openai/x\u200b", "openai/x\ud800",
              "openai\n/x", "/x"]
GOOD_MODELS = {"openai/gpt-4o": ("openai", "gpt-4o"),
               "openrouter/meta-llama/llama-3.1-8b:free": ("openrouter",
                                                           "meta-llama/llama-3.1-8b:free"),
               "ollama/llama3:8b": ("ollama", "llama3:8b"),
               "vertex_ai/claude-3-5-sonnet@20240620": ("vertex_ai", "claude-3-5-sonnet@20240620"),
               "bedrock/arn:aws:bedrock:us-east-1:1:provisioned-model/abc": (
                   "bedrock", "arn:aws:bedrock:us-east-1:1:provisioned-model/abc")}


@pytest.mark.parametrize("text", BAD_MODELS)
def test_a_bad_model_name_is_refused(text: str) -> None:
    with pytest.raises(InvalidAssigneeError, match="got "):
        parse_model(text)
    with pytest.raises(InvalidAssigneeError, match="Malformed assignee"):
        parse_assignee(f"new:{text}")
    with pytest.raises(InvalidAssigneeError, match="Malformed assignee"):
        parse_assignee(f"new:critic:{text}")


@pytest.mark.parametrize(("text", "parts"), GOOD_MODELS.items())
def test_real_model_names_still_parse(text: str, parts: tuple[str, str]) -> None:
    assert parse_model(text) == parts
    spec = parse_assignee(f"new:{text}")
    assert isinstance(spec, NewAgentSpec) and (spec.provider, spec.model) == parts


@pytest.mark.parametrize("text", ["new:critic\n", "new:critic\n:openai/x", "new:\u202ecritic"])
def test_a_bad_profile_name_is_refused(text: str) -> None:
    with pytest.raises(InvalidAssigneeError):
        parse_assignee(text)


@pytest.mark.parametrize("model", ["openai/x\nINJECTED", "openai//"])
def test_a_model_cannot_spawn_an_agent_with_a_bad_name(call: Caller, unchanged: Any,
                                                       model: str) -> None:
    with unchanged():
        result = call("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                                 "assigned_to": f"new:{model}"}]})
    assert result.is_error and result.kind == "InvalidAssigneeError"
    assert "Malformed assignee" in result.text


@pytest.mark.parametrize("argv", [
    ["run", "hi", "--model", "openai/x\nINJECTED"],
    ["run", "hi", "--model", "openai//"],
    ["task", "add", "T", "--assign", "new:openai/x\nINJECTED"],
    ["task", "add", "T", "--assign", "new:openai//"],
])
def test_the_command_line_refuses_a_bad_model_name(capsys: CaptureFixture, db_path: Path,
                                                   argv: list[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
    code, out, err = lace(capsys, *argv, "--db", str(db_path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "Expected provider/model" in err or "Malformed assignee" in err
    assert "INJECTED\n" not in err
    if db_path.exists():
        assert query(db_path, "SELECT COUNT(*) FROM threads") == [(0,)]


@pytest.mark.parametrize("argv", [["run", "hi", "--model", "demo/nonsense"],
                                  ["task", "add", "T", "--assign", "new:demo/nonsense"],
                                  ["run", "hi", "--model", "demo/workr"]])
def test_only_the_demo_models_that_exist_are_accepted(capsys: CaptureFixture, db_path: Path,
                                                      argv: list[str]) -> None:
    code, out, err = lace(capsys, *argv, "--db", str(db_path))
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "Unknown demo model" in err
    assert "(the demo models are demo/coordinator and demo/worker" in err
    assert ("did you mean 'demo/worker'?" in err) == ("workr" in " ".join(argv))
    if db_path.exists():
        assert query(db_path, "SELECT COUNT(*) FROM threads") == [(0,)]


def test_an_agent_cannot_spawn_a_demo_model_that_does_not_exist(call: Caller,
                                                                unchanged: Any) -> None:
    with unchanged():
        result = call("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                                 "assigned_to": "new:demo/nonsense"}]})
    assert result.is_error and "Unknown demo model 'demo/nonsense'" in result.text


# the test-only provider

@pytest.fixture
def no_test_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LACE_TEST_PROVIDERS", raising=False)


@pytest.mark.usefixtures("no_test_providers")
def test_scripted_is_unknown_outside_tests(capsys: CaptureFixture, db_path: Path) -> None:
    assert check_model("scripted", "x") == "Unknown provider 'scripted'"
    assert check_model("demo", "coordinator") is None
    code, _, err = lace(capsys, "run", "hi", "--model", "scripted/x", "--db", str(db_path))
    assert code == 2 and "Unknown provider 'scripted'" in err
    code, _, err = lace(capsys, "task", "add", "T", "--assign", "new:scripted/x",
                        "--db", str(db_path))
    assert code == 2 and "Unknown provider 'scripted'" in err
    if db_path.exists():
        with sqlite3.connect(db_path) as connection:
            assert connection.execute("SELECT COUNT(*) FROM threads").fetchone() == (0,)


@pytest.mark.usefixtures("no_test_providers")
def test_an_agent_cannot_spawn_a_scripted_helper_outside_tests(call: Caller,
                                                               unchanged: Any) -> None:
    with unchanged():
        result = call("task_create", {"tasks": [{"title": "t", "prompt": "p",
                                                 "assigned_to": "new:scripted/x"}]})
    assert result.is_error and "Unknown provider 'scripted'" in result.text


@pytest.mark.usefixtures("no_test_providers")
def test_the_client_refuses_scripted_calls_outside_tests() -> None:
    with pytest.raises(ModelError, match="exists only in lace's tests") as raised:
        asyncio.run(default_client().complete("scripted/x", [{"role": "user", "content": "hi"}],
                                              []))
    assert not raised.value.transient


@pytest.mark.usefixtures("no_test_providers")
def test_the_demo_runs_without_the_test_switch(capsys: CaptureFixture, db_path: Path) -> None:
    code, out, _ = lace(capsys, "run", "Write the announcement", "--db", str(db_path))
    assert code == 0 and "Done" in out


def test_a_test_enables_scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_TEST_PROVIDERS", "1")
    assert check_model("scripted", "x") is None


FIRST_CALL = """
import asyncio, os
from lace.llm.client import LiteLLMClient
from lace.llm.litellm_setup import litellm_imported
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply

async def main() -> None:
    started = seen_loop_turn_mid_import = False

    async def first_call() -> object:
        nonlocal started
        started = True
        return await LiteLLMClient().complete("openai/gpt-4o-mini",
                                              [{"role": "user", "content": "hi"}], [])

    async def watch() -> None:
        nonlocal seen_loop_turn_mid_import
        while True:
            seen_loop_turn_mid_import |= started and not litellm_imported()
            await asyncio.sleep(0.01)  # a busy loop would fight the import's thread for the GIL

    watcher = asyncio.create_task(watch())
    reply = await first_call()
    watcher.cancel()
    print(seen_loop_turn_mid_import, bool(reply.content))

with FakeOpenAI(lambda model, messages: ScriptedReply(text="hello")) as server:
    os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="not-a-real-key")
    asyncio.run(main())
"""


def test_the_first_model_call_imports_litellm_off_the_event_loop() -> None:
    # seconds of import on the loop would leave a run or worker deaf to SIGTERM and its timeout
    done = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stdout.split()) == (0, ["True", "True"]), done.stderr
