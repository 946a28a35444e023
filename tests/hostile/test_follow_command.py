"""`lace follow` against what a session's events may hold (a model's text: terminal escapes,
megabytes on one line) and against ids that name no session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]
HOSTILE = "\x1b]0;pwned\x07\x1b[2Jtrust me\r\nnext " + "y" * 1_000_000


def test_a_hostile_reply_is_one_escaped_line_cut_with_a_mark(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    models.on("loud", lambda messages: reply(HOSTILE))
    assert run_cli(capsys, "run", "hi", "--model", "scripted/loud", "--db", str(db_path))[0] == 0
    code, out, _ = run_cli(capsys, "follow", "--db", str(db_path), root(capsys, db_path))
    answer = out.splitlines()[-1]
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "agent_message: \\x1b]0;pwned" in answer and "more characters; lace show" in answer
    assert len(answer) < 600
    code, out, _ = run_cli(capsys, "follow", "--json", "--db", str(db_path),
                           root(capsys, db_path))
    last = json.loads(out.splitlines()[-1])
    assert code == 0 and "\x1b" not in out
    assert last["data"]["message"]["content"].startswith(HOSTILE[:1000])  # JSON escapes it


def root(capsys: CaptureFixture, db_path: Path) -> str:
    _, out, _ = run_cli(capsys, "sessions", "--json", "--db", str(db_path))
    return str(json.loads(out)[0]["id"])


@pytest.mark.parametrize("session", ["lace_20990101_zzzzzz", "\x1b[2Jlace", "' OR 1=1 --",
                                     "x" * 10_000])
def test_an_id_that_names_no_session_is_one_escaped_line(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels, session: str) -> None:
    models.on("quiet", lambda messages: reply("ok"))
    assert run_cli(capsys, "run", "hi", "--model", "scripted/quiet", "--db", str(db_path))[0] == 0
    code, out, err = run_cli(capsys, "follow", session, "--db", str(db_path))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "\x1b" not in err


def test_a_helpers_id_is_refused_naming_its_session(
        capsys: CaptureFixture, db_path: Path) -> None:
    assert run_cli(capsys, "run", "one and two", "--db", str(db_path))[0] == 0
    session = root(capsys, db_path)
    code, out, err = run_cli(capsys, "follow", f"{session}.1", "--db", str(db_path))
    assert (code, out) == (2, "") and f"its session is {session}" in err
