"""An `acp:NAME` worker that asks lace for many large files and never reads its stdin, where
lace writes the answers: lace's memory stays bounded (it answers one read at a time, each
written only once the last has drained), the agent is ended once it has read nothing for
`stall_timeout_s`, its task fails saying so, and another agent's task goes on meanwhile."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.conftest import query
from tests.hostile.measured import measured_lace
from tests.processes import lace_env

AGENT = Path(__file__).parents[1] / "acp_worker_agent.py"
MB = 1 << 20
READS = 30
"""How many 8 MB reads the deaf agent asks for at once: 240 MB of answers, twice that held
when every answer is kept until written."""
STALL_S = 5


def assigns_both(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    if len(messages) <= 2:
        return ScriptedReply(text=None, tool_calls=[("task_create", {"tasks": [
            {"title": "Deaf", "prompt": "Read", "assigned_to": "acp:deaf"},
            {"title": "Fine", "prompt": "Work", "assigned_to": "acp:fine"}]})])
    return ScriptedReply(text="heard back")


def test_an_agent_that_never_reads_its_stdin_leaves_lace_bounded_and_fails_its_task(
        tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f"[limits]\nstall_timeout_s = {STALL_S}\nturn_timeout_s = 120\n"
        f'[acp_agents.deaf]\ncommand = "{sys.executable}"\nargs = ["{AGENT}", "deaf", '
        f'"{READS}"]\n'
        f'[acp_agents.fine]\ncommand = "{sys.executable}"\nargs = ["{AGENT}", "answer"]\n')
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "big.txt").write_bytes(b"x" * (8 * MB - 1) + b"\n")
    began = time.monotonic()
    with FakeOpenAI(assigns_both) as fake:
        env = lace_env(tmp_path / "home", LACE_CONFIG=str(config),
                       OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        ran = measured_lace(["run", "go", "--model", "openai/fake"], env, workspace)
    took = time.monotonic() - began
    print(f"peak {ran.peak_mb:.0f} MB, {took:.1f} s")
    assert ran.returncode == 0, ran.err
    assert "Traceback" not in ran.err, ran.err
    assert took < 60  # STALL_S, the agent's end and lace's start; not turn_timeout_s
    database = tmp_path / "home" / "lace.db"
    assert query(database, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Deaf", "blocked"), ("Fine", "completed")]
    notes = [note for (note,) in query(database, "SELECT content FROM task_notes n JOIN tasks t "
                                                 "ON t.id = n.task_id WHERE t.title = 'Deaf'")]
    assert any(f"ACP agent 'deaf' did not read what lace wrote to its stdin within "
               f"{STALL_S} s ([limits] "
               "stall_timeout_s); lace ended it" in note for note in notes), notes
    # 240 MB of answers asked for; lace itself (the openai SDK included) is about 100 MB
    assert ran.peak_mb < 200
