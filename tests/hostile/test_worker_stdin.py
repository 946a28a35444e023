"""The line `lace run --workers` hands its workers (`lace worker --for-run` reads the session
to serve on the first line of its stdin): what a person, or anything that can start the hidden
flag, can put there. Blank, overlong, not UTF-8, an unknown id with a terminal's escapes, or no
line at all: each ends the worker with one line (or quietly, at the end of stdin), serving
nothing, writing nothing, printing no escape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lace.cli.worker import MAX_SESSION_LINE
from tests.conftest import snapshot
from tests.lace_forks import lace_popen
from tests.processes import lace_env
from tests.workers import new_database, write_session

UNKNOWN = "lace: error: Unknown thread"


@pytest.mark.parametrize(("line", "code", "said"), [
    (b"\n", 2, "reads a session id on its first line of stdin"),
    (b"   \t \n", 2, "reads a session id on its first line of stdin"),
    (b"x" * (MAX_SESSION_LINE * 4), 2, UNKNOWN),  # read no further than the cap
    (b"\xff\xfe\xfd lace\n", 2, UNKNOWN),
    (b"\x1b]0;owned\x07\x1b[31mlace_20990101_abcdef\n", 2, UNKNOWN),
    (b"", 0, ""),  # the run ended before its session: quietly
], ids=["blank", "spaces", "overlong", "not-utf8", "escapes", "none"])
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_bad_session_line_serves_nothing_writes_nothing_and_escapes_nothing(
        tmp_path: Path, line: bytes, code: int, said: str, processes: str) -> None:
    db = new_database(tmp_path)
    write_session(db)  # the latest session: nothing read may pick it
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = snapshot(db)
    with lace_popen([sys.executable, "-m", "lace", "worker", "--for-run", "--processes",
                     processes, "--workspace", str(workspace)],
                    env=lace_env(tmp_path / "home", LACE_DB=str(db)), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE) as worker:
        out, err = worker.communicate(line, timeout=60)
    text = err.decode()
    assert worker.returncode == code, text
    assert out == b"" and "Traceback" not in text and "runs the agents of" not in text
    assert "\x1b" not in text and "\x07" not in text
    if said:
        assert said in text and all(said in row for row in text.splitlines()), text
    else:
        assert text == ""
    assert snapshot(db) == before
