"""Hostile prompt-cache figures from an Anthropic-style provider, over real HTTP through litellm:
cache counts that are negative, absurd, fractional, not numbers, missing, or larger than the
prompt. The bill stays believable: every call has counts within its prompt, a cost that is
never negative (or unknown), and the agent's totals are the sums of its calls."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from lace.core.usage import MAX_CALL_COST_USD, MAX_CALL_TOKENS
from lace.runtime import Runtime
from tests.anthropic_tree import MODEL, anthropic_server
from tests.conftest import query

PARSED: list[dict[str, Any]] = [
    {"cache_read_input_tokens": -5_000_000},
    {"cache_creation_input_tokens": 10**30},
    {"cache_read_input_tokens": None, "cache_creation_input_tokens": None},
    {"input_tokens": -10**9, "cache_read_input_tokens": 10**9},
    {"input_tokens": 5, "cache_read_input_tokens": 9_000_000,
     "cache_creation_input_tokens": 9_000_000},
]
"""Figures litellm passes on: the session completes on counts lace believes."""
UNPARSED: list[dict[str, Any]] = [
    {"cache_read_input_tokens": 12.5},
    {"cache_read_input_tokens": math.inf},
    {"cache_read_input_tokens": 1e300, "cache_creation_input_tokens": -1},
    {"cache_read_input_tokens": "lots", "cache_creation_input_tokens": [1]},
]
"""Figures litellm itself cannot read (it raises): each call is a failed one, billed nothing."""


@pytest.mark.parametrize("patch", PARSED + UNPARSED, ids=repr)
async def test_a_providers_cache_counts_cannot_corrupt_the_bill(
        runtime: Runtime, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        patch: dict[str, Any]) -> None:
    with anthropic_server(monkeypatch, helpers=1) as server:
        server.usage_patch = patch
        root = await runtime.start_session("Do the part.", MODEL)
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 120)
    calls = query(db_path, "SELECT prompt_tokens, completion_tokens, cache_read_tokens, "
                           "cache_write_tokens, cost_usd, error FROM llm_calls")
    assert calls and len(server.exchanges) >= len(calls)
    for prompt, completion, read, write, cost, _ in calls:
        assert 0 <= prompt <= MAX_CALL_TOKENS and 0 <= completion <= MAX_CALL_TOKENS
        assert (read or 0) + (write or 0) <= prompt, (prompt, read, write)
        assert read is None or read >= 0
        assert write is None or write >= 0
        assert cost is None or 0 <= cost <= MAX_CALL_COST_USD
    totals = query(db_path, "SELECT SUM(tokens_in), SUM(tokens_out), SUM(cost_usd) "
                            "FROM agent_metadata")[0]
    sums = query(db_path, "SELECT SUM(prompt_tokens), SUM(completion_tokens), "
                          "COALESCE(SUM(cost_usd), 0) FROM llm_calls")[0]
    assert totals[:2] == sums[:2] and totals[2] == pytest.approx(sums[2])
    if patch in PARSED:
        assert query(db_path, "SELECT status FROM tasks") == [("completed",)]
    else:
        assert {row[:5] for row in calls} == {(0, 0, None, None, 0.0)}, calls
        assert all(row[-1] for row in calls)  # every call failed, with litellm's reason
