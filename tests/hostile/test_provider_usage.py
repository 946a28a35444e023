"""Hostile usage figures from a provider, over real HTTP from the scripted OpenAI-compatible
server: negative, absurd, fractional, missing or not numbers at all. Every call is recorded with
counts lace can believe (the provider's when plausible, else an estimate from the text), and a
session's token budget stops the run having gone past it by at most one call."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lace.core.usage import MAX_CALL_TOKENS
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.lace_forks import run_lace
from tests.processes import lace_env
from tests.workers import new_database, rows


def lace_run(tmp_path: Path, server: FakeOpenAI, *argv: str,
             **env: str) -> subprocess.CompletedProcess[str]:
    (workspace := tmp_path / "workspace").mkdir(exist_ok=True)
    return run_lace(["run", "--model", "openai/hostile", "--workspace", str(workspace), *argv],
                    env=lace_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url,
                                 OPENAI_API_KEY="sk-fake-key", **env), timeout=120)


@pytest.mark.parametrize("count", [10**30, 1e30, -1_000_000, 12.5, math.inf, math.nan, "12",
                                   None, [1]], ids=repr)
def test_every_call_is_recorded_with_counts_lace_believes(tmp_path: Path, count: Any) -> None:
    db = new_database(tmp_path)
    with FakeOpenAI(lambda model, messages: ScriptedReply(
            text="done", prompt_tokens=count, completion_tokens=count)) as server:
        run = lace_run(tmp_path, server, "Say done.")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == "done\n"
    (prompt, completion, cost), = rows(db, "SELECT prompt_tokens, completion_tokens, "
                                           "cost_usd FROM llm_calls")
    assert 0 < prompt <= MAX_CALL_TOKENS and 0 < completion <= MAX_CALL_TOKENS
    assert (prompt, completion) == rows(db, "SELECT tokens_in, tokens_out FROM agent_metadata")[0]
    assert cost is None  # an unpriced model: its cost is unknown, not $0
    if count == 12.5:
        assert (prompt, completion) == (12, 12)  # plausible: the provider's, whole


def test_negative_usage_cannot_defeat_a_session_token_budget(tmp_path: Path) -> None:
    """The model would call tools for ever, each answer reporting -1,000,000 prompt tokens."""
    db = new_database(tmp_path)
    with FakeOpenAI(lambda model, messages: ScriptedReply(
            tool_calls=[("task_list", {})], prompt_tokens=-1_000_000)) as server:
        run = lace_run(tmp_path, server, "--timeout", "60", "Keep looking.",
                       LACE_BUDGETS__SESSION_TOKENS="20000")
    assert "budget reached" in run.stderr, run.stderr
    calls = [prompt + completion for prompt, completion in rows(
        db, "SELECT prompt_tokens, completion_tokens FROM llm_calls ORDER BY id")]
    assert len(calls) == len(server.exchanges) and all(tokens > 0 for tokens in calls)
    assert 20_000 <= sum(calls) < 20_000 + calls[-1]  # past the cap only by the last call
