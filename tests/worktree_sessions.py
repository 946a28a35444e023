"""Sessions whose helpers get git worktrees: a supervisor over a repository with writing tools
allowed, and a root that delegates one edit to each of two scripted helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lace.config import Limits, Settings, ToolSettings, WorkspaceSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.scripted import reply, text, tools_called

WRITERS_ALLOWED = {"file_write": "allow", "file_edit": "allow", "bash": "allow"}


def supervisor(store: Store, workspace: Path, *, policy: dict[str, str] | None = None,
               **workspace_settings: Any) -> Runtime:
    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=2),
                        tools=ToolSettings(policy=policy or WRITERS_ALLOWED),
                        workspace=WorkspaceSettings(**{"isolation": "worktree",
                                                       **workspace_settings}))
    return open_runtime(store, settings, default_client(), check_model=check_model,
                        workspace=workspace)


def delegating_root(*then: tuple[str, dict[str, Any]]) -> Any:
    """Delegates one edit to each of helper_a and helper_b, then makes the calls `then` (one
    per model call), then answers with every tool result it got, separated by `=====`."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tools_called(messages)
        if "delegate" not in done:
            return reply(None, ("delegate", {"tasks": [
                {"title": f"Edit as {name}", "prompt": "Edit shared.txt.",
                 "expected_response": "what you wrote", "assigned_to": f"new:scripted/{name}"}
                for name in ("helper_a", "helper_b")]}))
        step = len(done) - 1
        if step < len(then):
            return reply(None, then[step])
        return reply("\n=====\n".join(text(m) for m in messages if m["role"] == "tool"))

    return handle
