"""`lace sessions` against what a session's title may hold (a prompt is anyone's text: terminal
escapes, line breaks, SQL wildcards, megabytes) and odd filters and limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import query, run_cli
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]
HOSTILE = "\x1b]0;pwned\x07\x1b[2J100% of the_work\nsecond line " + "x" * 100_000


def test_a_hostile_title_stays_on_its_line_escaped_and_bounded(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    models.on("quiet", lambda messages: reply("ok"))
    assert run_cli(capsys, "run", HOSTILE, "--model", "scripted/quiet",
                   "--db", str(db_path))[0] == 0
    code, out, err = run_cli(capsys, "sessions", "--db", str(db_path))
    assert code == 0 and err == "" and out.count("\n") == 1
    assert "\x1b" not in out and "\x07" not in out and len(out) < 300
    assert "\\x1b]0;pwned" in out  # whole: a title is 80 characters, the cut mark 20 more
    code, out, _ = run_cli(capsys, "sessions", "--json", "--db", str(db_path))
    (listed,) = json.loads(out)
    assert "\x1b" not in out and listed["title"] == HOSTILE[:80]  # JSON escapes, keeps it


@pytest.mark.parametrize("text", ["%", "%_%", "'; DROP TABLE threads; --", "\x1b[2J", "é" * 5000])
def test_a_filter_is_plain_text_never_a_pattern(capsys: CaptureFixture, db_path: Path,
                                                models: ScriptedModels, text: str) -> None:
    models.on("quiet", lambda messages: reply("ok"))
    assert run_cli(capsys, "run", "Plan the launch", "--model", "scripted/quiet",
                   "--db", str(db_path))[0] == 0
    code, out, err = run_cli(capsys, "sessions", text, "--db", str(db_path))
    assert (code, out) == (0, "") and err.count("\n") == 1 and "\x1b" not in err
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(1,)]


@pytest.mark.parametrize("limit", ["0", "-1", "ten", str(2**70)])
def test_a_bad_limit_is_one_line(capsys: CaptureFixture, db_path: Path, limit: str) -> None:
    code, out, err = run_cli(capsys, "sessions", "--limit", limit, "--db", str(db_path))
    assert (code, out) == (2, "") and err.count("\n") == 1 and not db_path.exists()
