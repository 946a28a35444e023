"""Finding a session (`lace sessions`) and watching one run (`lace follow`), as a person does."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.conftest import query, run_cli
from tests.lace_forks import lace_popen
from tests.processes import lace_env, next_line
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]


def session_ids(db_path: Path | str) -> list[str]:
    return [row[0] for row in query(db_path, "SELECT id FROM threads WHERE parent_id IS NULL "
                                             "ORDER BY created_at")]


@pytest.mark.both_engines
def test_sessions_lists_the_newest_first_with_status_time_and_cost(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels) -> None:
    from lace.llm.litellm_setup import litellm

    def broken(messages: list[dict[str, Any]]) -> ScriptedReply:
        raise litellm().BadRequestError("no such model", llm_provider="scripted", model="x")

    models.on("broken", broken)
    assert run_cli(capsys, "run", "Write the announcement and list the risks.",
                   "--db", str(db_path))[0] == 0
    assert run_cli(capsys, "run", "Plan the party", "--model", "scripted/broken",
                   "--db", str(db_path))[0] == 1
    code, out, _ = run_cli(capsys, "run", "--detach", "Draft the FAQ", "--db", str(db_path))
    assert code == 0
    announce, party, faq = session_ids(db_path)

    code, out, err = run_cli(capsys, "sessions", "--db", str(db_path))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [[faq, "queued"], [party, "failed"],
                                                     [announce, "done"]]
    assert lines[2].endswith("$0.00       Write the announcement and list the risks.")
    started = query(db_path, "SELECT created_at FROM threads WHERE id = ?", announce)[0][0]
    assert f"  {started[:10]} {started[11:16]}  " in lines[2]

    code, out, _ = run_cli(capsys, "sessions", "RISKS", "--json", "--db", str(db_path))
    listed = json.loads(out)
    assert code == 0 and [session["id"] for session in listed] == [announce]
    assert listed[0]["status"] == "done" and listed[0]["tokens"] > 0
    assert set(listed[0]) == {"id", "title", "status", "created_at", "cost_usd", "tokens"}
    code, out, _ = run_cli(capsys, "sessions", "--limit", "1", "--db", str(db_path))
    assert out.split()[0] == faq
    code, out, err = run_cli(capsys, "sessions", "nothing like it", "--db", str(db_path))
    assert (code, out) == (0, "") and "No sessions hold 'nothing like it'" in err


def test_a_title_a_little_over_the_width_is_listed_whole(capsys: CaptureFixture,
                                                         db_path: Path) -> None:
    little = "Plan a small launch: write the announcement and list the risks."  # 63 characters
    assert run_cli(capsys, "run", little, "--db", str(db_path))[0] == 0
    code, out, _ = run_cli(capsys, "sessions", "--db", str(db_path))
    assert code == 0 and out.rstrip("\n").endswith(f"  {little}")  # not "ris… (3 more characters)"


def test_ctrl_c_names_the_session_and_the_command_that_resumes_it(tmp_path: Path) -> None:
    """The run is stopped while its model call is under way (the fake holds it open), so the
    session exists and has work cut off."""
    import signal

    called, released = threading.Event(), threading.Event()

    def held(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        called.set()
        released.wait(60)  # answers only once the run is gone
        return ScriptedReply(text="late")

    with FakeOpenAI(held) as server:
        process = lace_popen(
            [sys.executable, "-m", "lace", "run", "--model", "openai/local", "Say hello."],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=lace_env(tmp_path, OPENAI_BASE_URL=server.base_url))
        assert called.wait(60)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        released.set()
    (root,), = [row for row in query(tmp_path / "lace.db", "SELECT id FROM threads")]
    assert process.returncode == 130 and out == "", err
    verdict = [line for line in err.splitlines() if line.startswith("lace:")]
    assert verdict == [f"lace: interrupted session {root}; resume with "
                       f"lace run --continue {root}"]


def delegating(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """A root that gives one task to a demo helper, then answers once it is done."""
    if any("completed" in str(message.get("content")) and message.get("role") == "user"
           for message in messages[2:]):
        return ScriptedReply(text="all done")
    if messages[-1].get("role") == "tool":
        return ScriptedReply(text="waiting for the helper")
    return ScriptedReply(tool_calls=[("task_create", {"tasks": [
        {"title": "Check the links", "prompt": "Check the links.",
         "assigned_to": "new:demo/worker"}]})])


def lines_of(process: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """The lines of a process's stdout as they come (None at its end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_follow_prints_a_session_as_it_runs_from_before_it_starts(tmp_path: Path) -> None:
    """`lace follow` starts on a session no process runs yet, prints each event into a pipe
    while the run is still under way (its first model call is held until the test has read
    the first line), covers the helper, and ends with exit 0 once the session is quiet."""
    gate = threading.Event()

    def gated(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        gate.wait(60)
        return delegating(model, messages)

    def lace(*argv: str) -> subprocess.Popen[str]:
        return lace_popen([sys.executable, "-m", "lace", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=lace_env(tmp_path, OPENAI_BASE_URL=server.base_url))

    with FakeOpenAI(gated) as server:
        detach = lace("run", "--detach", "--model", "openai/local", "Check the links.")
        out, err = detach.communicate(timeout=120)
        assert detach.returncode == 0, err
        root = out.strip()
        follow = lace("follow", root)
        lines = lines_of(follow)
        run = lace("run", "--continue", root)
        first = [lines.get(timeout=120), lines.get(timeout=120)]
        assert f"  {root}  system_prompt: (" in str(first[0])
        assert f"  {root}  user_message: Check the links." in str(first[1])
        assert not gate.is_set() and run.poll() is None  # the run waits on its model call
        gate.set()
        assert run.wait(timeout=120) == 0
        rest = []
        while (line := lines.get(timeout=120)) is not None:
            rest.append(line)
        assert follow.wait(timeout=60) == 0
    shown = "".join([*map(str, first), *rest])
    assert f"  {root}.1  tool_call: task_complete(" in shown  # the helper's events too
    assert f"  {root}  agent_message: all done" in shown
    assert shown.rstrip().endswith("agent_message: all done")


def test_follow_on_a_session_no_process_runs_says_how_to_run_it(tmp_path: Path) -> None:
    env = lace_env(tmp_path)
    detached = subprocess.run([sys.executable, "-m", "lace", "run", "--detach", "Check it."],
                              capture_output=True, text=True, env=env, timeout=120, check=False)
    assert detached.returncode == 0, detached.stderr
    root = detached.stdout.strip()
    follow = lace_popen([sys.executable, "-m", "lace", "follow", root], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert follow.stderr is not None
        assert next_line(follow.stderr, follow, time.monotonic() + 60) == (
            f"lace: no lace process runs this board, so {root} waits for one; start one with: "
            f"lace run --continue {root} (or lace worker --session {root}, which stays)\n")
    finally:
        follow.send_signal(signal.SIGINT)
        follow.communicate(timeout=60)
    assert follow.returncode == 130


@pytest.mark.both_engines
def test_follow_json_of_a_quiet_session_prints_it_whole_and_ends(
        capsys: CaptureFixture, db_path: Path) -> None:
    assert run_cli(capsys, "run", "Write the announcement and list the risks.",
                   "--db", str(db_path))[0] == 0
    root, = session_ids(db_path)
    code, out, err = run_cli(capsys, "follow", root, "--json", "--db", str(db_path))
    assert code == 0 and err == ""
    events = [json.loads(line) for line in out.splitlines()]
    assert [event["id"] for event in events] == [row[0] for row in query(
        db_path, "SELECT id FROM events ORDER BY id")]
    assert {event["thread_id"] for event in events} == {root, f"{root}.1", f"{root}.2",
                                                        f"{root}.3"}
    assert set(events[0]) == {"id", "thread_id", "type", "data", "created_at"}


def test_follow_an_unknown_session_is_one_line(capsys: CaptureFixture, db_path: Path,
                                               models: ScriptedModels) -> None:
    models.on("quiet", lambda messages: reply("hi"))
    assert run_cli(capsys, "run", "hi", "--model", "scripted/quiet", "--db", str(db_path))[0] == 0
    code, out, err = run_cli(capsys, "follow", "lace_20990101_zzzzzz", "--db", str(db_path))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "lace_20990101_zzzzzz" in err
