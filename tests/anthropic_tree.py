"""A session tree on a scripted Anthropic server: a root that delegates to `new:` helpers on the
same model, which note and complete their tasks; and what the server was sent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lace.llm.anthropic_fake import AnthropicExchange, FakeAnthropic
from lace.llm.types import ScriptedReply
from tests.scripted import ASSIGNED, dutiful_worker, text
from tests.scripted_coordinator import coordinator

MODEL = "anthropic/claude-sonnet-4-5"


def tree_script(helpers: int = 2, model: str = MODEL) -> Any:
    """The root hands out `helpers` tasks to `new:<model>`; each helper does its task."""
    root = coordinator(*[f"new:{model}"] * helpers,
                       titles=tuple(f"Part {number}" for number in range(1, helpers + 1)))
    worker = dutiful_worker("the part is done")

    def script(_model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        helper = any(ASSIGNED.search(text(m)) for m in messages if m["role"] == "user")
        return worker(messages) if helper else root(messages)

    return script


@contextmanager
def anthropic_server(monkeypatch: pytest.MonkeyPatch, helpers: int = 2,
                     variable: str = "ANTHROPIC_API_BASE") -> Iterator[FakeAnthropic]:
    """The scripted server, with lace's environment pointing `anthropic/...` at it (through
    `variable`: ANTHROPIC_API_BASE or ANTHROPIC_BASE_URL)."""
    with FakeAnthropic(tree_script(helpers)) as server:
        for name in ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(variable, server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
        yield server


def marks(body: dict[str, Any]) -> list[str]:
    """Where a request carries `cache_control`: `tool:NAME`, `system:N`, `ROLE:N` (message N)."""
    found = [f"tool:{tool['name']}" for tool in body.get("tools") or [] if "cache_control" in tool]
    found += [f"system:{index}" for index, block in enumerate(body.get("system") or [])
              if isinstance(block, dict) and "cache_control" in block]
    for index, message in enumerate(body["messages"]):
        content = message["content"]
        blocks = content if isinstance(content, list) else []
        found += [f"{message['role']}:{index}" for block in blocks if "cache_control" in block]
    return found


def first_requests_of_helpers(exchanges: list[AnthropicExchange]) -> list[dict[str, Any]]:
    """The first request of each helper (one with an assignment and no answer yet)."""
    return [exchange.body for exchange in exchanges
            if len(exchange.body["messages"]) == 1
            and "You have been assigned task" in str(exchange.body["messages"][0]["content"])]
