"""`lace keys` against bad input and leaks: a bad provider name or key is one line, exit 2,
nothing stored and the key never repeated; a damaged keys file is one line naming it; a stored
key reaches neither `bash`, nor the database, nor lace's output when a provider echoes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.processes import lace_at

STORED = "sk-stored-in-lace-0123456789"


@pytest.mark.parametrize(("provider", "problem"), [
    ("OpenAI", "'OpenAI' is not a provider name"),
    ("../../etc/passwd", "is not a provider name"),
    ("open ai", "is not a provider name"),
    ("x" * 65, "is not a provider name"),
    ("demo", "demo needs no key"),
    ("opnai", "Unknown provider 'opnai': did you mean 'openai'"),
])
def test_a_bad_provider_is_one_line_and_stores_nothing(tmp_path: Path, provider: str,
                                                       problem: str) -> None:
    home = tmp_path / "home"
    done = lace_at(tmp_path, home, "keys", "set", provider, stdin=STORED + "\n")
    assert done.returncode == 2
    assert done.stderr.startswith("lace: error: ") and problem in done.stderr
    assert done.stderr.count("\n") == 1 and STORED not in done.stderr
    assert not (home / "keys.json").exists()


@pytest.mark.parametrize("typed", ["", "   \n", "sk-with a-blank-0123", "sk-\x1b[2J-0123456789",
                                   "sk-" + "x" * 5000])
def test_a_bad_key_is_one_line_and_stores_nothing(tmp_path: Path, typed: str) -> None:
    home = tmp_path / "home"
    done = lace_at(tmp_path, home, "keys", "set", "openai", stdin=typed + "\n")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "nothing stored" in done.stderr
    assert typed.strip() == "" or typed.strip()[:20] not in done.stderr
    assert not (home / "keys.json").exists()


@pytest.mark.parametrize("content", ["not json", '["openai"]',
                                     '{"openai": {"variable": "LD_PRELOAD=x", "key": "k"}}',
                                     '{"openai": {"variable": "LD_PRELOAD", "key": "k"}}'])
def test_a_damaged_keys_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "keys.json").write_text(content)
    for argv in (("keys", "list"), ("tasks",)):
        done = lace_at(tmp_path, home, *argv)
        assert done.returncode == 2
        assert done.stderr.startswith(f"lace: error: Cannot read {home / 'keys.json'}")
        assert done.stderr.count("\n") == 1


def test_a_stored_key_reaches_neither_bash_nor_the_database_nor_the_output(
        tmp_path: Path) -> None:
    home, leak = tmp_path / "home", tmp_path / "bash-saw"
    assert lace_at(tmp_path, home, "keys", "set", "openai", stdin=STORED).returncode == 0

    def calls_bash(_model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return ScriptedReply(text=f"bash said {messages[-1]['content'][:60]}")
        return ScriptedReply(text=None, tool_calls=[
            ("bash", {"command": f'echo "[$OPENAI_API_KEY]" > {leak}; echo "[$OPENAI_API_KEY]"'})])

    with FakeOpenAI(calls_bash) as fake:
        done = lace_at(tmp_path, home, "run", "--yes", "--model", "openai/fake", "go",
                       OPENAI_BASE_URL=fake.base_url)
        assert done.returncode == 0, done.stderr
        assert leak.read_text() == "[]\n"
        fake.echo_key = True  # a careless provider repeats the key in its error
        fake.faults += ["400"]
        echoed = lace_at(tmp_path, home, "run", "--model", "openai/fake", "again",
                         OPENAI_BASE_URL=fake.base_url)
    assert "[redacted]" in echoed.stdout + echoed.stderr
    assert STORED not in done.stdout + done.stderr + echoed.stdout + echoed.stderr
    assert STORED.encode() not in (home / "lace.db").read_bytes()
