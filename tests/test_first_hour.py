"""The first hour of a new user, driven as a person drives lace (a real `lace` process): a local
OpenAI-compatible server without a key, a server that is not there, a model that says nothing,
and a reading command pointed at a board that does not exist."""

from __future__ import annotations

import itertools
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.conftest import query, run_cli
from tests.processes import lace, lace_at
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]


def answering(text: str) -> Any:
    return lambda model, messages: ScriptedReply(text=text)


@pytest.mark.parametrize("model", ["openai/my-local-model", "custom_openai/my-local-model"],
                         ids=["direct", "litellm"])
def test_a_local_server_needs_no_key(tmp_path: Path, model: str) -> None:
    with FakeOpenAI(answering("hello from the local server")) as server:
        result = lace(tmp_path, "run", "--model", model, "Say hello.",
                      OPENAI_BASE_URL=server.base_url)
    assert result.returncode == 0, result.stderr
    assert "hello from the local server" in result.stdout
    assert "credentials" not in result.stderr.lower()
    assert [body["model"] for body in server.requests] == ["my-local-model"]


def free_port() -> int:
    """A port nothing listens on (bound and released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("model", ["openai/my-local-model", "custom_openai/my-local-model"],
                         ids=["direct", "litellm"])
def test_a_refused_connection_fails_at_once_naming_the_address(tmp_path: Path,
                                                                model: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = lace(tmp_path, "run", "--model", model, "Say hello.", OPENAI_BASE_URL=url)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lace: ") and url in last and "OPENAI_BASE_URL" in last, last
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        calls = connection.execute("SELECT COUNT(*) FROM llm_calls").fetchone()
    assert calls == (1,)  # not retried: nothing listens there, asking again changes nothing


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries as the default makes them, without their seconds of backoff."""
    monkeypatch.setenv("LACE_LIMITS__RETRY_BASE_S", "0.001")
    monkeypatch.setenv("LACE_LIMITS__RETRY_MAX_S", "0.002")


def test_an_empty_answer_is_no_success(capsys: CaptureFixture, db_path: Path,
                                       models: ScriptedModels, quick_retries: None) -> None:
    models.on("mute", lambda messages: reply(""))
    code, out, err = run_cli(capsys, "run", "Say hello.", "--model", "scripted/mute",
                             "--db", str(db_path))
    assert code == 1 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("lace: ") and "scripted/mute gave no answer" in last, err
    calls = query(db_path, "SELECT error FROM llm_calls")
    assert calls == [("empty answer",)] * 3  # asked again twice, not model_retries (4) times
    code, out, _ = run_cli(capsys, "run", "Say hello.", "--model", "scripted/mute", "--json",
                           "--db", str(db_path))
    assert code == 1 and '"answer": null' in out


def test_an_empty_answer_after_work_is_still_no_success(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels, quick_retries: None,
) -> None:
    """An earlier turn's answer does not stand in for the last turn's silence."""
    answers = itertools.chain(["first answer"], itertools.repeat(""))
    models.on("fading", lambda messages: reply(next(answers)))
    code, out, _ = run_cli(capsys, "run", "one", "--model", "scripted/fading",
                           "--db", str(db_path))
    assert code == 0 and out == "first answer\n"
    root = sqlite3.connect(db_path).execute(
        "SELECT id FROM threads WHERE parent_id IS NULL").fetchone()[0]
    code, out, err = run_cli(capsys, "run", "--continue", root, "two", "--db", str(db_path))
    assert code == 1 and out == "" and "gave no answer" in err


READING = [["tasks"], ["threads"], ["cost"], ["show", "lace_20261125_abcdef"],
           ["export", "lace_20261125_abcdef"], ["approvals"], ["worktrees"],
           ["follow", "lace_20261125_abcdef"], ["wait", "lace_20261125_abcdef"],
           ["stop", "lace_20261125_abcdef"], ["task", "note", "task_1", "a note"]]


@pytest.mark.parametrize("argv", READING, ids=[" ".join(argv[:2]) for argv in READING])
def test_reading_a_board_that_is_not_there_creates_nothing(tmp_path: Path,
                                                           argv: list[str]) -> None:
    missing = tmp_path / "missing.db"
    result = lace(tmp_path / "home", *argv, "--db", str(missing))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and str(missing) in result.stderr
    assert "no lace board" in result.stderr
    assert not missing.exists() and not (tmp_path / "home").exists()


@pytest.mark.parametrize("argv", [[], ["--db", "missing.db"]], ids=["home", "db"])
def test_listing_sessions_before_any_is_one_friendly_line_and_creates_nothing(
        tmp_path: Path, argv: list[str]) -> None:
    """A person who has run nothing yet is told how to start, with where lace looked (a
    mistyped --db shows), and nothing is created."""
    home = tmp_path / "home"
    listed = lace_at(tmp_path, home, "sessions", *argv)
    assert (listed.returncode, listed.stdout) == (0, ""), listed.stderr
    assert listed.stderr.startswith("No sessions yet: no lace board at ")
    assert listed.stderr.endswith('; lace run "PROMPT" starts one.\n')
    assert listed.stderr.count("\n") == 1 and ("missing.db" in listed.stderr) == bool(argv)
    as_json = lace_at(tmp_path, home, "sessions", "--json", *argv)
    assert (as_json.returncode, as_json.stdout, as_json.stderr) == (0, "[]\n", "")
    assert not (tmp_path / "missing.db").exists() and not home.exists()


def test_reading_an_empty_database_writes_nothing_to_it(capsys: CaptureFixture,
                                                         tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    before = empty.read_bytes()
    code, _, err = run_cli(capsys, "tasks", "--db", str(empty))
    assert code == 2 and "no lace board" in err and empty.read_bytes() == before


@pytest.mark.parametrize("argv", [["show", "lace_20261125_nosuch.1"], ["follow", "nope"],
                                  ["run", "--continue", "nope"], ["stop", "nope"],
                                  ["resume", "lace_20261125_nosuch.1"]],
                         ids=["show", "follow", "run", "stop", "resume"])
def test_an_unknown_thread_says_where_the_ids_are_listed(capsys: CaptureFixture, tmp_path: Path,
                                                          argv: list[str]) -> None:
    db = str(tmp_path / "board.db")
    assert run_cli(capsys, "run", "Say hi.", "--db", db)[0] == 0
    code, out, err = run_cli(capsys, *argv, "--db", db)
    assert (code, out) == (2, "")
    assert err.startswith("lace: error: Unknown thread '") and err.count("\n") == 1
    assert err.endswith(" (lace sessions lists the sessions, lace threads --session ID their "
                        "threads)\n")
