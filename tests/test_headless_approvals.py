"""A headless `lace run` whose helper needs an approval says at once, on stderr, what it waits
for, how long, and the exact commands that answer it (these commands are then run as printed);
started at a terminal, it asks there, so the offline demo never strands a newcomer (issue 33)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from lace.cli.asking import QUESTION
from tests.conftest import query
from tests.lace_forks import lace_popen, run_lace
from tests.processes import lace_env, lace_run_at_a_terminal, next_line

LACE = [sys.executable, "-m", "lace"]


def test_a_headless_run_names_what_it_waits_for_and_the_exact_command(tmp_path: Path) -> None:
    workspace, db = tmp_path / "ws", tmp_path / "board.db"
    workspace.mkdir()
    env = lace_env(tmp_path / "home")
    run = lace_popen([*LACE, "run", "--workspace", str(workspace), "--db", str(db),
                            "Plan the launch and write a file with the risks"],
                           stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert run.stderr is not None
    try:
        deadline = time.monotonic() + 60
        line = next_line(run.stderr, run, deadline)
        while not line.startswith("? approval #"):
            line = next_line(run.stderr, run, deadline)
        number = line.split("#", 1)[1].split(":", 1)[0]
        helper = line.split(": ", 1)[1].split(" wants ", 1)[0]
        assert line.endswith(
            f"it waits for your answer (denied after 900 s): lace approve {number} --db {db} "
            f"(once), lace approve {number} --session --db {db} (for the session) or lace deny "
            f"{number} --db {db}\n"), line
        assert f"{helper} wants file_write(" in line
        command = line.split(": ")[-1].split(" (once)")[0]
        answered = run_lace(shlex.split(command)[1:], env=env, timeout=60)
        assert answered.returncode == 0, answered.stderr
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    assert (line + err).count(f"? approval #{number}:") == 1  # said once
    assert QUESTION not in err  # no terminal to ask on
    assert query(db, "SELECT status, decided_by FROM approvals WHERE id = ?", int(number)) == [
        ("approved", "human")]


def test_a_run_started_at_a_terminal_asks_there(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    asked = 0
    prompt = "Write a file with the plan and a file with the risks"
    with lace_run_at_a_terminal(tmp_path / "home", workspace, prompt) as (run, terminal):
        assert run.stderr is not None
        deadline = time.monotonic() + 90
        while asked < 2:
            line = next_line(run.stderr, run, deadline)
            if line.rstrip("\n") == QUESTION:
                asked += 1
                os.write(terminal, b"y\n")
        out, err = run.communicate(timeout=90)
    assert run.returncode == 0, err
    assert asked == 2 and "The draft is in" in out
    assert sorted(path.name for path in workspace.iterdir()) == [
        "a-file-with-the-risks.md", "write-a-file-with-the-plan.md"]
    assert query(tmp_path / "home" / "lace.db",
                 "SELECT status, decided_by FROM approvals") == [("approved", "human")] * 2

