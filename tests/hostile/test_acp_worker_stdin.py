"""An `acp:NAME` worker that never reads its stdin, where lace writes its answers, while it asks
for many large files or floods small requests: lace's memory stays bounded (one file's answer at
a time, each written once the last has drained, and at most MAX_OPEN_REQUESTS requests taken
unanswered), the agent is ended once it has taken nothing for `stall_timeout_s`, its task fails
saying so, and another agent's task goes on meanwhile. An agent that reads still gets every
file it asks for at once."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.conftest import query
from tests.hostile.measured import Measured, measured_lace
from tests.processes import lace_env

AGENT = Path(__file__).parents[1] / "acp_worker_agent.py"
MB = 1 << 20
STALL_S = 5


def assigns_both(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    if len(messages) <= 2:
        return ScriptedReply(text=None, tool_calls=[("task_create", {"tasks": [
            {"title": "Asks", "prompt": "Read", "assigned_to": "acp:asks"},
            {"title": "Fine", "prompt": "Work", "assigned_to": "acp:fine"}]})])
    return ScriptedReply(text="heard back")


def run_with_agent(folder: Path, mode: str, count: int) -> tuple[Measured, float]:
    """`lace run` (its home in `folder`) whose root assigns a task to an agent in `mode` of
    tests/acp_worker_agent.py (`deaf`: asks for big.txt, 8 MB, `count` times and never reads
    its stdin; `deaf-many`: `count` small requests; `reads`: reads what it asked for) and one
    to an agent that answers; how it ran and how long it took."""
    folder.mkdir()
    config = folder / "config.toml"
    config.write_text(
        f"[limits]\nstall_timeout_s = {STALL_S}\nturn_timeout_s = 120\n"
        f'[acp_agents.asks]\ncommand = "{sys.executable}"\nargs = ["{AGENT}", "{mode}", '
        f'"{count}"]\n'
        f'[acp_agents.fine]\ncommand = "{sys.executable}"\nargs = ["{AGENT}", "answer"]\n')
    workspace = folder / "work"
    workspace.mkdir()
    (workspace / "big.txt").write_bytes(b"x" * (8 * MB - 1) + b"\n")
    began = time.monotonic()
    with FakeOpenAI(assigns_both) as fake:
        env = lace_env(folder / "home", LACE_CONFIG=str(config),
                       OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        ran = measured_lace(["run", "go", "--model", "openai/fake"], env, workspace)
    return ran, time.monotonic() - began


@pytest.fixture(scope="module")
def asked_once(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    """The same run with one file asked for: lace's own peak with one answer held."""
    ran, _took = run_with_agent(tmp_path_factory.mktemp("once") / "run", "deaf", 1)
    assert ran.returncode == 0, ran.err
    return ran


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "count"), [("deaf", 30), ("deaf-many", 200_000)])
def test_an_agent_that_never_reads_its_stdin_leaves_lace_bounded_and_fails_its_task(
        tmp_path: Path, asked_once: Measured, mode: str, count: int) -> None:
    ran, took = run_with_agent(tmp_path / "run", mode, count)
    print(f"peak {asked_once.peak_mb:.0f} MB asked once, {ran.peak_mb:.0f} MB asked {count} "
          f"times ({mode}, {took:.1f} s)")
    assert ran.returncode == 0, ran.err
    assert "Traceback" not in ran.err, ran.err
    assert took < 60  # STALL_S, the agent's end and lace's start; not turn_timeout_s
    database = tmp_path / "run" / "home" / "lace.db"
    assert query(database, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Asks", "blocked"), ("Fine", "completed")]
    notes = query(database, "SELECT title, content FROM task_notes n JOIN tasks t ON t.id = "
                            "n.task_id ORDER BY n.id")
    assert notes[0][0] == "Fine", notes  # done while lace waited for the deaf agent
    assert any(title == "Asks" and f"ACP agent 'asks' did not read what lace wrote to its "
               f"stdin within {STALL_S} s ([limits] stall_timeout_s); lace ended it" in note
               for title, note in notes), notes
    # held whole, 30 answers of 8 MB took 660 MB (each with its JSON line); 200,000 requests
    # taken at once would hold 200,000 tasks
    assert ran.peak_mb < asked_once.peak_mb + 40


@pytest.mark.slow
def test_an_agent_reading_its_stdin_gets_every_file_it_asks_for_at_once(
        tmp_path: Path) -> None:
    """Answered one at a time, ten reads asked for together all come."""
    ran, _took = run_with_agent(tmp_path / "run", "reads", 10)
    assert ran.returncode == 0, ran.err
    database = tmp_path / "run" / "home" / "lace.db"
    assert query(database, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Asks", "completed"), ("Fine", "completed")]
    assert query(database, "SELECT json_extract(data, '$.message.content') FROM events WHERE "
                           "type = 'agent_message' AND thread_id LIKE '%.1'") == [
        (f"read {10 * 8 * MB:,} characters",)]
