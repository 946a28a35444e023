"""Credentials stay out of what lace writes and prints: `bash` runs without them, and the value of
every credential variable in lace's environment is masked in events, notes, inbox texts,
`llm_calls` errors, logs and stderr progress."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Settings, ToolSettings
from lace.core.secrets import MIN_MASKED_LENGTH, mask, mask_data
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.paths import credential_values
from lace.runtime import open_runtime
from lace.runtime.events import ApprovalRequested, EventAppended, TurnFailed
from lace.store import Store
from lace.tools.registry import ToolRegistry
from lace.tools.shell import Bash
from tests.conftest import query, run_cli
from tests.scripted import ScriptedModels, reply, tools_called

PLAIN_KEY = "local-secret-123"
BASE64_KEY = "c2VjcmV0LWtleS1iYXNlNjQrLz0/Pz8+Pj4+Zm9v+/9="
DB_PASSWORD = "pg-pass-9876543"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two credentials a pattern cannot recognise: a short plain key and a base64 one."""
    monkeypatch.setenv("OPENAI_API_KEY", PLAIN_KEY)
    monkeypatch.setenv("ACME_SERVICE_TOKEN", BASE64_KEY)
    return PLAIN_KEY, BASE64_KEY


def leaked(db_path: Path, *secrets: str) -> list[str]:
    """The secrets found in the bytes of the database, its WAL or its shared memory."""
    files = list(db_path.parent.glob(db_path.name + "*"))
    assert files
    return [secret for secret in secrets for path in files if secret.encode() in path.read_bytes()]


# the pure masking rule

def test_mask_replaces_each_value_and_leaves_short_ones() -> None:
    secrets = (PLAIN_KEY, BASE64_KEY, "short")
    text = f"key={PLAIN_KEY}; b64 {BASE64_KEY}; a short word; {PLAIN_KEY}!"
    assert mask(text, secrets) == "key=[redacted]; b64 [redacted]; a short word; [redacted]!"
    assert MIN_MASKED_LENGTH == 8 and mask("abcdefg", ["abcdefg"]) == "abcdefg"
    assert mask("abcdefgh", ["abcdefgh"]) == "[redacted]"
    assert mask("no secrets here", []) == "no secrets here"


def test_mask_hides_the_longest_value_whole_and_the_url_quoted_form() -> None:
    assert mask("x local-secret-123-extended y", [PLAIN_KEY, PLAIN_KEY + "-extended"]) == \
        "x [redacted] y"
    assert mask("GET /v1?key=c2VjcmV0LWtleS1iYXNlNjQrLz0%2FPz8%2BPj4%2BZm9v%2B%2F9%3D",
                [BASE64_KEY]) == "GET /v1?key=[redacted]"


def test_mask_data_reaches_every_string_however_deep() -> None:
    deep: Any = PLAIN_KEY
    for _ in range(3000):
        deep = {"a": [deep]}
    masked = mask_data({"text": PLAIN_KEY, PLAIN_KEY: 1, "n": 3, "deep": deep}, [PLAIN_KEY])
    assert masked["text"] == "[redacted]" and masked["[redacted]"] == 1 and masked["n"] == 3
    inner = masked["deep"]
    for _ in range(3000):
        inner = inner["a"][0]
    assert inner == "[redacted]"
    untouched = {"a": ["b"]}
    assert mask_data(untouched, []) is untouched


def test_credential_values_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_SERVICE_TOKEN", BASE64_KEY)
    monkeypatch.setenv("ACME_HOME", "/not/a/secret/at/all")
    assert BASE64_KEY in credential_values()
    assert "/not/a/secret/at/all" not in credential_values()
    monkeypatch.setenv("ACME_SERVICE_TOKEN", "rotated-token-0001")
    monkeypatch.setenv("DATABASE_URL", f"postgresql://lace:{DB_PASSWORD}@db.example/lace")
    values = credential_values()
    assert "rotated-token-0001" in values and BASE64_KEY not in values
    assert DB_PASSWORD in values
    monkeypatch.delenv("ACME_SERVICE_TOKEN")
    assert "rotated-token-0001" not in credential_values()


# bash runs without credentials

async def bash(workspace: Path, command: str) -> str:
    tool = ToolRegistry().parse("bash", {"command": command})
    assert isinstance(tool, Bash)
    return (await tool.perform(workspace)).text


