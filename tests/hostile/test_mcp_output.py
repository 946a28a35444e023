"""A hostile MCP server that floods: megabytes on its stderr, a result of a hundred megabytes.
What lace keeps of either is capped (a rotated log, a result cut with a note), and lace's memory
stays bounded while it reads them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.tools.mcp.stdio import text_preview
from tests.conftest import query
from tests.hostile.measured import Measured, measured_lace
from tests.mcp_servers.harness import notes_over_http
from tests.processes import lace_env

FLOOD_SERVER = Path(__file__).parents[1] / "mcp_servers" / "flood_server.py"
MB = 1 << 20


def flood_then_answer(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """Call the flood tool, then the small one (the server still answers), then say how much
    of the flood's result the model was shown."""
    results = [message["content"] for message in messages if message["role"] == "tool"]
    if not results:
        return ScriptedReply(text=None, tool_calls=[("mcp__flood__flood", {})])
    if len(results) == 1:
        return ScriptedReply(text=None, tool_calls=[("mcp__flood__small", {})])
    return ScriptedReply(text=f"shown {len(results[0])} characters, then {results[1]}")


def run_with_flood(tmp_path: Path, **flood_env: str) -> Measured:
    """`lace run` in a fresh workspace whose person's settings (LACE_CONFIG) start the flood
    server and allow its tools."""
    env_table = ", ".join(f'{key} = "{value}"' for key, value in flood_env.items())
    config = tmp_path / "config.toml"
    config.write_text(f'[mcp_servers.flood]\ncommand = "{sys.executable}"\n'
                      f'args = ["{FLOOD_SERVER}"]\nenv = {{ {env_table} }}\n'
                      '[tools.policy]\n"mcp__flood__*" = "allow"\n')
    workspace = tmp_path / "work"
    workspace.mkdir()
    with FakeOpenAI(flood_then_answer) as fake:
        env = lace_env(tmp_path / "home", LACE_CONFIG=str(config),
                       OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        return measured_lace(["run", "go", "--model", "openai/fake"], env, workspace)


def test_a_server_writing_300_mb_to_stderr_leaves_at_most_10_mb_of_log(tmp_path: Path) -> None:
    ran = run_with_flood(tmp_path, FLOOD_STDERR_MB="300", FLOOD_RESULT_MB="0")
    assert ran.returncode == 0, ran.err
    logs = list((tmp_path / "home" / "mcp-logs").iterdir())
    total = sum(log.stat().st_size for log in logs)
    assert 0 < total <= 10 * MB, [(log.name, log.stat().st_size) for log in logs]
    newest = (tmp_path / "home" / "mcp-logs" / "flood.log").read_bytes()
    assert newest.endswith(b"the server complains at length \n")


def test_a_100_mb_result_is_read_with_a_limit_and_stored_capped(tmp_path: Path) -> None:
    ran = run_with_flood(tmp_path, FLOOD_RESULT_MB="100")
    print(f"peak {ran.peak_mb:.0f} MB")
    assert ran.returncode == 0, ran.err
    (stored, _small) = [content for content, in query(
        tmp_path / "home" / "lace.db", "SELECT json_extract(data, '$.message.content') FROM "
        "events WHERE type = 'tool_result' ORDER BY id")]
    assert stored == "x" * 15_000 + (
        "\n… [cut: the server's answer was 104,857,700 bytes, past the 8 MB lace reads of one "
        "message from an MCP server; the first 15,000 characters of its text are above] …")
    assert ran.out == f"shown {len(stored)} characters, then small\n"
    assert ran.peak_mb < 300  # lace itself (the openai SDK included) and far less than a copy


def test_a_huge_notification_is_dropped_and_the_next_answer_arrives(tmp_path: Path) -> None:
    """A message past the limit that answers no request (it names no pending id) is dropped;
    it is not taken for the answer of the call under way."""
    ran = run_with_flood(tmp_path, FLOOD_NOTICE_MB="20")
    assert ran.returncode == 0, ran.err
    results = [content for content, in query(
        tmp_path / "home" / "lace.db", "SELECT json_extract(data, '$.message.content') FROM "
        "events WHERE type = 'tool_result' ORDER BY id")]
    assert results == ["(no content)", "small"]
    assert ran.out == "shown 12 characters, then small\n"


def test_a_100_mb_result_over_http_is_read_with_a_limit(tmp_path: Path) -> None:
    """The server answers in one JSON body (the SDK bounds server-sent events, not bodies)."""

    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return ScriptedReply(text=messages[-1]["content"])
        return ScriptedReply(text=None, tool_calls=[("mcp__notes__flood",
                                                     {"characters": 100 * MB})])

    config = tmp_path / "config.toml"
    workspace = tmp_path / "work"
    workspace.mkdir()
    with notes_over_http(json_response=True) as url, FakeOpenAI(script) as fake:
        config.write_text(f'[mcp_servers.notes]\nurl = "{url}"\n'
                          '[tools.policy]\n"mcp__notes__*" = "allow"\n')
        env = lace_env(tmp_path / "home", LACE_CONFIG=str(config),
                       OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        ran = measured_lace(["run", "go", "--model", "openai/fake"], env, workspace)
    print(f"peak {ran.peak_mb:.0f} MB")
    assert ran.returncode == 0, ran.err
    assert ran.out == (
        "MCP server notes, tool flood: protocol error -32700: Failed to parse JSON response: the "
        "server's answer was more than 8 MB, the most lace reads of one message from an MCP "
        "server\n"), ran.out[:500]
    assert ran.peak_mb < 300  # lace itself (the openai SDK included) and far less than a copy


@pytest.mark.parametrize(("head", "preview"), [
    (b'{"id": 3, "result": {"content": [{"type": "text", "text": "ab\\nc\\u00e9\\u00',
     "ab\nc\u00e9"),
    (b'{"result": {"content": [{"type": "text", "text": "\xc3\xa9t\xc3', "\u00e9t"),
    (b'{"result": {"content": [{"type": "text", "text": "a\\\\b\\', "a\\b"),
    (b'{"result": {"content": [{"type": "image", "data": "iVBORw0KGgo', ""),
])
def test_the_preview_of_a_cut_answer_survives_any_cut(head: bytes, preview: str) -> None:
    """An answer cut inside an escape, a UTF-8 character or a non-text block."""
    assert text_preview(head) == preview
