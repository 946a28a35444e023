"""`lace keys set PROVIDER` and `lace keys list`, as a person uses them: a key typed at a hidden
prompt or piped in, kept in a private file in lace's home, used when the environment has none
(the environment's own wins), listed by provider name only."""

from __future__ import annotations

import json
import os
import pty
import select
import sqlite3
import sys
from pathlib import Path

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.processes import lace_at

STORED = "sk-stored-in-lace-0123456789"
FROM_ENVIRONMENT = "sk-from-the-environment-0123456789"


def answer(_model: str, _messages: object) -> ScriptedReply:
    return ScriptedReply(text="hello from the fake")


def test_a_stored_key_is_used_when_the_environment_has_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    stored = lace_at(tmp_path, home, "keys", "set", "openai", stdin=STORED + "\n")
    assert stored.returncode == 0, stored.stderr
    assert STORED not in stored.stdout + stored.stderr
    keys_file = home / "keys.json"
    assert keys_file.stat().st_mode & 0o777 == 0o600 and home.stat().st_mode & 0o777 == 0o700

    listed = lace_at(tmp_path, home, "keys", "list")
    assert (listed.returncode, listed.stdout) == (0, "openai  OPENAI_API_KEY\n")
    as_json = lace_at(tmp_path, home, "keys", "list", "--json")
    assert json.loads(as_json.stdout) == [{"provider": "openai", "variable": "OPENAI_API_KEY"}]

    with FakeOpenAI(answer) as fake:
        done = lace_at(tmp_path, home, "run", "--model", "openai/fake", "hi",
                       OPENAI_BASE_URL=fake.base_url)
        assert done.returncode == 0, done.stderr
        assert "hello from the fake" in done.stdout
        assert [exchange.authorization for exchange in fake.exchanges] == [f"Bearer {STORED}"]
        own = lace_at(tmp_path, home, "run", "--model", "openai/fake", "hi again",
                      OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY=FROM_ENVIRONMENT)
        assert own.returncode == 0, own.stderr
        assert fake.exchanges[-1].authorization == f"Bearer {FROM_ENVIRONMENT}"
    with sqlite3.connect(home / "lace.db") as connection:
        sessions = connection.execute("SELECT id FROM threads WHERE parent_id IS NULL").fetchall()
    exported = lace_at(tmp_path, home, "export", sessions[0][0])
    assert exported.returncode == 0, exported.stderr
    assert STORED not in exported.stdout
    assert STORED.encode() not in (home / "lace.db").read_bytes()


def test_a_missing_key_names_the_command_that_stores_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = lace_at(tmp_path, home, "run", "--model", "openai/fake", "hi")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    named = refused.stderr.strip().split(" store the key once with ")[-1]
    assert named.startswith("lace keys set openai (or pick another model)"), refused.stderr
    stored = lace_at(tmp_path, home, *named.split(" (")[0].split()[1:], stdin=STORED + "\n")
    assert stored.returncode == 0, stored.stderr
    with FakeOpenAI(answer) as fake:
        done = lace_at(tmp_path, home, "run", "--model", "openai/fake", "hi",
                       OPENAI_BASE_URL=fake.base_url)
        assert done.returncode == 0, done.stderr
        assert [exchange.authorization for exchange in fake.exchanges] == [f"Bearer {STORED}"]
    several = lace_at(tmp_path, home, "run", "--model", "azure/gpt-4o", "hi")
    assert several.returncode == 2 and "AZURE_API_BASE" in several.stderr
    assert "lace keys set" not in several.stderr  # it stores the key, not an endpoint


def test_a_helper_without_its_key_is_refused_naming_the_key_not_the_assignee_forms(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = lace_at(tmp_path, home, "task", "add", "Check the prices", "--assign",
                      "new:openai/gpt-4o")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr == (
        "lace: error: Cannot call openai/gpt-4o: set OPENAI_API_KEY in the environment, or "
        "store the key once with lace keys set openai (or pick another model) in "
        "'new:openai/gpt-4o'.\n")
    assert not home.exists() or not any(home.glob("lace.db*"))  # refused before any board


def test_a_helper_without_its_key_is_refused_on_a_board_too_and_adds_no_task(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = lace_at(tmp_path, home, "task", "add", "A first task")
    assert made.returncode == 0, made.stderr
    refused = lace_at(tmp_path, home, "task", "add", "Check the prices", "--assign",
                      "new:openai/gpt-4o")
    assert refused.returncode == 2 and "Cannot call openai/gpt-4o" in refused.stderr
    with sqlite3.connect(home / "lace.db") as db:
        assert db.execute("SELECT title FROM tasks").fetchall() == [("A first task",)]


def test_a_key_typed_at_the_terminal_is_never_echoed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    from tests.processes import lace_env

    pid, terminal = pty.fork()
    if pid == 0:  # the child: lace on a real terminal
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-m", "lace", "keys", "set", "openai"],
                  lace_env(home))
    seen = b""
    while b"Key for openai" not in seen:
        ready, _, _ = select.select([terminal], [], [], 30)
        assert ready, f"no prompt; saw {seen!r}"
        seen += os.read(terminal, 1024)
    os.write(terminal, STORED.encode() + b"\n")
    rest = b""
    while True:
        ready, _, _ = select.select([terminal], [], [], 30)
        assert ready, f"lace did not end; saw {rest!r}"
        try:
            chunk = os.read(terminal, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        rest += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, seen + rest
    assert STORED.encode() not in seen + rest
    assert b"Stored the key for openai" in rest
    listed = lace_at(tmp_path, home, "keys", "list")
    assert listed.stdout == "openai  OPENAI_API_KEY\n"