async def test_bash_runs_without_credentials_or_database_settings(
        tmp_path: Path, keys: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_DB", str(tmp_path / "lace.db"))
    monkeypatch.setenv("DATABASE_URL", f"postgresql://lace:{DB_PASSWORD}@db.example/lace")
    monkeypatch.setenv("PGPASSWORD", DB_PASSWORD)
    monkeypatch.setenv("PGHOST", "db.example")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID0001")
    monkeypatch.setenv("WATSONX_APIKEY", "watsonx-api-key-0001")
    monkeypatch.setenv("ACME_PLAIN_SETTING", "kept-for-bash")
    output = await bash(tmp_path, "env; echo \"[$OPENAI_API_KEY]\"")
    for secret in (*keys, DB_PASSWORD, "db.example", "AKIAEXAMPLEKEYID0001",
                   "watsonx-api-key-0001", "LACE_DB", "LACE_HOME"):
        assert secret not in output
    assert "[]" in output and "ACME_PLAIN_SETTING=kept-for-bash" in output
    assert "PATH=" in output


async def test_pass_env_lets_named_variables_through(
        tmp_path: Path, keys: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "lace.toml"
    config.write_text('[tools.bash]\npass_env = ["ACME_SERVICE_TOKEN"]\n')
    monkeypatch.setenv("LACE_CONFIG", str(config))
    output = await bash(tmp_path, "echo \"[$ACME_SERVICE_TOKEN] [$OPENAI_API_KEY]\"")
    assert output.splitlines()[0] == f"[{BASE64_KEY}] []"
    settings = ToolSettings.model_validate({"bash": {"pass_env": ["A_TOKEN"]}})
    assert settings.overridden(allow_all=True).bash.pass_env == ["A_TOKEN"]


# nothing lace writes holds a key

def key_leaking_root(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Writes the keys into a task note, answers with them and has bash echo them."""
    called = tools_called(messages)
    if "task_create" not in called:
        return reply(None, ("task_create", {"tasks": [
            {"title": "Keep", "prompt": "p", "assigned_to": "human"}]}))
    if "task_add_note" not in called:
        task_id = re.findall(r"task_\w+", str(messages[-1]["content"]))[0]
        return reply(None, ("task_add_note", {"task_id": task_id,
                                              "note": f"keys {PLAIN_KEY} {BASE64_KEY}"}))
    if "bash" not in called:
        return reply(f"here they are: {PLAIN_KEY} and {BASE64_KEY}", ("bash", {
            "command": f"echo {PLAIN_KEY} {BASE64_KEY}; echo \"[$OPENAI_API_KEY]\""}))
    return reply("finished")


async def test_keys_in_answers_notes_and_bash_output_are_masked(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path,
        keys: tuple[str, str]) -> None:
    settings = Settings(tools=ToolSettings(policy={"bash": "allow"}))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                           workspace=tmp_path)
    models.on("root", key_leaking_root)
    session = await runtime.start_session("go", "scripted/root")
    async with asyncio.timeout(30):
        await runtime.run_until_quiet(session.id)
    await runtime.stop()
    runtime.close()
    answers = [text for (text,) in query(
        db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                 "WHERE type = 'agent_message' AND json_extract(data, '$.message.content') "
                 "IS NOT NULL ORDER BY id")]
    assert answers == ["here they are: [redacted] and [redacted]", "finished"]
    notes = query(db_path, "SELECT content FROM task_notes")
    assert notes == [("keys [redacted] [redacted]",)]
    (bash_output,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM "
                                     "events WHERE type = 'tool_result' AND "
                                     "json_extract(data, '$.tool_name') = 'bash'")
    assert bash_output == "[redacted] [redacted]\n[]\n[exit code 0]"
    assert leaked(db_path, *keys) == []


def test_a_key_in_an_inbox_text_is_masked(store: Store, db_path: Path,
                                          keys: tuple[str, str]) -> None:
    with store.transaction() as tx:
        root = tx.threads.create_session(provider="demo", model="coordinator")
        tx.inbox.post(root.id, sender="human", kind="message", text=f"use {PLAIN_KEY}")
    assert query(db_path, "SELECT text FROM inbox") == [("use [redacted]",)]


@pytest.fixture
def echoing_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(lambda model, messages: ScriptedReply(text="ok")) as fake:
        fake.echo_key = True
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        yield fake


async def test_a_provider_error_echoing_a_key_is_masked_everywhere(
        store: Store, echoing_server: FakeOpenAI, db_path: Path, keys: tuple[str, str],
        caplog: pytest.LogCaptureFixture) -> None:
    echoing_server.faults += ["400"] * 3
    caplog.set_level(logging.DEBUG)
    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=2))
    runtime = open_runtime(store, settings, default_client(), check_model=check_model)
    session = await runtime.start_session("hi", "openai/fake")
    async with asyncio.timeout(30):
        await runtime.run_until_quiet(session.id)
    await runtime.stop()
    runtime.close()
    (error,), = query(db_path, "SELECT error FROM llm_calls")
    assert "fake error 400" in error and "[redacted]" in error
    assert leaked(db_path, *keys) == []
    assert PLAIN_KEY not in caplog.text


# logs and stderr

@pytest.fixture
def restored_log_records() -> Iterator[None]:
    factory = logging.getLogRecordFactory()
    yield
    logging.setLogRecordFactory(factory)


def test_logs_of_every_lace_logger_are_masked_once_the_cli_starts(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        keys: tuple[str, str], restored_log_records: None) -> None:
    code, _out, _err = run_cli(capsys, "db", "path")
    assert code == 0
    try:
        raise RuntimeError(f"failed with {BASE64_KEY}")
    except RuntimeError:
        logging.getLogger("lace.runtime").exception("call with %s failed", PLAIN_KEY)
    logging.getLogger("LiteLLM").warning("header Bearer %s", PLAIN_KEY)
    logged = caplog.text + capsys.readouterr().err
    assert "call with [redacted] failed" in logged and "failed with [redacted]" in logged
    assert "header Bearer [redacted]" in logged
    assert PLAIN_KEY not in logged and BASE64_KEY not in logged


def test_progress_lines_are_masked(keys: tuple[str, str]) -> None:
    from io import StringIO

    from lace.cli.progress import progress_printer

    stream = StringIO()
    show = progress_printer(stream)
    show(ApprovalRequested(thread_id="t", approval_id=1, tool="bash",
                           arguments={"command": f"curl -H 'key: {PLAIN_KEY}'"}))
    show(TurnFailed(thread_id="t", error=f"bad key {BASE64_KEY}"))
    show(EventAppended("t", 1, "tool_result", {
        "is_error": True, "tool_name": "bash", "message": {"content": f"no {PLAIN_KEY}"}}))
    lines = stream.getvalue()
    assert lines.count("[redacted]") == 3, lines
    assert PLAIN_KEY not in lines and BASE64_KEY not in lines
